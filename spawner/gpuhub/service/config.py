"""The jobs service's configuration: ``/etc/gpuhub/service.yaml`` as the Helm chart writes it.

::

    namespace: jupyterhub                  # where user servers and jobs run
    policy: {images, custom_image_pattern, gpu_types, cpu_range, memory_range,
             group_limits, default_limits}  # the hub's PolicyTraits, copied by the chart
    gpu_quota: {default: 2, groups: {staff: 8}}   # the hub's HubPolicyTraits.gpu_quota (ledger)
    job_image: ghcr.io/gpuhub/gpuhub-notebook:0.1.0
    home_volume: {claim_name_template: "claim-{username}", mount_path: /home/jovyan, shared: false}
    kfp: {endpoint: "", ui_url: "", namespace: kubeflow,
          service_account: gpuhub-pipeline-steps}  # what steps run as: no token (required
                                                   # with an endpoint while pipeline is offered)
    max_notebook_bytes: 1048576
    max_output_bytes: 67108864             # most bytes inflated from a job's log (its notebook)
    kueue: {queue_name: "",                # Kueue LocalQueue jobs wait in; "": no queueing
            line_order: fifo}              # the hub's line_order: fair = each user's own
                                           # LocalQueue where Kueue orders by past usage
    kinds: [job, pytorchjob, tfjob, trainjob, pipeline]   # the kinds offered (all by default)
    trainer: {runtimes: [torch-distributed], default_runtime: torch-distributed,
              service_account: ""}         # TrainJob runtimes offered; what its pods run as
                                           # (its nodes' container gets no token whatever it is)

Every problem is reported as one :class:`ServiceConfigError` naming the key, at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuhub.core.holdings import GPUQuota
from gpuhub.core.line_order import DEFAULT_HALF_LIFE, FIFO, LineOrder
from gpuhub.core.policy import Policy, PolicyConfigError
from gpuhub.core.policy_traits import POLICY_KEYS
from gpuhub.jobs.k8s.manifests import HomeVolume, KubeJobSettings
from gpuhub.jobs.model import KINDS, Runtimes
from gpuhub.jobs.pipeline import KFPSettings

# A LocalQueue's name, as it must also be a label value (Kueue's queue-name label).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")


class ServiceConfigError(ValueError):
    """The configuration file is wrong; the message names the key."""


@dataclass(frozen=True)
class ServiceConfig:
    policy: Policy
    quota: GPUQuota
    jobs: KubeJobSettings
    kfp: KFPSettings
    kinds: tuple[str, ...] = field(default_factory=lambda: tuple(KINDS))  # in gpuhub's order
    runtimes: Runtimes = field(
        default_factory=lambda: Runtimes(("torch-distributed",), "torch-distributed")
    )

    @property
    def namespace(self) -> str:
        return self.jobs.namespace

    @classmethod
    def load(cls, path: str | Path) -> ServiceConfig:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ServiceConfigError(f"cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ServiceConfigError(f"{path} is not valid YAML: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> ServiceConfig:
        if not isinstance(data, Mapping):
            raise ServiceConfigError("the configuration must be a mapping of keys to values")
        known = {"namespace", "policy", "gpu_quota", "job_image", "home_volume", "kfp"}
        known |= {"max_notebook_bytes", "max_output_bytes", "kueue", "kinds", "trainer"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ServiceConfigError(f"unknown key {unknown[0]!r}; the keys are {sorted(known)}")
        namespace = _text(data, "namespace", "default")
        policy_config = _mapping(data, "policy")
        extra = sorted(set(policy_config) - set(POLICY_KEYS))
        if extra:
            raise ServiceConfigError(f"policy.{extra[0]} is not a policy setting")
        try:
            policy = Policy.from_config(**policy_config).check_platform("kubernetes")
        except PolicyConfigError as exc:
            raise ServiceConfigError(f"policy: {exc}") from None
        try:
            quota = GPUQuota.from_config(_mapping(data, "gpu_quota"))
        except PolicyConfigError as exc:
            raise ServiceConfigError(str(exc)) from None
        home = _mapping(data, "home_volume")
        template = _text(home, "claim_name_template", "claim-{username}", "home_volume.")
        if "{username}" not in template and "{unescaped_username}" not in template:
            raise ServiceConfigError("home_volume.claim_name_template must contain {username}")
        shared = home.get("shared", False)
        if not isinstance(shared, bool):
            raise ServiceConfigError("home_volume.shared must be true or false")
        max_bytes = data.get("max_notebook_bytes", 1024 * 1024)
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise ServiceConfigError("max_notebook_bytes must be a positive number of bytes")
        max_output = data.get("max_output_bytes", 64 * 1024 * 1024)
        if (
            not isinstance(max_output, int)
            or isinstance(max_output, bool)
            or not 1024 * 1024 <= max_output <= 1024**3
        ):
            raise ServiceConfigError(
                "max_output_bytes must be a number of bytes between 1 MiB and 1 GiB"
            )
        kfp = _mapping(data, "kfp")
        extra_kfp = sorted(set(kfp) - {"endpoint", "ui_url", "namespace", "service_account"})
        if extra_kfp:
            raise ServiceConfigError(f"kfp.{extra_kfp[0]} is not a kfp setting")
        kueue = _mapping(data, "kueue")
        extra_kueue = sorted(set(kueue) - {"queue_name", "line_order"})
        if extra_kueue:
            raise ServiceConfigError(f"kueue.{extra_kueue[0]} is not a kueue setting")
        queue_name = _text(kueue, "queue_name", "", "kueue.")
        if queue_name and not _DNS_SUBDOMAIN.fullmatch(queue_name):
            raise ServiceConfigError(
                "kueue.queue_name must name a LocalQueue (lower-case letters, digits, '-' and "
                "'.', at most 63 characters)"
            )
        try:
            order = LineOrder.from_config(kueue.get("line_order", FIFO), DEFAULT_HALF_LIFE, "kueue")
        except PolicyConfigError as exc:
            raise ServiceConfigError(str(exc).rstrip(".")) from None
        kinds = _kinds(data.get("kinds", list(KINDS)))
        trainer = _mapping(data, "trainer")
        extra_trainer = sorted(set(trainer) - {"runtimes", "default_runtime", "service_account"})
        if extra_trainer:
            raise ServiceConfigError(f"trainer.{extra_trainer[0]} is not a trainer setting")
        runtimes = _runtimes(trainer, [k for k in kinds if KINDS[k].takes_runtime])
        account = _text(trainer, "service_account", "", "trainer.")
        if account and not _DNS_SUBDOMAIN.fullmatch(account):
            raise ServiceConfigError("trainer.service_account must name a ServiceAccount")
        if "pipeline" in kinds and _text(kfp, "endpoint", "", "kfp."):
            _no_token_account(_text(kfp, "service_account", "", "kfp."))
        job_image = _text(data, "job_image", "")
        if not job_image:
            raise ServiceConfigError("job_image must name the image jobs run in by default")
        return cls(
            policy=policy,
            quota=quota,
            jobs=KubeJobSettings(
                namespace=namespace,
                job_image=job_image,
                home_volume=HomeVolume(
                    claim_name_template=template,
                    mount_path=_text(home, "mount_path", "/home/jovyan", "home_volume.").rstrip(
                        "/"
                    ),
                    shared=shared,
                ),
                max_notebook_bytes=max_bytes,
                max_output_bytes=max_output,
                kueue_queue=queue_name,
                kueue_fair=order.fair,
                job_service_account=account,
            ),
            kfp=KFPSettings(
                endpoint=_text(kfp, "endpoint", "", "kfp."),
                ui_url=_text(kfp, "ui_url", "", "kfp."),
                namespace=_text(kfp, "namespace", "kubeflow", "kfp."),
                service_account=_text(kfp, "service_account", "", "kfp."),
            ),
            kinds=kinds,
            runtimes=runtimes,
        )


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise ServiceConfigError(f"{key} must be a mapping")
    return value


def _text(data: Mapping[str, Any], key: str, default: str, prefix: str = "") -> str:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ServiceConfigError(f"{prefix}{key} must be a string")
    return value or default


def _no_token_account(account: str) -> None:
    """No job pod holds cluster credentials: a pipeline step runs as ``kfp.service_account``,
    and without one as Kubeflow Pipelines' own account, whose token KFP mounts into it."""
    if not account:
        raise ServiceConfigError(
            "kfp.service_account is empty while pipeline steps are offered (kfp.endpoint is "
            "set), so steps would run as Kubeflow Pipelines' own account with its token "
            "mounted; name a ServiceAccount that mounts no token and has no role, such as "
            "the chart's gpuhub-pipeline-steps"
        )


