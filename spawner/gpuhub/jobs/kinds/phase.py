"""What every kind's status is read from: its object's conditions and its pods' states.

Pure functions over plain object dicts (as the apiserver returns them), so each kind's
:meth:`~gpuhub.jobs.kinds.base.WorkloadKind.phase` is tested without a cluster: pod phases,
the scheduler's ``Unschedulable`` message, image pull errors and a failed pod's exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Obj = dict[str, Any]

# A job's status, on every backend (:mod:`gpuhub.jobs.model` says it to the rest of gpuhub).
# "queued": waiting in a queue before it may start at all (a Kubernetes job held by Kueue,
# docs/architecture.md); "pending": allowed to start, waiting for its pods or processes.
Status = Literal["queued", "pending", "running", "succeeded", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = ("queued", "pending", "running", "succeeded", "failed", "cancelled")
FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class Phase:
    status: Status
    message: str | None = None
    error: str | None = None
    started: str | None = None
    finished: str | None = None


ROOT_IMAGE = (
    "Cannot start {image}: it runs as root (or as a user name the cluster cannot check), and "
    "jobs run as a non-root user; use an image whose USER is a numeric non-root id, such as "
    "the Jupyter images (USER 1000)."
)
FINISHING = "Its pod has ended; Kubernetes is recording the result."
CANCELLING = "Cancelled; stopping its pods."


def condition(obj: Obj, kind: str) -> Obj | None:
    """The object's condition ``kind`` when it is true."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def pod_waiting(pods: list[Obj], gpu: str) -> str | None:
    """Why the newest pod is not running yet, in words (None if nothing to say)."""
    if not pods:
        return None
    pod = newest(pods)
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            why = cond.get("message") or "no node fits it yet"
            if "persistentvolumeclaim" in why.lower():
                # A missing or unbound claim: no node can take the pod, freed GPUs or not.
                return f"Waiting for the volume it mounts: {why}"
            if gpu != "CPU only":
                return f"Waiting for a free GPU ({gpu}): {why}"
            return f"Waiting for a node with room: {why}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            return f"Cannot pull the image {cs.get('image')}: {waiting.get('message') or reason}"
        if reason == "CreateContainerConfigError" and "runAsNonRoot" in (
            waiting.get("message") or ""
        ):
            return ROOT_IMAGE.format(image=cs.get("image") or "the image")
        if reason == "ContainerCreating":
            return "Starting: pulling the image and preparing the container."
    if status.get("phase") == "Pending" and pod.get("spec", {}).get("nodeName"):
        return f"Starting on {pod['spec']['nodeName']}."
    return None


def newest(pods: list[Obj]) -> Obj:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")


def in_phase(pods: list[Obj], *phases: str) -> list[Obj]:
    return [p for p in pods if (p.get("status") or {}).get("phase") in phases]


def failure(
    cond: Obj, pods: list[Obj], default: str, who: Callable[[Mapping[str, str]], str]
) -> str:
    """Why a job failed, without the final stop. The controllers' own message names the rule
    that ended the job ("reached the specified backoff limit"); which pod failed, and how,
    is what the user can act on, so it comes first. ``who`` names a pod by its labels
    ("worker 1", "node 0", "its pod")."""
    message = str(cond.get("message") or cond.get("reason") or default).rstrip(".")
    pod = _pod_failure(pods, who)
    return f"{pod}; {message}" if pod else message


def _pod_failure(pods: list[Obj], who: Callable[[Mapping[str, str]], str]) -> str | None:
    """The first pod whose container failed, in words: ``worker 1 exited with code 137
    (OOMKilled)``; None when none did."""
    failures = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated") or {}
            if ended.get("exitCode"):
                failures.append((ended.get("finishedAt") or "", pod, ended))
    if not failures:
        return None
    _, pod, ended = min(failures, key=lambda f: f[0])
    reason = ended.get("reason")
    why = f" ({reason})" if reason and reason not in ("Error", "Completed") else ""
    name = who(pod["metadata"].get("labels") or {})
    return f"{name} exited with code {ended['exitCode']}{why}"


def its_pod(labels: Mapping[str, str]) -> str:
    """How a sentence names the one pod of a single-pod job."""
    return "its pod"


def first_start(pods: list[Obj]) -> str | None:
    """When the first of ``pods``' containers started (running, or ended since)."""
    times = [
        (
            (cs.get("state") or {}).get("running")
            or (cs.get("state") or {}).get("terminated")
            or {}
        ).get("startedAt")
        for p in pods
        for cs in (p.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in times if t]
    return min(known) if known else None


def ended_phase(
    obj: Obj,
    pods: list[Obj],
    *,
    done: str,
    what: str,
    who: Callable[[Mapping[str, str]], str],
    started: str | None,
) -> Phase | None:
    """The phase of a workload being cancelled or that has ended, by its conditions: ``done``
    (a Job's and TrainJob's "Complete", the Training Operator's "Succeeded") or "Failed",
    its error naming the workload as ``what`` ("job", "PyTorchJob") and the failed pod by
    ``who``; None while it runs or waits. ``started`` is when it started, as its kind tells.
    It finished at ``status.completionTime`` where the controller sets one (a Job and the
    Training Operator's kinds on success), else when the condition came."""
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return Phase("cancelled", CANCELLING, started=started)
    succeeded = condition(obj, done)
    if succeeded:
        finished = status.get("completionTime") or succeeded.get("lastTransitionTime")
        return Phase("succeeded", started=started, finished=finished)
    failed = condition(obj, "Failed")
    if failed:
        message = failure(failed, pods, f"the {what} failed", who)
        return Phase(
            "failed",
            error=f"The {what} failed: {message}.",
            started=started,
            finished=status.get("completionTime") or failed.get("lastTransitionTime"),
        )
    return None
