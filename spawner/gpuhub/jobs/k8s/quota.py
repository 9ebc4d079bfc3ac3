"""The Kubernetes backend's quota when the service counts alone: what a user holds, listed
from the cluster (with the hub's ledger, see :mod:`gpuhub.service.quota`)."""

from __future__ import annotations

from fractions import Fraction

from gpuhub.core.holdings import Holding, Waiting, gpus_counted, quota_sentence
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.reading import WorkloadReader
from gpuhub.jobs.k8s.resources import workload_gpus, workload_share
from gpuhub.jobs.model import JobError, JobRequest
from gpuhub.k8s.inventory import pod_holding
from gpuhub.k8s.labels import COMPONENT_LABEL, HUB_USERNAME_KEY, SERVER_COMPONENT
from gpuhub.k8s.rawapi import request_json as _json

SERVER_SELECTOR = f"{COMPONENT_LABEL}={SERVER_COMPONENT}"  # KubeSpawner's, on server pods


class QuotaCounting(WorkloadReader):
    """The quota counted by the service alone, with LISTs (no hub ledger to ask)."""

    async def holdings(self, owner: str) -> list[Holding]:
        """What ``owner`` holds now, listed from the cluster: servers and unfinished jobs."""
        slug = m.user_label(owner)
        pods = await _json(
            self.core.list_namespaced_pod(
                self.namespace,
                label_selector=f"{SERVER_SELECTOR},{HUB_USERNAME_KEY}={slug}",
                _preload_content=False,
            )
        )
        held = []
        for pod in pods.get("items") or []:
            holding = pod_holding(pod)
            if holding is not None and holding.user == owner:  # not a slug collision
                held.append(holding)
        for obj in await self._workloads(owner):
            gpus = workload_gpus(obj)
            # Queued jobs hold their place against the quota (docs/architecture.md).
            status = self._phase(obj, []).status
            if gpus and status in ("queued", "pending", "running"):
                share, memory = workload_share(obj)
                name = obj["metadata"]["name"]
                waits: Waiting = "queue" if status == "queued" else ""  # a place, not GPUs
                held.append(
                    Holding(owner, "job", name, gpus, share=share, memory=memory, waiting=waits)
                )
        return held

    async def gpus_in_use(self, owner: str) -> Fraction:
        """What counts against ``owner``'s quota now: running or pending servers and
        unfinished jobs, queued ones' places included (those are waiting, not held)."""
        return gpus_counted(await self.holdings(owner))

    async def check_quota(self, request: JobRequest, owner: str, limit: Fraction) -> None:
        """The quota checked by the service alone, with LISTs (no hub ledger to ask)."""
        held = await self.holdings(owner)
        message = quota_sentence(held, limit, request.total_amount, "job")
        if message is not None:
            raise JobError("gpus", message, 403)

    def own_quota(self, limit: Fraction | None) -> ClusterQuota:
        return ClusterQuota(self, limit)


class ClusterQuota:
    """A :class:`~gpuhub.jobs.backend.QuotaGate` that counts with LISTs from the service
    itself: for a hub without gpuhub's ledger endpoints (see :mod:`gpuhub.hub.web.api`)."""

    def __init__(self, backend: QuotaCounting, limit: Fraction | None) -> None:
        self.backend = backend
        self.limit = limit

    async def reserve(self, owner: str, job_id: str, request: JobRequest) -> None:
        if self.limit is not None and request.total_gpus:
            await self.backend.check_quota(request, owner, self.limit)

    async def created(
        self, owner: str, job_id: str, request: JobRequest, uid: str, *, queued: bool = False
    ) -> None:
        """Nothing to bind: the objects themselves are what is counted."""

    async def release(self, owner: str, job_id: str) -> None:
        """Nothing was reserved: the objects themselves are what is counted."""
