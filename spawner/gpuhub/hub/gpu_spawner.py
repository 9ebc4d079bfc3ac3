"""GPUSpawner: KubeSpawner with gpuhub's form, policy and GPU-aware pod manifest."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import inspect
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from kubespawner import KubeSpawner
from traitlets import Bool, Float, TraitError, Unicode, default, validate

from gpuhub.core import words
from gpuhub.core.gpu_resources import is_gpu_resource
from gpuhub.core.holdings import QuotaExceeded
from gpuhub.core.options import FIELDS, LaunchOptions
from gpuhub.core.policy import GPUType
from gpuhub.core.quantity import format_cpu, format_memory, human_memory
from gpuhub.hub.form import Preset
from gpuhub.hub.ledger.capacity import (
    FIRST_SYNC_WAIT,
    CapacityUnavailable,
    shared_capacity,
    shared_ledger,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Grant, Ledger
from gpuhub.hub.monitor.utilization import NoUtilization, PrometheusUtilization
from gpuhub.hub.progress import SpawnRequest, Step, describe, timeout_message, waiting_for_gpus
from gpuhub.hub.spawner_mixin import GPUSpawnerMixin, log_name, refusal
from gpuhub.k8s.dra import (
    TEMPLATE_SUFFIX,
    ClaimTemplates,
    claim_template,
    claims_gpus,
    container_claims,
    missing_class_words,
    pod_claims,
    shared_device_classes,
    template_name,
    unreadable_words,
)
from gpuhub.k8s.kueue import Pending, gated, shared_kueue, waiting_words
from gpuhub.k8s.labels import (
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    SERVER_COMPONENT,
)
from gpuhub.k8s.pods import SHM_VOLUME, gpu_env, gpu_resources, placement, shm_volume

__all__ = ["SHM_VOLUME", "GPUSpawner"]

QUOTA_UNAVAILABLE = (
    "Your GPU quota cannot be checked right now (the cluster did not answer); "
    "try again in a minute, or start a server without GPUs."
)
CAPACITY_UNAVAILABLE = (
    "Live GPU availability cannot be shown right now (the cluster did not answer). "
    "You can still start a server; it will wait for free GPUs."
)
# The hub has just started and is still reading the cluster (a big one takes a while).
QUOTA_LOADING = (
    "Your GPU quota cannot be checked yet: the hub is still reading the cluster's pods "
    "after its start (over a minute so far); try again shortly, or start a server without "
    "GPUs."
)
CAPACITY_LOADING = (
    "Live GPU availability is still loading: the hub is reading the cluster's nodes and "
    "pods after its start; reload this page in a few seconds. You can still start a server; "
    "it will wait for free GPUs."
)


def dra_note(
    types: list[GPUType],
    figures: Mapping[str, GPUCapacity],
    missing: Mapping[str, str],
    forbidden: str,
) -> str:
    """What the form says of DRA types: each one whose DeviceClass the cluster lacks
    (``missing``' sentences), then those the hub may not read (``forbidden``: a 403, the
    capacity watch's sentence), which have no figure."""
    notes = list(missing.values())
    unread = [t.display_name for t in types if t.dra is not None and t.key not in figures]
    if unread and forbidden:
        notes.append(unreadable_words(unread, forbidden))
    return " ".join(notes)


def _unavailable(cache: Any, loading: str, failed: str) -> str:
    """Why the cluster's figures are missing: still loading, or the cluster did not answer."""
    return failed if getattr(cache, "error", "") is not None else loading


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


# DRA types whose missing DeviceClass the log has said, (type key, class): once per process.
_LOGGED_MISSING: set[tuple[str, str]] = set()


def _age(meta: dict[str, Any]) -> float:
    """Seconds since an object's ``creationTimestamp`` (0 if unreadable)."""
    from datetime import datetime

    try:
        made = datetime.fromisoformat(str(meta.get("creationTimestamp")).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return time.time() - made.timestamp()


class NeverSchedulable(Exception):
    """The scheduler says no node can run this pod, and waiting will not change that."""


class GPUSpawner(GPUSpawnerMixin, KubeSpawner):
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

    _gpuhub_last_step: Step | None = None
    _gpuhub_starting = False

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

    def _queued(self, options: LaunchOptions | None) -> bool:
        """Whether this spawn's pod waits in Kueue's queue: a GPU server, with a queue set."""
        return bool(
            self.kueue_queue_name
            and options is not None
            and options.gpu_type is not None
            and options.gpus > 0
        )

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update(gpu_env(self.launch_options))
        return env

    # -- GPUs claimed through DRA (gpuhub.k8s.dra) --------------------------------------------
    # The template this start's pod claims its GPUs from (made by get_pod_manifest, created
    # before the pod by _make_create_pod_request); None: no DRA claim.
    _gpuhub_claims: dict[str, Any] | None = None
    # Once per hub process: templates of servers whose pod never came (a hub that died
    # between the two) are deleted.
    _gpuhub_orphans_swept = False
    ORPHAN_AGE = 600.0  # seconds: far more than between a template and its pod's creation

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's pod, with a DRA type's claim: the pod's ``resourceClaims`` names the
        template made for this request, the notebook container's ``resources.claims`` the
        claim; no GPU resource (:func:`gpuhub.k8s.pods.gpu_resources` gives none)."""
        from kubernetes_asyncio.client import CoreV1ResourceClaim, V1PodResourceClaim

        pod = await super().get_pod_manifest()
        options = self.launch_options
        self._gpuhub_claims = None
        if not claims_gpus(options):
            return pod
        assert options is not None
        name = template_name(self.pod_name)
        labels = {k: v for k, v in (pod.metadata.labels or {}).items() if k != QUEUE_NAME_LABEL}
        labels[MANAGED_BY_LABEL] = MANAGED_BY
        annotations = {
            k: v
            for k, v in (pod.metadata.annotations or {}).items()
            if k.startswith("hub.jupyter.org/")
        }
        self._gpuhub_claims = claim_template(options, name, self.namespace, labels, annotations)
        pod.spec.resource_claims = [
            V1PodResourceClaim(name=c["name"], resource_claim_template_name=name)
            for c in pod_claims(name)
        ]
        container = pod.spec.containers[0]
        container.resources.claims = [
            CoreV1ResourceClaim(name=c["name"]) for c in container_claims()
        ]
        return pod

    def _claim_templates(self) -> ClaimTemplates:
        return ClaimTemplates(self.api.api_client, self.namespace)

    async def _delete_claim_template(self) -> None:
        """The server's template, if it had one (a 404 is fine: the pod took it along). Only
        where some GPU type is claimed through DRA: no request is made for nothing."""
        if not any(t.dra is not None for t in self.gpu_policy.gpu_types.values()):
            return
        with contextlib.suppress(Exception):
            await self._claim_templates().delete(template_name(self.pod_name))

    async def _sweep_orphan_templates(self) -> None:
        """Delete the servers' templates that no pod owns and whose pod is gone: a hub
        stopped between creating one and its pod. Once per hub process."""
        cls = self.__class__
        if cls._gpuhub_orphans_swept:
            return
        cls._gpuhub_orphans_swept = True
        from kubernetes_asyncio.client.exceptions import ApiException

        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}={SERVER_COMPONENT}"
        try:
            templates = await self._claim_templates().list(selector)
            for item in templates:
                meta = item.get("metadata") or {}
                if meta.get("ownerReferences") or _age(meta) < self.ORPHAN_AGE:
                    continue
                name = str(meta.get("name") or "")
                if await self._pod_exists(name.removesuffix(TEMPLATE_SUFFIX)):
                    continue  # its pod runs on it (owning it failed); its stop deletes it
                self.log.info("Deleting ResourceClaimTemplate %s: no server pod owns it", name)
                await self._claim_templates().delete(name)
        except (TimeoutError, ApiException, OSError) as exc:
            cls._gpuhub_orphans_swept = False  # try again later
            self.log.info("Sweeping servers' ResourceClaimTemplates failed: %s", exc)

    async def _pod_exists(self, name: str) -> bool:
        from kubernetes_asyncio.client.rest import ApiException

        try:
            await self.api.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def _missing_classes(self, types: list[GPUType]) -> dict[str, str]:
        """``{type key: sentence}`` for DRA types whose DeviceClass the cluster lacks (one
        shared read of the classes a minute); the admin reads each once in the log."""
        wanted = {t.key: t.dra.device_class for t in types if t.dra is not None}
        if not wanted:
            return {}
        missing = await shared_device_classes(self.api.api_client).missing(wanted.values())
        said = {}
        for key, device_class in wanted.items():
            if device_class not in missing:
                continue
            gpu_type = self.gpu_policy.gpu_types[key]
            said[key] = missing_class_words(gpu_type.display_name, device_class)
            if (key, device_class) not in _LOGGED_MISSING:
                _LOGGED_MISSING.add((key, device_class))
                self.log.warning(
                    "gpuhub: gpu_types[%r].dra.device_class is %r, but this cluster has no "
                    "DeviceClass of that name (is its DRA driver installed?); the type is "
                    "shown as unavailable.",
                    key,
                    device_class,
                )
        return said

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

    async def _own_claim_template(self, name: str) -> None:
        """The pod owns its template from now on: it goes with the pod, even should the hub
        never stop the server. Should that fail, the pod has its template all the same, and
        the server's stop deletes it."""
        from kubernetes_asyncio.client.rest import ApiException

        try:
            pod = await self.api.read_namespaced_pod(self.pod_name, self.namespace)
            await self._claim_templates().own(
                name,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.pod_name,
                    "uid": pod.metadata.uid,
                    "blockOwnerDeletion": True,
                },
            )
        except (TimeoutError, ApiException, OSError) as exc:
            self.log.warning("Giving ResourceClaimTemplate %s to its pod failed: %s", name, exc)

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

    # -- live capacity ----------------------------------------------------------------------
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

    async def gpu_capacity(self) -> tuple[dict[str, GPUCapacity], str]:
        """Free/total GPUs per type from the shared watch of the cluster (no LIST per view)."""
        if not self.gpu_policy.gpu_types:
            return {}, ""
        types = list(self.gpu_policy.gpu_types.values())
        if any(t.dra is not None for t in types):
            await self._sweep_orphan_templates()
        missing = await self._missing_classes(types)
        cache = shared_capacity(self.api)
        if not await cache.wait_ready(self.capacity_wait):
            return {}, _unavailable(cache, CAPACITY_LOADING, CAPACITY_UNAVAILABLE)
        try:
            figures = cache.capacity(map(self._as_placed, types))
        except CapacityUnavailable:
            return {}, _unavailable(cache, CAPACITY_LOADING, CAPACITY_UNAVAILABLE)
        # A DRA type whose DeviceClass the cluster lacks has no device: none free, and why.
        figures.update({key: GPUCapacity(free=0, total=0) for key in missing})
        return figures, dra_note(types, figures, missing, cache.dra.forbidden)

    async def gpu_ledger(self, wait: float | None = None) -> Ledger:
        """The hub's ledger of this cluster, once the pod watch has answered (waiting up to
        ``wait`` seconds, else ``capacity_wait``, for the first sync after the hub's start)."""
        cache = shared_capacity(self.api)
        if not await cache.wait_ready(max(wait or 0.0, self.capacity_wait)):
            raise refusal(_unavailable(cache, QUOTA_LOADING, QUOTA_UNAVAILABLE), 503)
        return shared_ledger(self.api)

    async def reserve_launch(self, options: LaunchOptions) -> None:
        """Refuse, before any pod exists, a request no node of the cluster could ever hold,
        or one that would put the user over their GPU quota; else reserve its GPUs in the
        hub's ledger (a grant, until its pod shows in the watch)."""
        gpu_type = options.gpu_type
        if gpu_type is None or options.gpus == 0:
            return
        await self._check_fit(gpu_type, options)
        if self._queued(options):
            await self._expect_kueue()
            await self._choose_queue()
            # The time in Kueue's line comes on top of the time to start, and JupyterHub
            # waits for start() that long too (set before it starts waiting).
            self.extend_start_timeout()
        limit = self.gpu_quota_limit()
        if limit is None:
            return
        ledger = await self.gpu_ledger(wait=FIRST_SYNC_WAIT)
        async with ledger.lock(self.user.name):
            try:
                ledger.check(
                    self.user.name, limit, options.gpu_amount, replacing=("server", self.name)
                )
            except (QuotaExceeded, CapacityUnavailable) as exc:
                if isinstance(exc, CapacityUnavailable):
                    message = _unavailable(ledger.source, QUOTA_LOADING, QUOTA_UNAVAILABLE)
                    raise refusal(message, 503) from None
                self.log.warning("Spawn of %s over quota: %s", log_name(self), exc.message)
                raise refusal(exc.message, exc.status) from None
            # Counted from now on, until the pod shows in the watch (then the pod counts).
            ledger.grant(
                Grant(
                    self.user.name,
                    "server",
                    self.name,
                    options.gpus,
                    gpu_type.key,
                    time.time() + self.start_timeout + 60,
                    share=options.share,
                    memory=options.gpu_memory or 0,
                )
            )

    async def _expect_kueue(self) -> None:
        """Say once in the log when servers are meant to queue but the cluster runs no Kueue:
        they start as they would without a queue, and the admin should know why."""
        if self.__class__._gpuhub_kueue_checked:
            return
        self.__class__._gpuhub_kueue_checked = True
        if await shared_kueue(self.api.api_client).version() is None:
            self.log.warning(
                "GPUSpawner.kueue_queue_name is %r, but the cluster serves no Kueue "
                "(kueue.x-k8s.io): GPU servers start without waiting in a queue.",
                self.kueue_queue_name,
            )

    _gpuhub_kueue_checked = False

    # -- a fair queue: one LocalQueue per user (line_order = "fair", gpuhub.k8s.kueue) -------
    _gpuhub_user_queue = ""  # this spawn's own LocalQueue ("": the admin's queue)

    async def _choose_queue(self) -> None:
        """With ``line_order = "fair"`` where Kueue offers admission fair sharing, this
        user's own LocalQueue (made on first use): Kueue orders LocalQueues by past usage.
        Elsewhere the admin's queue, first come, first served; the hub says why once."""
        self._gpuhub_user_queue = ""
        if self.gpu_line_order().fair:
            self._gpuhub_user_queue = await shared_kueue(self.api.api_client).own_queue(
                self.namespace, self.kueue_queue_name, self.user.name, "GPU servers", self.log
            )

    def _waits_in(self) -> str:
        """The LocalQueue this spawn's pod waits in: the user's own, or the admin's."""
        return self._gpuhub_user_queue or self.kueue_queue_name

    def _release_grant(self) -> None:
        if self.gpu_quota_limit() is not None:
            with contextlib.suppress(RuntimeError):
                shared_ledger(self.api).release_grant(self.user.name, self.name)

    async def _check_fit(self, gpu_type: GPUType, options: LaunchOptions) -> None:
        if gpu_type.dra is not None:
            # Without its DeviceClass the claim could never be allocated, whatever the slices.
            missing = await self._missing_classes([gpu_type])
            if missing:
                raise refusal(missing[gpu_type.key])
        cache = shared_capacity(self.api)
        if not await cache.wait_ready(self.capacity_wait):
            return  # cannot tell now; the scheduler will
        try:
            fit = cache.fit(self._as_placed(gpu_type), options.gpus)
        except CapacityUnavailable:
            return
        name = gpu_type.display_name
        if fit.nodes == 0:
            raise refusal(
                f"This cluster has no nodes with {words.gpu_noun(name, 2)}, so the server could never start; "
                "pick another GPU type."
            )
        if options.gpus > fit.max_gpus:
            raise refusal(
                f"No node in this cluster has {words.gpus(options.gpus, name)} (the most on one node "
                f"is {fit.max_gpus}); ask for {fit.max_gpus} or fewer."
            )
        memory = options.gpu_memory or 0
        if fit.max_device_memory is not None and memory > fit.max_device_memory:
            # A DRA type's devices say their memory: a share none could ever hold.
            raise refusal(
                f"No {name} GPU has {human_memory(memory)} of memory; the largest has "
                f"{human_memory(fit.max_device_memory)} ({fit.largest_device}); ask for less "
                "GPU memory."
            )
        if options.cpu > fit.max_cpu:
            raise refusal(
                f"No node with {words.gpus(options.gpus, name)} has "
                f"{words.plural(options.cpu, 'CPU')} "
                f"(the most is {format_cpu(fit.max_cpu)}); ask for fewer CPUs."
            )
        if options.memory > fit.max_memory:
            raise refusal(
                f"No node with {words.gpus(options.gpus, name)} has {format_memory(options.memory)} "
                f"of memory (the most is {format_memory(fit.max_memory)}); ask for less memory."
            )

    # -- progress ---------------------------------------------------------------------------
    def spawn_request(self) -> SpawnRequest:
        """What this spawn asked for, in the words of the form."""
        options = self.launch_options
        if options is None:
            return SpawnRequest(image=self.image)
        image = options.image or self.image
        images = self.gpu_policy.images
        if options.image_key and options.image_key in images:
            image = images[options.image_key].display_name
        gpu_type = options.gpu_type
        return SpawnRequest(
            image=image,
            gpus=options.gpus,
            gpu_name=gpu_type.display_name if gpu_type else "",
            gpu_resource=gpu_type.resource_name if gpu_type else "",
            cpu=options.cpu,
            memory=options.memory,
        )

    def _type_capacity(self) -> GPUCapacity | None:
        options = self.launch_options
        if options is None or options.gpu_type is None:
            return None
        try:
            figures = shared_capacity(self.api).capacity([self._as_placed(options.gpu_type)])
        except CapacityUnavailable:
            return None
        return figures.get(options.gpu_type.key)

    def _steps(self) -> list[tuple[str, Step]]:
        """This pod's events so far, told as steps: ``(event uid, step)``."""
        request = self.spawn_request()
        capacity = self._type_capacity()
        steps = []
        for event in self.events:
            step = describe(event, request, capacity)
            if step is not None:
                steps.append((event["metadata"]["uid"], step))
        return steps

    async def progress(self) -> Any:
        """Spawn progress in words for the hub's progress bar (see :mod:`gpuhub.hub.progress`)."""
        if not self.events_enabled:
            return
        await self._start_watching_events()
        shown: set[str] = set()
        last_message = ""
        request = self.spawn_request()
        while True:
            start_future = self._start_future
            done = start_future is not None and start_future.done()
            for uid, step in self._steps():
                if uid in shown:
                    continue
                shown.add(uid)
                self._gpuhub_last_step = step
                if step.message != last_message:
                    last_message = step.message
                    yield {"progress": step.progress, "message": step.message}
            if not done and self._in_kueue():
                # Held by Kueue: no scheduler events yet; the line is what there is to say.
                event = await self._kueue_event()
                if event["message"] != last_message:
                    last_message = event["message"]
                    yield event
            last = self._gpuhub_last_step
            if last is not None and last.waiting_for_gpus and not done:
                # GPUs come and go while we wait: keep the "N free now" figure current.
                message = waiting_for_gpus(request, self._type_capacity())
                if message != last_message:
                    last_message = message
                    yield {"progress": last.progress, "message": message}
            if done:
                break
            await asyncio.sleep(0.5)

    # -- waiting in Kueue's line (kueue_queue_name) ------------------------------------------
    _gpuhub_asked_at = 0.0  # when this spawn started: the line's deadline counts from it
    _gpuhub_joined_at = 0  # the place at which the spawn was first seen in line
    _gpuhub_start_task: asyncio.Future[Any] | None = None

    def _pod(self) -> dict[str, Any] | None:
        """This spawn's pod as KubeSpawner's pod watch last saw it (JSON), or None."""
        return self.pod_reflector.pods.get(f"{self.namespace}/{self.pod_name}")

    def _in_kueue(self) -> bool:
        """Whether Kueue still holds this spawn's pod back (its admission gate is on)."""
        return self._queued(self.launch_options) and gated(self._pod())

    def _kueue_deadline(self) -> float:
        return self._gpuhub_asked_at + self.gpu_queue_timeout

    async def _kueue_place(self) -> tuple[int | None, list[Pending] | None]:
        """(place in line, 1 = next; the line) of this spawn's pod in Kueue's LocalQueue: the
        place is None until Kueue lists its Workload, the line None where it cannot be read."""
        uid = ((self._pod() or {}).get("metadata") or {}).get("uid")
        try:
            line = await shared_kueue(self.api.api_client).line(self.namespace, self._waits_in())
        except Exception as exc:  # an apiserver hiccup: the page says so, the wait goes on
            self.log.info("Reading Kueue's line %s failed: %s", self._waits_in(), exc)
            line = None
        for pending in line or []:
            if uid and any(owner[2] == uid for owner in pending.owners):
                if self._gpuhub_user_queue:  # alone in its queue: the ClusterQueue's place
                    return pending.in_cluster_queue, line
                return pending.position, line
        return None, line

    async def _kueue_event(self) -> dict[str, Any]:
        """The spawn page's progress event while the pod waits in Kueue's line, in the words
        queued jobs use too (:func:`gpuhub.k8s.kueue.waiting_words`): what of the queue's GPUs
        is in use and by how many, and the place in line and what is in front; the bar moves
        from 10 % (where it joined) to 25 % (next); ``gpuhub_line`` is for the page's "Leave
        the line" button and clock (``templates/hub/spawn_pending.html``)."""
        place, line = await self._kueue_place()
        request = self.spawn_request()
        deadline = self._kueue_deadline()
        until = (
            f" gpuhub waits until {words.moment_utc(deadline)}, "
            f"{words.duration(self.gpu_queue_timeout)} after you asked."
        )
        try:
            use = await shared_kueue(self.api.api_client).usage(self.namespace, self._waits_in())
        except Exception as exc:  # an apiserver hiccup: the page goes on without the figures
            self.log.info("Reading Kueue's queue %s failed: %s", self.kueue_queue_name, exc)
            use = None
        said = waiting_words(
            self.kueue_queue_name,
            gpus=request.gpus,
            gpu_name=request.gpu_name,
            resource=request.gpu_resource,
            use=use,
            place=place,
            line=line,
            fair=bool(self._gpuhub_user_queue),
        )
        if place is None:
            return {
                "progress": 10,
                "message": f"{said}{until}",
                "gpuhub_line": {"place": None, "deadline": round(deadline)},
            }
        self._gpuhub_joined_at = max(self._gpuhub_joined_at, place)
        joined = self._gpuhub_joined_at
        return {
            "progress": round(10 + 15 * (joined - place + 1) / joined),
            "message": f"{said}{until}",
            "gpuhub_line": {"place": place, "deadline": round(deadline)},
        }

    def _kueue_timeout_message(self) -> str:
        request = self.spawn_request()
        return (
            f"Your server waited {words.duration(self.gpu_queue_timeout)} in the queue "
            f'"{self.kueue_queue_name}" for {words.gpus(request.gpus, request.gpu_name)} and '
            "Kueue did not admit it; try again later, or ask for fewer GPUs or another type."
        )

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
