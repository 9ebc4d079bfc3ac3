"""The Kubernetes backend's part that reads Kueue's queue (:mod:`gpuhub.k8s.kueue`) for the
jobs that wait in it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuhub.jobs.k8s.reading import WorkloadReader
from gpuhub.jobs.k8s.resources import workload_gpus, workload_resources, workload_share
from gpuhub.jobs.k8s.status import Obj, kueue_says, queue_of
from gpuhub.k8s.kueue import GROUP as KUEUE_GROUP
from gpuhub.k8s.kueue import QueueUse, positions
from gpuhub.k8s.kueue_bookings import BOOKING_LABEL, job_queue
from gpuhub.k8s.labels import (
    KIND_LABEL,
    KUEUE_JOB_UID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    USERNAME_ANNOTATION,
)
from gpuhub.k8s.rawapi import get_json

log = logging.getLogger(__name__)


class QueueReading(WorkloadReader):
    """What Kueue says of the jobs waiting in its queue: their Workloads, places in line and
    the queues' quota in use; and which LocalQueue a new job waits in."""

    async def queued_jobs(self) -> list[QueuedJob]:
        """Every gpuhub job in the namespace that waits in Kueue's queue and asks for GPUs
        (all users: the service keeps their places against the hub's quota)."""
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{QUEUE_NAME_LABEL}"
        items = await self._list_workloads(selector)
        out = []
        for obj in items:
            owner = (obj["metadata"].get("annotations") or {}).get(USERNAME_ANNOTATION)
            gpus = workload_gpus(obj)
            if owner and gpus and queue_of(obj) is not None:
                key = workload_resources(obj)["gpu_type"] or ""
                share, memory = workload_share(obj)
                out.append(
                    QueuedJob(
                        owner=owner,
                        job_id=obj["metadata"]["name"],
                        kind=(obj["metadata"].get("labels") or {}).get(KIND_LABEL, "job"),
                        gpus=gpus,
                        gpu_type=self.gpu_names.get(key, key),
                        uid=obj["metadata"].get("uid") or "",
                        share=share,
                        memory=memory,
                    )
                )
        return out

    async def _queued(self, objects: list[Obj]) -> Queued:
        """The Workloads, places in line and queues' quota of the jobs among ``objects``
        that wait in Kueue's queue: one LIST of Workloads, and one visibility request and one
        read of the quota per queue (shared for a moment), only when some job is queued."""
        waiting = {o["metadata"]["uid"]: q for o in objects if (q := queue_of(o)) is not None}
        if not waiting:
            return Queued({}, {})
        workloads = await self._kueue_workloads(set(waiting))
        self._log_kueue(workloads)
        places: dict[str, int] = {}
        uses: dict[str, QueueUse | None] = {}
        for queue in sorted(set(waiting.values())):
            places.update(await self._queue_positions(queue))
            uses[queue] = await self.kueue.usage(self.namespace, queue)
        return Queued(workloads, places, uses)

    def _log_kueue(self, workloads: Mapping[str, Obj]) -> None:
        """Kueue's own words on waiting jobs, for the admin: logged when they change (users
        read them in gpuhub's, :func:`gpuhub.jobs.k8s.status.queue_phase`)."""
        for uid, workload in workloads.items():
            said = kueue_says(workload)
            if said and self._kueue_said.get(uid) != said:
                self._kueue_said[uid] = said
                self._kueue_said.move_to_end(uid)
                name = (workload.get("metadata") or {}).get("name")
                log.info("gpuhub: Kueue on Workload %s (job uid %s): %s", name, uid, said)
        while len(self._kueue_said) > 1000:
            self._kueue_said.popitem(last=False)

    async def _kueue_workloads(self, uids: set[str]) -> dict[str, Obj]:
        """Job uid -> its Workload: Kueue labels a job's Workload with the job's uid
        (``kueue.x-k8s.io/job-uid``) and makes the job its controlling owner; a Workload
        without the label (older Kueue) is found by its ownerReference."""
        found: dict[str, Obj] = {}

        async def listed(selector: str | None) -> list[Obj]:
            return await self.kueue.workloads(self.namespace, selector)

        def match(items: list[Obj]) -> None:
            for item in items:
                owners = {
                    r.get("uid")
                    for r in item["metadata"].get("ownerReferences") or []
                    if r.get("controller")
                }
                owners.add((item["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL))
                for uid in owners & uids:
                    found.setdefault(str(uid), item)

        match(await listed(f"{KUEUE_JOB_UID_LABEL} in ({','.join(sorted(uids))})"))
        if uids - set(found):
            match(await listed(None))
        return found

    async def _queue_positions(self, queue: str) -> dict[str, int]:
        """Job uid -> place in line (1 = next) from Kueue's visibility API (v1beta2, else
        v1beta1: :meth:`gpuhub.k8s.kueue.KueueAPI.line`); empty when it cannot be read. In
        a user's own LocalQueue, the place among the whole ClusterQueue."""
        line = await self.kueue.line(self.namespace, queue)
        if not self._users_queue(queue):
            return positions(line)
        return {
            uid: pending.in_cluster_queue
            for pending in line or []
            if pending.in_cluster_queue is not None
            for _kind, _name, uid in pending.owners
            if uid
        }

    async def _job_queue(self, owner: str, gpu_type: str = "") -> str:
        """The LocalQueue ``owner``'s new job waits in: that of a booking for them of the
        job's ``gpu_type`` in force now (the hub makes it for the window,
        :mod:`gpuhub.k8s.kueue_bookings`); else, with ``kueue_fair`` where Kueue offers
        admission fair sharing, their own (made on first use); else the admin's
        (``kueue_queue``, "" for none). Whether Kueue offers it is asked once and logged."""
        queue = self.settings.kueue_queue
        if not queue:
            return queue
        if gpu_type:
            booked = await self._booked_queue(owner, gpu_type)
            if booked:
                return booked
        if not self.settings.kueue_fair:
            return queue
        return await self.kueue.own_queue(self.namespace, queue, owner, "jobs") or queue

    _bookings_refused = False  # the service may not list LocalQueues (said once)

    async def _booked_queue(self, owner: str, gpu_type: str) -> str:
        """The LocalQueue of a booking for ``owner`` of ``gpu_type`` in force now, or ""
        (none, or the service may not list LocalQueues: said once in the log)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        version = await self.kueue.version()
        if version is None:
            return ""
        path = f"/apis/{KUEUE_GROUP}/{version}/namespaces/{self.namespace}/localqueues"
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{BOOKING_LABEL}"
        try:
            found = await get_json(self.kueue.api, path, [("labelSelector", selector)])
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            if not self._bookings_refused:
                self._bookings_refused = True
                log.warning(
                    "gpuhub: cannot list Kueue's LocalQueues (HTTP %s): jobs do not wait in "
                    "their bookings' queues",
                    exc.status,
                )
            return ""
        return job_queue(found.get("items") or [], owner, gpu_type)


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting in Kueue's queue, as the hub's ledger counts it."""

    owner: str
    job_id: str
    kind: str
    gpus: int
    gpu_type: str
    uid: str = ""
    share: Fraction | None = None  # a shared job's GPUs, as the ledger counts them
    memory: int = 0

    @property
    def share_fields(self) -> dict[str, Any]:
        """Its grant's share fields (gpuhub.service.quota.share_fields)."""
        if self.share is None:
            return {}
        return {"share": str(self.share), "gpu_memory": self.memory}


@dataclass(frozen=True)
class Queued:
    """What Kueue says about queued jobs, by job uid: their Workloads and places in line;
    and by queue, what of its quota is in use (None where that cannot be read)."""

    workloads: dict[str, Obj]
    positions: dict[str, int]
    uses: dict[str, QueueUse | None] = field(default_factory=dict)
