"""The jobs service's GPU quota: a grant from the hub's ledger before anything is created.

Spawns are checked by the ledger in the hub process (:mod:`gpuhub.hub.ledger.ledger`); so that jobs
are checked by the same ledger, under the same per-user lock, the service asks the hub
(``POST /hub/api/gpuhub/grants``, :mod:`gpuhub.hub.web.grants`) with its own token. The hub
answers with the user's quota from ``GPUSpawner.gpu_quota``.

A hub without those endpoints (``configure_hub`` not called) answers 404: the service then
counts by itself with LISTs (:class:`~gpuhub.jobs.k8s.backend.ClusterQuota`, the service's
``gpu_quota``), says so once in its log, and a spawn racing a submit may then both pass.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuhub.core.hub_client import HubAnswer, HubClient
from gpuhub.jobs.backend import QuotaGate
from gpuhub.jobs.model import JobError, JobRequest

log = logging.getLogger("gpuhub.service")

UNREACHABLE = (
    "The hub did not answer the GPU quota check, so nothing was started; try again in a moment."
)
TIMEOUT = 20.0  # seconds a call waits for the hub


class HubQuota:
    """A :class:`~gpuhub.jobs.backend.QuotaGate` backed by the hub's ledger."""

    hub_has_ledger: bool | None = None  # learnt from the first answer, for the process
    _warned_no_renewal = False

    def __init__(self, api_url: str, token: str, fallback: QuotaGate) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.fallback = fallback

    def _hub(self, owner: str = "") -> HubClient:
        """The hub's API with the service's token: about one user's grant
        (``grants/<owner>/<job>``), or about none (``grants``)."""
        return HubClient(self.api_url, self.token, owner)

    async def reserve(self, owner: str, job_id: str, request: JobRequest) -> None:
        if HubQuota.hub_has_ledger is False:
            await self.fallback.reserve(owner, job_id, request)
            return
        gpu_type = request.resources.gpu_type
        body = {
            "user": owner,
            "kind": request.kind,
            "name": job_id,
            "gpus": request.total_gpus,
            "gpu_type": gpu_type.display_name if gpu_type else "",
            **share_fields(request),
        }
        try:
            response = await self._hub().call("POST", "grants", body=body, timeout=TIMEOUT)
        except OSError as exc:  # HubUnreachable
            log.error("gpuhub: the hub's GPU ledger did not answer: %s", exc)
            raise JobError("gpus", UNREACHABLE, 503) from None
        if response.code == 404 and b"gpuhub" not in response.body:
            if HubQuota.hub_has_ledger is None:
                log.warning(
                    "gpuhub: the hub has no GPU ledger endpoints (gpuhub.hub.web.api.configure_hub "
                    "not called); the service checks GPU quotas by itself"
                )
            HubQuota.hub_has_ledger = False
            await self.fallback.reserve(owner, job_id, request)
            return
        HubQuota.hub_has_ledger = True
        if response.code == 201:
            return
        message = _message(response) or UNREACHABLE
        if response.code == 403:
            raise JobError("gpus", message, 403)
        log.error("gpuhub: the hub's GPU ledger answered %s: %s", response.code, message)
        raise JobError("gpus", UNREACHABLE, 503)

    async def created(
        self, owner: str, job_id: str, request: JobRequest, uid: str, *, queued: bool = False
    ) -> None:
        """Bind the job's grant to the object just created (kind and uid), so that the hub's
        ledger counts its pods instead once they show, and never mistakes another object
        of the same name for it; ``queued``: it was created waiting in Kueue's queue."""
        if HubQuota.hub_has_ledger is False:
            await self.fallback.created(owner, job_id, request, uid, queued=queued)
            return
        gpu_type = request.resources.gpu_type
        await self.hold(
            owner,
            job_id,
            request.kind,
            request.total_gpus,
            gpu_type.display_name if gpu_type else "",
            uid,
            share_fields(request),
            queued=queued,
        )

    async def hold(
        self,
        owner: str,
        job_id: str,
        kind: str,
        gpus: int,
        gpu_type: str,
        uid: str = "",
        share: dict[str, Any] | None = None,
        *,
        queued: bool = False,
    ) -> None:
        """Keep a job counted by the hub's ledger: bound to its object (``uid``) once created,
        and renewed while it waits in Kueue's queue (its grant would lapse after
        ``GRANT_SECONDS``; a queued job has no pods for the ledger to see). ``queued`` tells
        the hub it waits in Kueue's queue, so that it shows as waiting there. Without the
        hub's ledger the service counts queued jobs itself (ClusterQuota)."""
        if HubQuota.hub_has_ledger is False or gpus <= 0:
            return
        body = {"kind": kind, "gpus": gpus, "gpu_type": gpu_type, "uid": uid, **(share or {})}
        if queued:
            body["queued"] = True
        hub = self._hub(owner)
        try:
            response = await hub.call("PUT", "grants", job_id, body=body, timeout=TIMEOUT)
        except OSError as exc:  # HubUnreachable
            log.warning("gpuhub: could not renew the grant of queued job %s: %s", job_id, exc)
            return
        if response.code == 204:
            HubQuota.hub_has_ledger = True  # so that a cancel releases the grant it renewed
            return
        if response.code == 404 and b"gpuhub" not in response.body:
            HubQuota.hub_has_ledger = False  # no ledger endpoints: the service counts itself
            return
        if response.code == 405 and not HubQuota._warned_no_renewal:
            HubQuota._warned_no_renewal = True
            log.warning(
                "gpuhub: the hub cannot renew grants (an older gpuhub in the hub); a job queued "
                "in Kueue stops counting against its owner's quota ten minutes after its submit"
            )
            return
        if response.code != 405:
            log.warning(
                "gpuhub: the hub answered %s renewing the grant of %s: %s",
                response.code,
                job_id,
                _message(response),
            )

    async def release(self, owner: str, job_id: str) -> None:
        if not HubQuota.hub_has_ledger:
            await self.fallback.release(owner, job_id)
            return
        try:
            await self._hub(owner).call("DELETE", "grants", job_id, timeout=TIMEOUT)
        except OSError as exc:  # HubUnreachable: the grant expires by itself
            log.warning("gpuhub: could not release the grant of %s: %s", job_id, exc)


def share_fields(request: JobRequest) -> dict[str, Any]:
    """A shared request's grant fields (``share``, ``gpu_memory``; :mod:`gpuhub.hub.web.grants`):
    what all its replicas count as in GPUs, and their GPU memory; none for whole GPUs."""
    if request.resources.share is None:
        return {}
    memory = (request.resources.gpu_memory or 0) * request.workers
    return {"share": str(request.total_amount), "gpu_memory": memory}


def _message(answer: HubAnswer) -> str:
    """The sentence in the hub's JSON answer ("" when it has none)."""
    data = answer.json()
    return str(data.get("message") or "") if isinstance(data, dict) else ""
