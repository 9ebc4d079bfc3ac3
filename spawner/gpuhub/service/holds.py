"""Queued jobs keep their place against the GPU quota.

A job waiting in Kueue's queue (``jobs.kueue.queueName``) has no pods, so the hub's ledger,
which counts pods from its watch, does not see it; the grant the service got at submit
(:mod:`gpuhub.service.quota`) lapses after ``gpuhub.hub.web.grants.GRANT_SECONDS``. While a job is
queued, the service renews its grant every :data:`HOLD_EVERY` seconds (``PUT
/hub/api/gpuhub/grants/<user>/<job>``); once Kueue admits it, its pods show in the watch and
the ledger counts them instead (a grant never counts GPUs the watch already shows, so nothing
counts twice). A cancelled job's grant is released at once; one deleted some other way
lapses within ``GRANT_SECONDS``. Without the hub's ledger endpoints the service counts
queued jobs itself (:class:`~gpuhub.jobs.k8s.backend.ClusterQuota`).
"""

from __future__ import annotations

import asyncio
import logging
import os

from gpuhub.core.env import HOLD_SECONDS_ENV
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.service.quota import HubQuota

log = logging.getLogger("gpuhub.service")

# Seconds between renewals; well inside the hub's GRANT_SECONDS (600).
HOLD_EVERY = float(os.environ.get(HOLD_SECONDS_ENV) or 60)


async def renew_once(kube: KubernetesBackend, quota: HubQuota) -> int:
    """Renew the grant of every queued job once; how many were renewed."""
    jobs = await kube.queued_jobs()
    for job in jobs:
        await quota.hold(
            job.owner,
            job.job_id,
            job.kind,
            job.gpus,
            job.gpu_type,
            job.uid,
            job.share_fields,
            queued=True,  # the hub shows it as waiting in Kueue's queue, never as held
        )
    return len(jobs)


async def hold_queued_places(
    kube: KubernetesBackend, quota: HubQuota, every: float = HOLD_EVERY
) -> None:
    """Renew queued jobs' grants until cancelled (a task beside the service)."""
    while True:
        try:
            await renew_once(kube, quota)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the cluster or the hub did not answer: next round
            log.warning("gpuhub: could not renew the grants of queued jobs: %s", exc)
        await asyncio.sleep(every)
