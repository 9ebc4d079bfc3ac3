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
* **Kubernetes**: a job row is a gpuhub workload's pods. The hub deletes the Job, PyTorchJob,
  TFJob or TrainJob of that user with that ``gpuhub.io/job-id`` (selected by owner as well as id, the
  exact owner checked in its annotation, and, where the ledger knows it, only the object of
  that kind and uid, deleted with the uid as a precondition), in foreground (the object
  stays until its pods are gone), with the Kubernetes client it already uses for its pod
  watch. A job without pods yet (waiting in a Kueue queue: the ledger counts its grant) is
  looked for in the hub's own namespace, the chart's default for jobs too.
  Pipeline runs are not Kubernetes workloads the hub can stop safely (Kubeflow Pipelines
  would retry or mark them failed on its own terms): refused with one sentence saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, alive, jobs_owner
from gpuhub.hub.ledger.launches import Process
from gpuhub.jobs.k8s import manifests as m
from gpuhub.k8s.rawapi import request_json

log = logging.getLogger("gpuhub.hub.monitor.cancel")

JOB_ID_ENV = "GPUHUB_JOB_ID"
KILL_GRACE = 5.0


class CancelRefused(Exception):
    """The job cannot be cancelled: ``status`` (4xx) and one sentence saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- a workstation ------------------------------------------------------------------------------
def _job_hold(book: GPUAllocator, holding: Holding) -> Holder:
    holder = book.holder(jobs_owner(holding.user, holding.name))
    if holder is None:
        raise CancelRefused(404, f"{holding.user} has no job {holding.name!r} holding GPUs.")
    return holder


def _terminate(processes: Sequence[Process]) -> list[str]:
    """SIGTERM every live process of the hold and its descendants, then SIGKILL what is left.
    Returns the local job ids found in their environments (read before they end)."""
    import os
    import signal

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
    procs: dict[int, Any] = {}
    for root in roots:
        procs[root.pid] = root
        with contextlib.suppress(psutil.Error):
            procs.update((c.pid, c) for c in root.children(recursive=True))
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    for root in roots:  # a job runner leads its own process group (start_new_session)
        with contextlib.suppress(OSError):
            if os.getpgid(root.pid) == root.pid:
                os.killpg(root.pid, signal.SIGTERM)
    _, left = psutil.wait_procs(list(procs.values()), timeout=KILL_GRACE)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=KILL_GRACE)
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
# (gpuhub's kind, Kubernetes kind, group, version, plural); None group: batch/v1 Job
_KINDS = tuple(
    (kind, r.kind, None if r.group == "batch" else r.group, r.version, r.plural)
    for kind, r in m.RESOURCES.items()
)


def _is_the_job(obj: dict[str, Any], holding: Holding) -> bool:
    """Whether a listed object is ``holding``'s job: the exact owner (labels carry a slug),
    and its uid where the ledger knows the job by it."""
    meta = obj.get("metadata") or {}
    if (meta.get("annotations") or {}).get(m.ANNOTATION_USERNAME) != holding.user:
        return False
    workload = holding.workload
    return workload is None or not workload.uid or meta.get("uid") == workload.uid


async def cancel_kube(
    core_api: Any, holding: Holding, reason: str, by: str, namespace: str | None = None
) -> list[str]:
    """Delete the gpuhub workload behind ``holding``: in its pods' namespace, else (a job
    that has no pod yet, e.g. waiting in a Kueue queue, known to the ledger by its grant)
    in ``namespace``, the hub's servers' namespace."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    if holding.pods:
        namespace = holding.pods[0][0]
    if not namespace:
        raise CancelRefused(
            409, f"The hub has not seen a pod of job {holding.name!r} yet; try again in a moment."
        )
    if holding.workload is not None and holding.workload.kind == "pipeline":
        raise CancelRefused(
            409,
            f"Job {holding.name!r} is a pipeline run: cancel it in Kubeflow Pipelines.",
        )
    selector = (
        f"{m.LABEL_MANAGED_BY}={m.MANAGED_BY},{m.LABEL_USER}={m.user_label(holding.user)},"
        f"{m.LABEL_JOB_ID}={holding.name}"
    )
    batch = client.BatchV1Api(core_api.api_client)
    custom = client.CustomObjectsApi(core_api.api_client)
    note: Any = {
        "metadata": {
            "annotations": {"gpuhub.io/cancelled-by": by, "gpuhub.io/cancel-reason": reason}
        }
    }
    deleted = []
    wanted = holding.workload.kind if holding.workload is not None else None
    if wanted == "jobset":
        # A TrainJob's node pods whose JobSet's owner the ledger has not read yet
        # (gpuhub.hub.ledger.capacity.TrainJobOwners): the TrainJob by its labels and exact owner.
        wanted, holding = "trainjob", dataclasses.replace(holding, workload=None)
    for ours, kind, group, version, plural in _KINDS:
        if wanted is not None and ours != wanted:
            continue
        try:
            if group is None:
                found = await request_json(
                    batch.list_namespaced_job(
                        namespace, label_selector=selector, _preload_content=False
                    )
                )
            else:
                found = await request_json(
                    custom.list_namespaced_custom_object(
                        group,
                        version,
                        namespace,
                        plural,
                        label_selector=selector,
                        _preload_content=False,
                    )
                )
        except ApiException as exc:
            if exc.status == 404 and group is not None:
                continue  # the training operator (or Trainer) is not installed
            raise CancelRefused(
                502 if exc.status >= 500 else 409,
                f"Kubernetes refused to list {kind}s in {namespace}: {exc.reason}.",
            ) from None
        for obj in found.get("items") or []:
            if not _is_the_job(obj, holding):
                continue
            name = obj["metadata"]["name"]
            # Deleted only if it is still that very object (not one made since by that name).
            body: Any = {
                "propagationPolicy": "Foreground",
                "preconditions": {"uid": obj["metadata"]["uid"]},
            }
            try:
                if group is None:
                    await request_json(
                        batch.patch_namespaced_job(name, namespace, note, _preload_content=False)
                    )
                    await request_json(
                        batch.delete_namespaced_job(
                            name, namespace, body=body, _preload_content=False
                        )
                    )
                else:
                    await request_json(
                        custom.patch_namespaced_custom_object(  # type: ignore[call-arg]
                            group,
                            version,
                            namespace,
                            plural,
                            name,
                            note,
                            # The client's default for custom objects is a JSON Patch (a list);
                            # the note is a merge patch (400 Bad Request otherwise). Taken at
                            # run time, missing from the method's typed signature.
                            _content_type="application/merge-patch+json",
                            _preload_content=False,
                        )
                    )
                    await request_json(
                        custom.delete_namespaced_custom_object(
                            group,
                            version,
                            namespace,
                            plural,
                            name,
                            body=body,
                            _preload_content=False,
                        )
                    )
            except ApiException as exc:
                if exc.status in (404, 409):
                    continue  # gone meanwhile (409: replaced by another object of that name)
                raise CancelRefused(
                    502 if exc.status >= 500 else 409,
                    f"Kubernetes refused to delete {kind} {namespace}/{name}: {exc.reason}.",
                ) from None
            log.warning("gpuhub: deleted %s %s/%s for %s: %s", kind, namespace, name, by, reason)
            deleted.append(holding.name)
    if not deleted:
        raise CancelRefused(
            409,
            f"Job {holding.name!r} is no Job, PyTorchJob, TFJob or TrainJob that gpuhub made (a "
            "pipeline run is cancelled in Kubeflow Pipelines).",
        )
    return [holding.name]
