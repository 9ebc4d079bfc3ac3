"""GPUSpawner: KubeSpawner with gpuhub's form, policy and GPU-aware pod manifest.

Here: its traits, the launch options applied to KubeSpawner's pod, the pod requests' retries,
and a start that ends with a reason rather than "Timeout". Its other parts, one module each,
mixed in: the cluster's GPUs and the quota before any pod (:mod:`gpuhub.hub.kube_capacity`),
GPUs claimed through DRA (:mod:`gpuhub.hub.kube_claims`), the wait in Kueue's line
(:mod:`gpuhub.hub.kube_queue`) and progress in words (:mod:`gpuhub.hub.kube_progress`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import inspect
import json
import re
import time
from typing import Any

from kubespawner import KubeSpawner
from traitlets import Bool, Float, TraitError, Unicode, default, validate

from gpuhub.core.gpu_resources import is_gpu_resource
from gpuhub.core.options import FIELDS, LaunchOptions
from gpuhub.core.policy import GPUType
from gpuhub.hub.form import Preset
from gpuhub.hub.kube_capacity import LiveCapacity
from gpuhub.hub.kube_claims import DRAClaims
from gpuhub.hub.kube_progress import SpawnProgress
from gpuhub.hub.kube_queue import KueueLine
from gpuhub.hub.monitor.utilization import NoUtilization, PrometheusUtilization
from gpuhub.hub.progress import timeout_message
from gpuhub.hub.refusals import log_name, refusal
from gpuhub.hub.spawner_mixin import GPUSpawnerMixin
from gpuhub.k8s.labels import QUEUE_NAME_LABEL
from gpuhub.k8s.pods import SHM_VOLUME, gpu_env, gpu_resources, placement, shm_volume

__all__ = ["SHM_VOLUME", "GPUSpawner"]

# Answers after which the same request may well succeed.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


_QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_FORBIDDEN = re.compile(r'^[a-z]+ "[^"]*" is forbidden: ')


def admission_refusal(body: str | bytes | None) -> str:
    """The reason in a ``403 Forbidden`` Status (a quota, a missing PriorityClass or service
    account), without its ``pods "name" is forbidden:`` preamble."""
    try:
        message = str(json.loads(body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        message = ""
    return _FORBIDDEN.sub("", message, count=1) or "the request was forbidden"


def _listed(value: Any) -> Any:
    """KubeSpawner's list-or-dict traits (``tolerations``, ``volumes``, ...) as a list: a
    dict's values in key order, as KubeSpawner itself lists them in the pod."""
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    return value


class NeverSchedulable(Exception):
    """The scheduler says no node can run this pod, and waiting will not change that."""


