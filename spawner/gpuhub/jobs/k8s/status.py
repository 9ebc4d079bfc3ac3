"""A job's status in human terms, from its Kubernetes objects and its pod's log.

Pure functions over plain object dicts (as the apiserver returns them), so every case is
tested without a cluster: Job conditions, Training Operator conditions, pod phases, the
scheduler's ``Unschedulable`` message, image pull errors, and the runner's result line.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model import FailedCell, Status
from .pod_runner import OUTPUT_BEGIN, OUTPUT_END, RESULT_PREFIX

Obj = dict[str, Any]


@dataclass
class Phase:
    status: Status
    message: str | None = None
    error: str | None = None
    started: str | None = None
    finished: str | None = None


@dataclass
class PodLog:
    """A job pod's log split into what the user reads, the result line and the notebook."""

    text: str
    result: dict[str, Any] | None
    notebook: bytes | None

    @property
    def failed_cell(self) -> FailedCell | None:
        cell = (self.result or {}).get("failed_cell")
        if not isinstance(cell, dict):
            return None
        try:
            return FailedCell(**cell)
        except TypeError:
            return None


def parse_pod_log(log: str) -> PodLog:
    """Take the runner's result line and executed-notebook block out of a pod's log."""
    lines = log.splitlines(keepends=True)
    shown: list[str] = []
    result: dict[str, Any] | None = None
    block: list[str] | None = None
    notebook: bytes | None = None
    for line in lines:
        stripped = line.strip()
        if block is not None:
            if stripped == OUTPUT_END:
                try:
                    notebook = gzip.decompress(base64.b64decode("".join(block), validate=True))
                except (binascii.Error, OSError, EOFError):
                    notebook = None
                size = len(notebook) if notebook is not None else 0
                shown.append(
                    f"[gpuhub: executed notebook, {size} bytes, sent back as the job's output]\n"
                )
                block = None
            else:
                block.append(stripped)
            continue
        if stripped == OUTPUT_BEGIN:
            block = []
            continue
        if stripped.startswith(RESULT_PREFIX):
            try:
                loaded = json.loads(stripped[len(RESULT_PREFIX) :])
                result = loaded if isinstance(loaded, dict) else None
            except ValueError:
                result = None
            continue
        shown.append(line)
    return PodLog("".join(shown), result, notebook)


def _condition(obj: Obj, kind: str) -> Obj | None:
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
        if reason == "ContainerCreating":
            return "Starting: pulling the image and preparing the container."
    if status.get("phase") == "Pending" and pod.get("spec", {}).get("nodeName"):
        return f"Starting on {pod['spec']['nodeName']}."
    return None


def newest(pods: list[Obj]) -> Obj:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")


_FORBIDDEN = re.compile(r'^(?:Error creating: )?(?:pods "[^"]*" is forbidden: )?')


def refusal_text(event_message: str) -> str:
    """The admission's reason in a controller's ``FailedCreate`` event, without the
    ``Error creating: pods "x-" is forbidden:`` preamble."""
    return _FORBIDDEN.sub("", event_message.strip(), count=1)


def job_phase(job: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
    """A batch/v1 Job's status; ``refused``: why Kubernetes refused to create its pod."""
    status = job.get("status") or {}
    if job["metadata"].get("deletionTimestamp"):
        return Phase("cancelled", "Cancelled; stopping its pods.", started=status.get("startTime"))
    complete = _condition(job, "Complete")
    if complete:
        return Phase(
            "succeeded",
            started=status.get("startTime"),
            finished=status.get("completionTime") or complete.get("lastTransitionTime"),
        )
    failed = _condition(job, "Failed")
    if failed:
        message = failed.get("message") or failed.get("reason") or "the job failed"
        return Phase(
            "failed",
            error=f"The job failed: {message.rstrip('.')}.",
            started=status.get("startTime"),
            finished=failed.get("lastTransitionTime"),
        )
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        return Phase("running", "Running.", started=_started(running) or status.get("startTime"))
    if refused and not pods:
        return Phase("pending", f"Kubernetes refused to create the job's pod: {refused}")
    waiting = pod_waiting(pods, gpu)
    return Phase("pending", waiting or "Waiting for Kubernetes to create the job's pod.")


def training_phase(
    obj: Obj, pods: list[Obj], gpu: str, kind_name: str, refused: str | None = None
) -> Phase:
    """A PyTorchJob's or TFJob's status (Training Operator v1 conditions); ``refused``: why
    Kubernetes refused to create one of its pods."""
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return Phase("cancelled", "Cancelled; stopping its pods.", started=status.get("startTime"))
    succeeded = _condition(obj, "Succeeded")
    if succeeded:
        return Phase(
            "succeeded",
            started=status.get("startTime"),
            finished=status.get("completionTime") or succeeded.get("lastTransitionTime"),
        )
    failed = _condition(obj, "Failed")
    if failed:
        message = failed.get("message") or failed.get("reason") or f"the {kind_name} failed"
        return Phase(
            "failed",
            error=f"The {kind_name} failed: {message.rstrip('.')}.",
            started=status.get("startTime"),
            finished=status.get("completionTime") or failed.get("lastTransitionTime"),
        )
    if _condition(obj, "Running"):
        return Phase("running", "Running.", started=status.get("startTime") or _started(pods))
    if _condition(obj, "Restarting"):
        return Phase("running", "Restarting a replica.", started=status.get("startTime"))
    if refused:
        return Phase("pending", f"Kubernetes refused to create the {kind_name}'s pods: {refused}")
    waiting = pod_waiting(pods, gpu)
    if waiting:
        return Phase("pending", waiting)
    if _condition(obj, "Created"):
        return Phase("pending", "Created; the training operator is starting its pods.")
    return Phase(
        "pending", f"Waiting for the Kubeflow training operator to pick up the {kind_name}."
    )


def _started(pods: list[Obj]) -> str | None:
    times = [
        (cs.get("state") or {}).get("running", {}).get("startedAt")
        for p in pods
        for cs in (p.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in times if t]
    return min(known) if known else None


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
