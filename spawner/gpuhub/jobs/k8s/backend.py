"""The Kubernetes backend: every kind whose job is a Kubernetes object of gpuhub's
(:func:`gpuhub.jobs.kinds.workload_kinds`: a batch/v1 Job, Kubeflow's PyTorchJob, TFJob and
TrainJob), created with the hub service's own credentials. What differs between kinds is
asked of the kind; nothing here names one.

State lives in the cluster, not in the service: a job is its workload object (labels
``gpuhub.io/user`` and ``gpuhub.io/job-id``, annotations with the exact owner and the
record), its input ConfigMap (owned by the workload, so the garbage collector removes it)
and its pods. The service can restart at any time and still answers for every job.

* **Idempotent submit**: object names derive from the owner and the request's idempotency
  key, so a retried request meets ``AlreadyExists`` and returns the job made the first time.
* **No orphans**: the ConfigMap is created first, then the workload, then the ConfigMap is
  given its ownerReference; whatever step fails, what was made before it is deleted.
* **Quota**: ``submit`` asks a :class:`~gpuhub.jobs.backend.QuotaGate` under a per-user lock,
  after the idempotency check and before creating anything: the hub's ledger through the
  service (:mod:`gpuhub.service.quota`), or :class:`ClusterQuota` where there is no hub.
"""

from __future__ import annotations

import logging
import time

from kubernetes_asyncio.client.exceptions import ApiException

from gpuhub.jobs.k8s.cancel import CancelFailed, cancel
from gpuhub.jobs.k8s.create import Creating
from gpuhub.jobs.k8s.queue import Queued, QueuedJob
from gpuhub.jobs.k8s.quota import ClusterQuota, QuotaCounting
from gpuhub.jobs.k8s.reading import DISCOVERY_TTL
from gpuhub.jobs.kinds import of_object, workload_kind
from gpuhub.jobs.kinds.base import Needed, Resource
from gpuhub.jobs.model import JobError, JobRecord, JobRequest, utcnow
from gpuhub.k8s import dra

__all__ = ["ClusterQuota", "KubernetesBackend", "Queued", "QueuedJob"]

log = logging.getLogger(__name__)


# A DRA type's job needs its DeviceClass (gpuhub.k8s.dra).
DEVICE_CLASS = Resource("DeviceClass", dra.GROUP, dra.VERSION, "deviceclasses")


class KubernetesBackend(Creating, QuotaCounting):
    """The jobs of every Kubernetes kind in one namespace, for many users (the hub service)."""

    name = "kubernetes"

    async def check(self, request: JobRequest, owner: str) -> None:
        problem = await self.queue_problem()
        if problem is not None:
            raise JobError("kind", problem, 422)
        kind = workload_kind(request.kind)
        if kind.operator is not None:
            served = await self.served_custom_kinds()
            if kind.name not in served:
                raise JobError("kind", kind.unserved([workload_kind(k) for k in served]), 422)
        for needed in kind.needs(request):
            await self._check_needed(needed)
        gpu_type = request.resources.gpu_type
        if dra.claims_gpus(request.resources):
            assert gpu_type is not None and gpu_type.dra is not None
            # Without its DeviceClass the job's claims could never be allocated.
            device_class = gpu_type.dra.device_class
            words = dra.missing_class_words(gpu_type.display_name, device_class)
            await self._check_needed(Needed(DEVICE_CLASS, device_class, "gpu_type", words))

    async def _check_needed(self, needed: Needed) -> None:
        """A cluster object a request needs exists (looked up at most once a minute)."""
        now = time.monotonic()
        if now - self._needed_seen.get(needed.path, -DISCOVERY_TTL) < DISCOVERY_TTL:
            return
        try:
            await self.objects.read_cluster(needed.resource, needed.name)
        except ApiException as exc:
            if exc.status == 404:
                raise JobError(needed.field, needed.missing, 422) from None
            if exc.status != 403:
                raise
            log.warning("gpuhub: may not read %s %s (403)", needed.resource.kind, needed.name)
            return
        self._needed_seen[needed.path] = now

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        obj = await self._owned_or_cancelled(owner, job_id)
        if isinstance(obj, JobRecord):
            return obj  # cancelled lately
        pods = await self._pods(owner, job_id)
        record = self._record(obj, pods)
        if record.is_final:
            return record
        # The one cancel, the fleet page's too (gpuhub.jobs.k8s.cancel): that very object.
        try:
            await cancel(
                self.objects, owner, job_id, kind=of_object(obj), uid=obj["metadata"]["uid"]
            )
        except CancelFailed as exc:
            raise self._refusal("cancel the job", exc.error) from None
        record.status = "cancelled"
        record.finished = utcnow()
        record.message = "Cancelled."
        self._tombstones[job_id] = (time.monotonic(), record)
        log.info("gpuhub: %s cancelled %s/%s", owner, self.namespace, job_id)
        return record

    async def close(self) -> None:
        await self.api.close()
