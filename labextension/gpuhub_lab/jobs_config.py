"""Jobs settings of a user's Jupyter server: the policy, the deployment mode, the backends.

Under JupyterHub the spawner writes the admin's policy into ``GPUHUB_POLICY`` /
``GPUHUB_GROUPS`` (see :mod:`gpuhub.jobs.policy_env`) and these traits default to it; a
standalone ``jupyter lab`` sets the same keys in its config instead::

    c.GPUHubJobs.gpu_types = {"gpu": {"display_name": "RTX 4090", "max_gpus": 2}}
    c.GPUHubJobs.default_limits = {"max_gpus": 2}

Kubernetes mode is on when ``jobs_url`` (env ``GPUHUB_JOBS_URL``) is set: every kind is
forwarded to the ``gpuhub`` hub service by ``remote_backend_class``.
"""

from __future__ import annotations

import getpass
import os
from importlib import import_module
from typing import Any

from traitlets import Int, List, Unicode, default
from traitlets.config import LoggingConfigurable

from gpuhub.core.env import GPU_TYPE_ENV, JOBS_URL_ENV
from gpuhub.core.policy import Policy
from gpuhub.core.policy_traits import PolicyTraits
from gpuhub.jobs.backend import JobBackend, JobRouter, RemoteBackend
from gpuhub.jobs.model import KIND_NAMES, KINDS, MAX_NOTEBOOK_BYTES, MAX_WORKERS
from gpuhub.jobs.policy_env import read_policy_env

DEFAULT_REMOTE = "gpuhub.jobs.remote.HubServiceBackend"


