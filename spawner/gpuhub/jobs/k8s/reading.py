"""The Kubernetes backend's state and its reading of the cluster: discovery of the kinds it
serves, a user's workloads and pods, and the phase a workload is in
(:class:`gpuhub.jobs.k8s.backend.KubernetesBackend` is built on it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuhub.core.quantity import human_memory
from gpuhub.jobs.backend import JobBackend
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.objects import Objects
from gpuhub.jobs.k8s.resources import gpu_resource, workload_gpus, workload_resources
from gpuhub.jobs.k8s.status import Obj, PodLog, queue_of, queue_phase, refusal_text
from gpuhub.jobs.kinds import of_object, workload_kind, workload_kinds
from gpuhub.jobs.kinds.phase import Phase
from gpuhub.jobs.model import JobNotFound, JobRecord, check_job_id
from gpuhub.k8s.kueue import KueueAPI, QueueUse
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from gpuhub.k8s.rawapi import request_json as _json
from gpuhub.k8s.rawapi import served_resources

log = logging.getLogger(__name__)


DISCOVERY_TTL = 60.0  # seconds a discovery answer is trusted


class WorkloadReader(JobBackend):
    """The backend's state, and how it finds and reads a user's workloads and pods, and
    says what phase a workload is in. The other parts (:mod:`.queue`, :mod:`.records`,
    :mod:`.create`, :mod:`.quota`) build on it."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: m.KubeJobSettings,
        *,
        gpu_names: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.settings = settings
        # Typed Any: the generated stubs want models, the apiserver takes the plain dicts
        # these manifests are (and validated as such).
        self.core: Any = client.CoreV1Api(api)
        self.objects = Objects(api, settings.namespace)
        # Every kind whose jobs are Kubernetes objects, as registered when it starts.
        self.kinds = frozenset(k.name for k in workload_kinds())  # type: ignore[misc]
        self.networking: Any = client.NetworkingV1Api(api)
        self.gpu_names = dict(gpu_names or {})  # gpu type key -> display name
        self._locks: dict[str, asyncio.Lock] = {}
        self._discovered: tuple[float, frozenset[str]] | None = None
        self._needed_seen: dict[str, float] = {}  # Needed.path -> when it was last found
        self.kueue = KueueAPI(api)
        self._kueue_said: OrderedDict[str, str] = OrderedDict()  # Workload uid -> what Kueue said
        self._final_logs: OrderedDict[str, PodLog] = OrderedDict()
        self._tombstones: dict[str, tuple[float, JobRecord]] = {}

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    # -- discovery ------------------------------------------------------------------------
    async def served_custom_kinds(self) -> frozenset[str]:
        """Which kinds served by an operator a cluster may lack (Kubeflow's) this cluster
        serves, by discovery of their groups, cached."""
        now = time.monotonic()
        if self._discovered and now - self._discovered[0] < DISCOVERY_TTL:
            return self._discovered[1]
        optional = [k for k in workload_kinds() if k.operator is not None]
        served: set[str] = set()
        for group, version in sorted({(k.resource.group, k.resource.version) for k in optional}):
            plurals = await served_resources(self.api, group, version)
            if plurals is None:
                continue
            served |= {
                k.name
                for k in optional
                if (k.resource.group, k.resource.version) == (group, version)
                and k.resource.plural in plurals
            }
        self._discovered = (now, frozenset(served))
        return self._discovered[1]

    async def kueue_served(self) -> bool:
        """Whether the cluster serves Kueue's Workload API (``kueue.x-k8s.io``, v1beta2 or
        v1beta1: :class:`gpuhub.k8s.kueue.KueueAPI`)."""
        return await self.kueue.version() is not None

    async def queue_problem(self) -> str | None:
        """Why jobs cannot run here when they are to wait in Kueue's queue and the cluster
        does not run Kueue (they would stay suspended for ever); None when all is well."""
        queue = self.settings.kueue_queue
        if not queue or await self.kueue_served():
            return None
        return (
            f'Jobs on this cluster wait in Kueue\'s queue "{queue}", but the cluster does not '
            "run Kueue (it serves no kueue.x-k8s.io Workloads), so they would never "
            "start; ask your admin to install Kueue or to unset jobs.kueue.queueName."
        )

    # -- reading ----------------------------------------------------------------------------
    async def _read_workload(self, job_id: str) -> Obj:
        """The object named ``job_id``, of whichever kind it is (ApiException 404: none)."""
        last: ApiException | None = None
        for kind in workload_kinds():
            try:
                return await self.objects.read(kind.resource, job_id)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                last = exc
        assert last is not None
        raise last

    async def _workloads(self, owner: str) -> list[Obj]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{USER_LABEL}={m.user_label(owner)}"
        return [o for o in await self._list_workloads(selector) if self._owned(o, owner)]

    async def _list_workloads(self, selector: str) -> list[Obj]:
        """The objects matching ``selector`` of every kind the cluster serves."""
        served = await self.served_custom_kinds()
        always = [k for k in workload_kinds() if k.operator is None]
        items = []
        for kind in [*always, *(workload_kind(k) for k in sorted(served))]:
            items.extend(await self.objects.list(kind.resource, selector))
        return items

    @staticmethod
    def _owned(obj: Obj, owner: str) -> bool:
        annotations = obj["metadata"].get("annotations") or {}
        return annotations.get(USERNAME_ANNOTATION) == owner

    async def _pods(self, owner: str, job_id: str | None = None) -> list[Obj]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{USER_LABEL}={m.user_label(owner)}"
        if job_id:
            selector += f",{JOB_ID_LABEL}={job_id}"
        pods = await _json(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            )
        )
        return list(pods.get("items") or [])

    async def _get_owned(self, owner: str, job_id: str) -> Obj:
        check_job_id(job_id)
        try:
            obj = await self._read_workload(job_id)
        except ApiException as exc:
            if exc.status == 404:
                raise JobNotFound(job_id) from None
            raise
        if not self._owned(obj, owner):
            raise JobNotFound(job_id)  # never confirm that someone else's job exists
        return obj

    def _phase(
        self,
        obj: Obj,
        pods: list[Obj],
        refused: str | None = None,
        workload: Obj | None = None,
        use: QueueUse | None = None,
        place: int | None = None,
    ) -> Phase:
        queue = queue_of(obj)
        if queue is not None:
            key = workload_resources(obj)["gpu_type"] or ""
            fair = self._users_queue(queue)
            return queue_phase(
                self.settings.kueue_queue if fair else queue,  # the queue's name to people
                workload,
                gpus=workload_gpus(obj),
                gpu_name=self.gpu_names.get(key, key),
                resource=gpu_resource(obj),
                use=use,
                place=place,
                fair=fair,
            )
        return of_object(obj).phase(obj, pods, self._gpu_summary(obj), refused)

    async def _refused(self, obj: Obj, pods: list[Obj]) -> str | None:
        """Why Kubernetes refused to create the pods a pending workload still lacks (a quota,
        a missing PriorityClass, ...): its controller's newest FailedCreate event. Asked only
        when pods are missing, so a healthy job costs no extra request."""
        kind = of_object(obj)
        if len(pods) >= kind.replicas(obj) or self._phase(obj, pods).status != "pending":
            return None
        selector = kind.failed_create_events(obj)
        try:
            events = await _json(
                self.core.list_namespaced_event(
                    self.namespace, field_selector=selector, _preload_content=False
                )
            )
        except ApiException as exc:
            log.warning("gpuhub: cannot read the events of %s: %s", obj["metadata"]["name"], exc)
            return None
        items = events.get("items") or []
        if not items:
            return None
        newest = max(
            items,
            key=lambda e: (
                e.get("lastTimestamp") or e.get("eventTime") or "",
                int(e["metadata"].get("resourceVersion") or 0),
            ),
        )
        return refusal_text(newest.get("message") or "") or None

    def _users_queue(self, queue: str) -> bool:
        """Whether ``queue`` is a user's own LocalQueue of a fair queue (not the admin's)."""
        return bool(self.settings.kueue_fair and queue != self.settings.kueue_queue)

    def _gpu_summary(self, obj: Obj) -> str:
        res = workload_resources(obj)
        if not res["gpus"]:
            return "CPU only"
        name = self.gpu_names.get(res["gpu_type"] or "", res["gpu_type"] or "GPU")
        if res["gpu_memory"]:  # a share of one GPU, as the jobs list says it
            return f"{human_memory(res['gpu_memory'])} of 1 x {name}"
        return f"{res['gpus']} x {name}"
