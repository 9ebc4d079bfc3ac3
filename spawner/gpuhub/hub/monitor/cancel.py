"""Cancel a user's GPU job from the hub (the fleet page's "Cancel" button).

The hub acts with its own means, never through the user's server (which may be gone) or
the jobs service (which acts for users, not for admins):

* **Workstation** (:class:`gpuhub.hub.ledger.device_book.GPUAllocator`): a job row is a *job hold*, the
  processes a stopped server left running on its GPUs. The hub knows them by pid and start
  time (never from anything the user can write); it terminates each one's process tree and
  process group (SIGTERM, SIGKILL after a grace period, as the local jobs backend's own
  cancel does), and the hold is released once they are gone. The local job ids come from
  those processes' ``GPUHUB_JOB_ID``, so the user's server can mark their records cancelled
  with the admin's reason (:func:`gpuhub.core.hub_client.cancel_notice_for_job`).
* **Kubernetes**: a job row is a gpuhub workload's pods. The hub deletes the object of that
  user with that ``gpuhub.io/job-id`` through the jobs service's own cancel
  (:func:`gpuhub.jobs.k8s.cancel.cancel`: selected by owner as well as id, the exact owner
  checked in its annotation, and, where the ledger knows it, only the object of that kind
  and uid, deleted with the uid as a precondition, in foreground), noting who cancelled it
  and why, with the Kubernetes client it already uses for its pod watch. A job without pods
  yet (waiting in a Kueue queue: the ledger counts its grant) is looked for in the hub's own
  namespace, the chart's default for jobs too. Runs of kinds that live elsewhere (a pipeline's,
  in Kubeflow Pipelines, which would retry or mark them failed on its own terms) are not the
  hub's to stop: refused with one sentence saying where they are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from gpuhub.core.env import JOB_ID_ENV
from gpuhub.core.holdings import Holding
from gpuhub.core.process_tree import end_process_trees
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, alive, jobs_key
from gpuhub.hub.ledger.launches import Process
from gpuhub.jobs import kinds
from gpuhub.k8s.labels import CANCEL_REASON_ANNOTATION, CANCELLED_BY_ANNOTATION

log = logging.getLogger("gpuhub.hub.monitor.cancel")


class CancelRefused(Exception):
    """The job cannot be cancelled: ``status`` (4xx) and one sentence saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- a workstation ------------------------------------------------------------------------------
def _job_hold(book: GPUAllocator, holding: Holding) -> Holder:
    holder = book.holder(jobs_key(holding.user, holding.name))
    if holder is None:
        raise CancelRefused(404, f"{holding.user} has no job {holding.name!r} holding GPUs.")
    return holder


def _terminate(processes: Sequence[Process]) -> list[str]:
    """End every live process of the hold with its tree, as the local jobs backend's own
    cancel does (:func:`gpuhub.core.process_tree.end_process_trees`). Returns the local job
    ids found in their environments (read before they end)."""
    import psutil

    roots, job_ids = [], []
    for process in processes:
        if not alive(process):
            continue  # ended, or the pid now belongs to something else: never touch it
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(process[0])
            job_id = proc.environ().get(JOB_ID_ENV)
            if job_id and job_id not in job_ids:
                job_ids.append(job_id)
            roots.append(proc)
    end_process_trees(roots)
    return job_ids


async def cancel_local(book: GPUAllocator, holding: Holding) -> list[str]:
    """End the processes of ``holding``'s job hold; returns their local job ids."""
    holder = _job_hold(book, holding)
    if holder.pending:
        raise CancelRefused(
            409, "The hub is still looking for that server's processes; try again in a moment."
        )
    job_ids = await asyncio.to_thread(_terminate, [p.process for p in holder.processes])
    book.prune()  # releases the hold now that its processes have ended
    return job_ids


# -- Kubernetes ---------------------------------------------------------------------------------
async def cancel_kube(
    core_api: Any, holding: Holding, reason: str, by: str, namespace: str | None = None
) -> list[str]:
    """Delete the gpuhub workload behind ``holding``: in its pods' namespace, else (a job
    that has no pod yet, e.g. waiting in a Kueue queue, known to the ledger by its grant)
    in ``namespace``, the hub's servers' namespace."""
    from gpuhub.jobs.k8s.cancel import CancelFailed, cancel
    from gpuhub.jobs.k8s.objects import Objects

    if holding.pods:
        namespace = holding.pods[0][0]
    if not namespace:
        raise CancelRefused(
            409, f"The hub has not seen a pod of job {holding.name!r} yet; try again in a moment."
        )
    kind, uid = None, None
    workload = holding.workload
    if workload is not None:
        other = kinds.KINDS.get(workload.kind)
        if other is not None and other.runs_in:
            raise CancelRefused(
                409,
                f"Job {holding.name!r} is a {other.run_name}: cancel it in {other.runs_in}.",
            )
        kind = kinds.owning_kind(workload)
        if kind is None:
            raise CancelRefused(409, _not_ours(holding.name))
        # Pods counted by the object between (a TrainJob's JobSet, whose owner the ledger
        # has not read yet: gpuhub.hub.ledger.capacity): the kind's object by its labels and
        # exact owner alone.
        uid = workload.uid if workload.kind == kind.name else None
    note = {CANCELLED_BY_ANNOTATION: by, CANCEL_REASON_ANNOTATION: reason}
    objects = Objects(core_api.api_client, namespace)
    try:
        deleted = await cancel(objects, holding.user, holding.name, kind=kind, uid=uid, note=note)
    except CancelFailed as exc:
        status = exc.error.status or 0
        raise CancelRefused(
            502 if status >= 500 else 409,
            f"Kubernetes refused to {exc.doing}: {exc.error.reason}.",
        ) from None
    for obj in deleted:
        meta = obj["metadata"]
        log.warning(
            "gpuhub: deleted %s %s/%s for %s: %s", obj["kind"], namespace, meta["name"], by, reason
        )
    if not deleted:
        raise CancelRefused(409, _not_ours(holding.name))
    return [holding.name]


def _not_ours(job: str) -> str:
    """``job`` is no object of a kind gpuhub makes (where kinds that are not, say so)."""
    names = [k.resource.kind for k in kinds.workload_kinds()]
    made = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
    elsewhere = "; ".join(
        f"a {k.run_name} is cancelled in {k.runs_in}" for k in kinds.KINDS.values() if k.runs_in
    )
    return f"Job {job!r} is no {made} that gpuhub made" + (f" ({elsewhere})." if elsewhere else ".")