class GPUHubJobs(PolicyTraits, LoggingConfigurable):
    """Settings for ``/gpuhub/api/jobs``: the spawners' policy traits
    (:class:`gpuhub.core.policy_traits.PolicyTraits`, defaulting to the spawner's policy), and
    the deployment. ``gpu_types`` empty on a machine with GPUs: this server's GPUs are offered
    as one type, as LocalGPUSpawner does."""

    groups = List(Unicode(), config=True, help="The user's groups (env ``GPUHUB_GROUPS``).")
    owner = Unicode(config=True, help="Whose jobs these are (env ``JUPYTERHUB_USER``).")
    jobs_url = Unicode(
        config=True,
        help="The gpuhub hub service's URL; set: Kubernetes mode (env GPUHUB_JOBS_URL).",
    )
    remote_backend_class = Unicode(
        DEFAULT_REMOTE,
        config=True,
        help="Import path of the RemoteBackend subclass that forwards to the hub service.",
    )
    max_notebook_size = Int(MAX_NOTEBOOK_BYTES, config=True, help="Largest notebook a job takes.")
    max_workers = Int(MAX_WORKERS, config=True, help="Most workers of a PyTorchJob/TFJob.")

    # -- defaults from the spawner's environment ---------------------------------------------
    def _env_policy(self) -> dict[str, Any]:
        try:
            return read_policy_env(os.environ)[0]
        except ValueError as exc:
            self.log.error("gpuhub jobs: ignoring the spawner's policy: %s", exc)
            return {}

    @default("images")
    def _images(self) -> dict[str, Any]:
        return dict(self._env_policy().get("images") or {})

    @default("custom_image_pattern")
    def _custom_image_pattern(self) -> str:
        return str(self._env_policy().get("custom_image_pattern") or "")

    @default("gpu_types")
    def _gpu_types(self) -> dict[str, Any]:
        return dict(self._env_policy().get("gpu_types") or {})

    @default("cpu_range")
    def _cpu_range(self) -> dict[str, Any]:
        return dict(self._env_policy().get("cpu_range") or {})

    @default("memory_range")
    def _memory_range(self) -> dict[str, Any]:
        return dict(self._env_policy().get("memory_range") or {})

    @default("group_limits")
    def _group_limits(self) -> dict[str, Any]:
        return dict(self._env_policy().get("group_limits") or {})

    @default("default_limits")
    def _default_limits(self) -> dict[str, Any]:
        return dict(self._env_policy().get("default_limits") or {"max_gpus": 1})

    @default("groups")
    def _groups(self) -> list[str]:
        try:
            return read_policy_env(os.environ)[1]
        except ValueError:
            return []

    @default("owner")
    def _owner(self) -> str:
        return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()

    @default("jobs_url")
    def _jobs_url(self) -> str:
        return os.environ.get(JOBS_URL_ENV, "")

    # -- what the API uses ---------------------------------------------------------------------
    @property
    def kubernetes_mode(self) -> bool:
        return bool(self.jobs_url)

    def policy(self, local_gpu_ids: list[str]) -> Policy:
        """The validated policy (raises ``PolicyConfigError`` naming the bad setting)."""
        gpu_types = dict(self.gpu_types)
        default_limits = dict(self.default_limits)
        if not gpu_types and local_gpu_ids and not self.kubernetes_mode:
            # Nobody configured GPUs: offer this machine's, all of them unless the admin
            # set default limits (as LocalGPUSpawner does for a workstation).
            count = len(local_gpu_ids)
            gpu_types = {"gpu": {"display_name": _gpu_name(), "max_gpus": count}}
            configured = "default_limits" in self.config.get("GPUHubJobs", {})
            if not configured and "default_limits" not in self._env_policy():
                default_limits["max_gpus"] = count
        if local_gpu_ids and not self.kubernetes_mode:
            # A local job runs on this server's GPUs: the dialog, %submit and the API all read
            # their maximum from this policy, so it says what this server can give.
            gpu_types = {
                key: {**spec, "max_gpus": min(int(spec.get("max_gpus", 1)), len(local_gpu_ids))}
                if isinstance(spec, dict)
                else spec
                for key, spec in gpu_types.items()
            }
        return Policy.from_config(
            **{**self.policy_config(), "gpu_types": gpu_types, "default_limits": default_limits}
        )

    def request_defaults(
        self, policy: Policy, backend: JobBackend, local_gpu_ids: list[str]
    ) -> dict[str, object]:
        """Values for what a job request leaves out: the one place the dialog's initial values,
        ``%submit`` without ``--gpus`` and ``POST /gpuhub/api/jobs`` all take them from.

        One GPU when the user may have one (and, locally, when this server has one), else none.
        """
        most = policy.choices_for(self.groups).max_gpus
        if not self.kubernetes_mode:
            most = min(most, len(local_gpu_ids))
        return {"gpus": min(1, most), **backend.request_defaults()}

    def router(self, root_dir: str, local_gpu_ids: list[str]) -> JobRouter:
        """Backends per kind for this deployment, and why the other kinds are unavailable."""
        if self.kubernetes_mode:
            token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
            try:
                module, _, name = self.remote_backend_class.rpartition(".")
                cls = getattr(import_module(module), name)
                if not (isinstance(cls, type) and issubclass(cls, RemoteBackend)):
                    raise TypeError(f"{self.remote_backend_class} is not a RemoteBackend")
            except (ImportError, AttributeError, TypeError, ValueError) as exc:
                self.log.error("gpuhub jobs: cannot load the hub service client: %s", exc)
                reason = (
                    "Jobs are unavailable: this server cannot load the client for the gpuhub "
                    "hub service; tell your admin."
                )
                return JobRouter({}, {kind: reason for kind in KINDS})
            remote = cls(self.jobs_url, token, root_dir=root_dir)
            served: dict[str, JobBackend] = {k: remote for k in KINDS if k in remote.kinds}
            return JobRouter(
                served,
                {
                    kind: f"This cluster does not run {KIND_NAMES[kind]}s."
                    for kind in KINDS
                    if kind not in served
                },
            )
        from gpuhub.jobs.local import LocalBackend

        local = LocalBackend(
            root_dir,
            owner=self.owner,
            gpu_ids=local_gpu_ids,
            gpu_type=os.environ.get(GPU_TYPE_ENV) or None,
        )
        off_cluster = (
            "A {} runs on a Kubernetes cluster, and this server is not connected to one"
            "; submit it as a training job to run it here."
        )
        return JobRouter(
            {"job": local},
            {kind: off_cluster.format(KIND_NAMES[kind]) for kind in KINDS if kind != "job"},
        )


def _gpu_name() -> str:
    from gpuhub.core.devices import discover

    names = {d.name for d in discover().devices}
    return names.pop() if len(names) == 1 else "NVIDIA GPU"