class GPUSpawner(SpawnProgress, KueueLine, DRAClaims, LiveCapacity, GPUSpawnerMixin, KubeSpawner):
    """Spawns single-user pods with the GPUs, node selector and tolerations of a GPU type."""

    gpu_platform = "kubernetes"

    prometheus_url = Unicode(
        "",
        config=True,
        help="""The cluster's Prometheus that scrapes NVIDIA's dcgm-exporter (e.g.
        ``http://prometheus-operated.monitoring:9090``). GPU utilization per pod comes from it;
        without it the hub knows no utilization, so ``gpu_idle_reclaim`` never stops anything.""",
    )

    @default("gpu_utilization_source")
    def _utilization_from_prometheus(self) -> type:
        return PrometheusUtilization if self.prometheus_url else NoUtilization

    def gpu_utilization_settings(self) -> dict[str, Any]:
        return {"url": self.prometheus_url}

    capacity_wait = Float(
        2.0,
        config=True,
        help="""Seconds the spawn form waits for the first view of the cluster's GPUs (once per
        hub process); after that the figures come from a watch-backed cache at once.""",
    )
    kueue_queue_name = Unicode(
        "",
        config=True,
        help="""Kueue LocalQueue, in the servers' namespace, that GPU servers wait in (Kueue's
        pod integration, https://kueue.sigs.k8s.io/docs/tasks/run/plain_pods/): a GPU server's
        pod carries its ``kueue.x-k8s.io/queue-name`` label, Kueue holds it until its
        ClusterQueue has room, and the spawn page shows the place in line and what is in front
        for up to ``gpu_queue_timeout`` seconds. "": servers do not queue; the scheduler
        places them when GPUs are free. Servers without GPUs never queue.""",
    )

    @validate("kueue_queue_name")
    def _valid_queue_name(self, proposal: Any) -> str:
        name = str(proposal["value"])
        if name and not _QUEUE_NAME.fullmatch(name):
            raise TraitError(
                "GPUSpawner.kueue_queue_name must name a LocalQueue (lower-case letters, "
                f"digits, '-' and '.', at most 253 characters); got {name!r}."
            )
        return name

    fail_fast_unschedulable = Bool(
        True,
        config=True,
        help="""Fail a spawn at once when the scheduler reports that no node can ever run the pod
        (labels or taints no node satisfies). Turn off with a cluster autoscaler that adds such
        nodes on demand.""",
    )

    _gpuhub_starting = False
    _gpuhub_start_task: asyncio.Future[Any] | None = None

    # -- presets from profile_list --------------------------------------------------------
    async def _profile_list(self) -> list[dict[str, Any]]:
        profiles = self.profile_list
        if callable(profiles):
            profiles = profiles(self)
            if inspect.isawaitable(profiles):
                profiles = await profiles
        return self._get_initialized_profile_list(profiles or [])

    async def profile_presets(self) -> list[Preset]:
        """Each profile is a preset; its ``gpuhub`` dict holds form values, e.g. ``{"gpus": 1}``."""
        return [
            Preset(
                slug=p["slug"],
                display_name=p.get("display_name", p["slug"]),
                values={k: v for k, v in (p.get("gpuhub") or {}).items() if k in FIELDS},
            )
            for p in await self._profile_list()
        ]

    def extra_option_keys(self) -> set[str]:
        """KubeSpawner's own profile options travel in user_options; it validates them."""
        profiles = self.profile_list if isinstance(self.profile_list, list) else []
        keys = set()
        for profile in profiles:
            for name in profile.get("profile_options", {}):
                keys.update({name, f"{name}--unlisted-choice"})
        return keys - set(FIELDS)

    # -- options to pod -------------------------------------------------------------------
    _BASE_ATTRS = (
        "image",
        "node_selector",
        "tolerations",
        "volumes",
        "volume_mounts",
        "extra_resource_limits",
        "extra_resource_guarantees",
        "extra_labels",
    )

    # The admin's values of _BASE_ATTRS, taken before this spawner object's first spawn.
    _gpuhub_configured: dict[str, Any] | None = None

    def _configured(self, attr: str) -> Any:
        """The admin's value of ``attr``, before any spawn of this spawner object changed it."""
        if self._gpuhub_configured is None:
            self._gpuhub_configured = {}
        base = self._gpuhub_configured
        if attr not in base:
            base[attr] = copy.deepcopy(getattr(self, attr))
        return copy.deepcopy(base[attr])

    def apply_launch_options(self, options: LaunchOptions) -> None:
        # A spawner object is reused across stop/start: always start from the admin's values.
        for attr in self._BASE_ATTRS:
            setattr(self, attr, self._configured(attr))
        if options.image is not None:
            self.image = options.image
        # Guarantee == limit: GPU servers get the Guaranteed QoS class and are not evicted
        # first under node pressure, and memory use is predictable.
        self.cpu_guarantee = self.cpu_limit = options.cpu
        self.mem_guarantee = self.mem_limit = options.memory
        # The GPU rules shared with job pods (gpuhub.k8s.pods): limit == request, the type's
        # node selector and tolerations, a memory-backed /dev/shm.
        limits = {k: v for k, v in self.extra_resource_limits.items() if not is_gpu_resource(k)}
        guarantees = {
            k: v for k, v in self.extra_resource_guarantees.items() if not is_gpu_resource(k)
        }
        limits.update(gpu_resources(options))
        guarantees.update(gpu_resources(options))
        selector, tolerations = placement(options)
        shm = shm_volume(options)
        if shm is not None:
            self.node_selector = {**self.node_selector, **selector}
            self.tolerations = [*_listed(self.tolerations), *tolerations]
            self.volumes = [*_listed(self.volumes), shm[0]]
            self.volume_mounts = [*_listed(self.volume_mounts), shm[1]]
        self.extra_resource_limits = limits
        self.extra_resource_guarantees = guarantees
        if self._queued(options):
            # Kueue's webhook gates the pod until its Workload is admitted (gpuhub.k8s.kueue).
            self.extra_labels = {**self.extra_labels, QUEUE_NAME_LABEL: self._waits_in()}

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update(gpu_env(self.launch_options))
        return env

    def _as_placed(self, gpu_type: GPUType) -> GPUType:
        """The type as its pods land: with the admin's spawner-wide selector and tolerations."""
        selector = self._configured("node_selector") or {}
        tolerations = _listed(self._configured("tolerations") or [])
        if not selector and not tolerations:
            return gpu_type
        return dataclasses.replace(
            gpu_type,
            node_selector={**selector, **gpu_type.node_selector},
            tolerations=(*tolerations, *gpu_type.tolerations),
        )

    async def load_user_options(self) -> None:
        # KubeSpawner calls this at the top of start(): make sure gpuhub validated first.
        await self.ensure_launch_options()
        await super().load_user_options()

    # -- resilience -------------------------------------------------------------------------
    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        # KubeSpawner gives up on any error but 409; an apiserver that is briefly unwell
        # (429, 5xx) is worth another try within k8s_api_request_retry_timeout. Should the
        # pod have been created after all, the retry's 409 makes KubeSpawner replace it.
        from kubernetes_asyncio.client.rest import ApiException

        claims = self._gpuhub_claims
        try:
            if claims is not None:
                # Before its pod: a pod whose template is missing waits for it.
                await self._claim_templates().replace(claims)
            made = bool(await super()._make_create_pod_request(pod, request_timeout))
        except ApiException as exc:
            if claims is not None:
                await self._delete_claim_template()  # a failed start leaves nothing behind
            if exc.status in TRANSIENT_STATUSES:
                self.log.warning("Creating pod %s: HTTP %s, retrying", self.pod_name, exc.status)
                return False
            if exc.status == 403:
                # Admission said no (the namespace's ResourceQuota, a missing PriorityClass):
                # waiting will not change it, and the user should read why, not "error".
                reason = admission_refusal(exc.body)
                self.log.warning("Kubernetes refused the pod of %s: %s", log_name(self), reason)
                raise refusal(f"Kubernetes refused the server's pod: {reason}", 403) from None
            raise
        if made and claims is not None:
            await self._own_claim_template(claims["metadata"]["name"])
        return made

    async def _make_delete_pod_request(
        self, pod_name: str, delete_options: Any, grace_seconds: int, request_timeout: float
    ) -> bool:
        from kubernetes_asyncio.client.rest import ApiException

        try:
            return bool(
                await super()._make_delete_pod_request(
                    pod_name, delete_options, grace_seconds, request_timeout
                )
            )
        except ApiException as exc:
            if exc.status in TRANSIENT_STATUSES:
                self.log.warning("Deleting pod %s: HTTP %s, retrying", pod_name, exc.status)
                return False
            raise

    def is_pod_running(self, pod: Any) -> bool:
        # KubeSpawner polls this while it waits for the pod: the place to notice, from the
        # scheduler's and kubelet's events, that waiting longer is pointless.
        if self._gpuhub_starting and self.fail_fast_unschedulable and pod is not None:
            for _, step in self._steps():
                self._gpuhub_last_step = step
                if step.fatal:
                    raise NeverSchedulable(step.message)
        return bool(super().is_pod_running(pod))

    async def _start(self) -> Any:
        self._gpuhub_last_step = None
        self._gpuhub_starting = True
        self._gpuhub_asked_at = time.time()
        self._gpuhub_joined_at = 0
        # End before JupyterHub's own start_timeout, so that the user reads why, not "Timeout";
        # time in Kueue's line counts against gpu_queue_timeout instead.
        try:
            return await self._start_within(max(self.admin_start_timeout - 2, 1))
        except BaseException:
            self._release_grant()  # no pod will hold these GPUs
            raise
        finally:
            self.restore_start_timeout()

    async def _start_within(self, limit: float) -> Any:
        """KubeSpawner's start, given ``limit`` seconds outside Kueue's line and
        ``gpu_queue_timeout`` seconds in it."""
        start = asyncio.ensure_future(super()._start())
        self._gpuhub_start_task = start
        began = last = time.monotonic()
        queued = 0.0
        try:
            while True:
                done, _ = await asyncio.wait({start}, timeout=1.0)
                if done:
                    return start.result()
                now = time.monotonic()
                if self._in_kueue():
                    queued += now - last
                    if queued > self.gpu_queue_timeout:
                        message = self._kueue_timeout_message()
                        self.log.warning("Spawn of %s: %s", log_name(self), message)
                        raise refusal(message, 503)
                last = now
                if now - began - queued > limit:
                    raise TimeoutError
        except NeverSchedulable as exc:
            self.log.warning("Spawn of %s cannot succeed: %s", log_name(self), exc)
            raise refusal(str(exc), 503) from None
        except TimeoutError:
            message = timeout_message(self._gpuhub_last_step, limit + 2)
            self.log.warning("Spawn of %s timed out: %s", log_name(self), message)
            error = TimeoutError(message)
            error.jupyterhub_message = message  # type: ignore[attr-defined]
            raise error from None
        finally:
            self._gpuhub_starting = False
            self._gpuhub_start_task = None
            if not start.done():
                start.cancel()
                with contextlib.suppress(BaseException):
                    await start

    async def stop(self, now: bool = False) -> None:
        # Stopped while starting (the spawn page's "Leave the line", an admin): the start
        # must not go on waiting for a pod that is being deleted.
        if self._gpuhub_start_task is not None:
            self._gpuhub_start_task.cancel()
        try:
            await super().stop(now=now)
            await self._delete_claim_template()
        finally:
            self._release_grant()