def _kinds(value: Any) -> tuple[str, ...]:
    """The kinds the admin offers: some of gpuhub's, at least one, in gpuhub's order."""
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(k, str) and k in KINDS for k in value)
    ):
        raise ServiceConfigError(
            f"kinds must list the job kinds offered, one or more of {list(KINDS)}; got {value!r}"
        )
    return tuple(k for k in KINDS if k in value)


def _runtimes(trainer: Mapping[str, Any], runtime_kinds: list[str]) -> Runtimes:
    """The ClusterTrainingRuntimes offered for the kinds that take one (``runtime_kinds``,
    those offered: a TrainJob), and the default (the first if unset). A cluster that offers
    such a kind offers at least one runtime."""
    names = trainer.get("runtimes", ["torch-distributed"])
    if not isinstance(names, list) or not all(
        isinstance(n, str) and _DNS_SUBDOMAIN.fullmatch(n) for n in names
    ):
        raise ServiceConfigError(
            f"trainer.runtimes must list ClusterTrainingRuntime names; got {names!r}"
        )
    if runtime_kinds and not names:
        kind = runtime_kinds[0]
        raise ServiceConfigError(
            f"trainer.runtimes is empty while kinds offers {kind}; name a "
            f"ClusterTrainingRuntime (such as torch-distributed) or stop offering {kind}"
        )
    default = trainer.get("default_runtime") or (names[0] if names else None)
    if default is not None and default not in names:
        raise ServiceConfigError(
            f"trainer.default_runtime {default!r} is not one of trainer.runtimes {names!r}"
        )
    return Runtimes(tuple(dict.fromkeys(names)), default)
