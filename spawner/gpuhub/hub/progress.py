"""Kubernetes events of a spawning pod, told as a person would want to hear them.

:func:`describe` turns one event (the scheduler's or the kubelet's, as KubeSpawner's event
reflector hands them over) into a :class:`Step`: a sentence, a progress percentage, and
whether the spawn can no longer succeed. :func:`timeout_message` explains a spawn that ran
out of time from the last step seen. Pure functions: unit-tested without a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuhub.core import words
from gpuhub.core.quantity import format_cpu, format_memory
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity

_FIT_ERROR = re.compile(
    r"0/(?P<nodes>\d+) nodes are available: (?P<reasons>.*?)\.(?: preemption: .*)?$"
)
_REASON = re.compile(r"(?P<count>\d+) (?P<reason>.+)")
# Reasons no amount of waiting fixes (the scheduler's preemption calls them unresolvable).
_UNRESOLVABLE = (
    "node(s) had untolerated taint",
    "node(s) didn't match Pod's node affinity/selector",
    "node(s) were unschedulable",
    "node(s) didn't match pod topology spread constraints",
    "node(s) had volume node affinity conflict",
)
# The scheduler's reason for nodes whose devices cannot serve a pod's DRA claims now (all of
# its GPUs claimed, or too few on one node): a GPU type claimed through DRA waits for GPUs.
_CLAIMS_UNALLOCATABLE = "cannot allocate all claims"


@dataclass(frozen=True)
class SpawnRequest:
    """What the user asked for, in the words the form used."""

    image: str  # display name or reference
    gpus: int = 0
    gpu_name: str = ""  # the GPU type's display name
    gpu_resource: str = ""
    cpu: float = 0.0
    memory: int = 0  # bytes


@dataclass(frozen=True)
class Step:
    message: str
    progress: int
    fatal: bool = False
    waiting_for_gpus: bool = False


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def parse_fit_error(message: str) -> tuple[int, dict[str, int]] | None:
    """``(nodes, {reason: node count})`` from a FailedScheduling message; None if not one."""
    if message.startswith("no nodes available to schedule pods"):
        return 0, {}
    match = _FIT_ERROR.match(message)
    if match is None:
        return None
    reasons: dict[str, int] = {}
    for part in match["reasons"].split(", "):
        item = _REASON.fullmatch(part.strip())
        if item:
            reasons[item["reason"]] = reasons.get(item["reason"], 0) + int(item["count"])
    return int(match["nodes"]), reasons


def gpus_wanted(request: SpawnRequest) -> str:
    return f"{request.gpus} free {words.gpu_noun(request.gpu_name, request.gpus)}"


def waiting_for_gpus(request: SpawnRequest, capacity: GPUCapacity | None) -> str:
    """ "Waiting for 2 free NVIDIA A100 80GB GPUs (1 free now)"."""
    text = f"Waiting for {gpus_wanted(request)}"
    if capacity is None:
        return text
    if capacity.total == 0:  # said plainly, not "0 free now, at most 0 on one node"
        return f"{text}: no node has these GPUs now"
    if capacity.largest_free is not None and capacity.largest_free >= request.gpus:
        return f"{words.gpus(request.gpus, request.gpu_name)} free now; placing your server"
    if capacity.free >= request.gpus and capacity.largest_free:
        return f"{text} on one node ({capacity.free} free now, at most {capacity.largest_free} on one node)"
    return f"{text} ({capacity.free} free now)"


def _scheduling_failed(request: SpawnRequest, message: str, capacity: GPUCapacity | None) -> Step:
    parsed = parse_fit_error(message)
    if parsed is None:
        return Step(f"Waiting for the scheduler: {message}", 10)
    nodes, reasons = parsed
    if nodes == 0:
        return Step("The cluster has no nodes to run servers on.", 100, fatal=True)
    insufficient = {
        r.removeprefix("Insufficient ") for r in reasons if r.startswith("Insufficient ")
    }
    if request.gpu_resource and request.gpu_resource in insufficient:
        return Step(waiting_for_gpus(request, capacity), 10, waiting_for_gpus=True)
    if request.gpus and any(r.startswith(_CLAIMS_UNALLOCATABLE) for r in reasons):
        return Step(waiting_for_gpus(request, capacity), 10, waiting_for_gpus=True)
    if insufficient or "Too many pods" in reasons:
        wanted = []
        if "cpu" in insufficient:
            wanted.append(f"{format_cpu(request.cpu)} CPU")
        if "memory" in insufficient:
            wanted.append(f"{format_memory(request.memory)} memory")
        what = " and ".join(wanted) or "room for one more server"
        return Step(f"Waiting for a node with {what} free", 10)
    if reasons and all(r.startswith(_UNRESOLVABLE) for r in reasons):
        return Step(
            f"No node in the cluster can run this server: {_explain(request, reasons)}.",
            100,
            fatal=True,
        )
    return Step(f"Waiting for a node: {message}", 10)


def _explain(request: SpawnRequest, reasons: Mapping[str, int]) -> str:
    parts = []
    for reason, count in sorted(reasons.items()):
        nodes = _plural(count, "node")
        if reason.startswith("node(s) had untolerated taint"):
            taint = reason.removeprefix("node(s) had untolerated taint").strip()
            parts.append(f"{nodes} reserved ({taint}) for other work")
        elif reason.startswith("node(s) didn't match Pod's node affinity/selector"):
            kind = (
                words.gpu_noun(request.gpu_name, 2) if request.gpu_name else "the required labels"
            )
            parts.append(f"{nodes} without {kind}")
        elif reason.startswith("node(s) were unschedulable"):
            parts.append(f"{nodes} cordoned for maintenance")
        else:
            parts.append(f"{nodes}: {reason}")
    return ", ".join(parts)


_PULL_FAILED = (
    "Failed to pull image",
    "Error: ErrImagePull",
    "Error: ImagePullBackOff",
    "Error: InvalidImageName",
)


def _from_kueue(event: Mapping[str, Any]) -> bool:
    """Whether Kueue's pod integration reported ``event`` (on a pod it queues)."""
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
    return "kueue" in str(source or "")


def describe(
    event: Mapping[str, Any], request: SpawnRequest, capacity: GPUCapacity | None = None
) -> Step | None:
    """One event as a Step, or None for events a person need not see."""
    reason = event.get("reason") or ""
    message = event.get("message") or ""
    if _from_kueue(event):
        # Kueue's words are the admin's; the wait itself is said from the queue's figures
        # (gpuhub.k8s.kueue.waiting_words). Its "Started" is the admission, not the container.
        if reason == "Started":
            return Step("Admitted by Kueue; placing your server on a node", 25)
        return None
    if reason == "FailedScheduling":
        return _scheduling_failed(request, message, capacity)
    if reason == "Scheduled":
        node = message.rsplit(" to ", 1)[-1] if " to " in message else ""
        if request.gpus:
            return Step(
                f"{words.gpus(request.gpus, request.gpu_name)} reserved on node {node}",
                30,
            )
        return Step(f"Assigned to node {node}", 30)
    if reason == "Pulling":
        return Step(
            f"Pulling image {request.image} (this can take a few minutes the first time)", 40
        )
    if reason == "Pulled":
        if "already present" in message:
            return Step(f"Image {request.image} is already on the node", 70)
        took = re.search(r" in (\S+?)s? \(", message) or re.search(r" in (\S+)$", message)
        return Step(
            f"Pulled image {request.image}" + (f" in {_seconds(took[1])}" if took else ""), 70
        )
    if reason in ("Failed", "BackOff") and any(
        message.startswith(p) for p in (*_PULL_FAILED, "Back-off pulling image")
    ):
        return Step(
            f"Could not pull image {request.image}: it does not exist or this cluster may not read it.",
            100,
            fatal=True,
        )
    if reason == "Created":
        return Step("Creating your server's container", 80)
    if reason == "Started":
        return Step("Server started; waiting for Jupyter to answer", 90)
    if reason == "BackOff" and "restarting failed container" in message:
        return Step(
            "Your server exited while starting; an administrator can see why in the hub's logs.",
            100,
            fatal=True,
        )
    if reason in ("Killing", "SuccessfulAttachVolume", "AddedInterface", "TaintManagerEviction"):
        return None
    if event.get("type") == "Warning":
        return Step(f"{reason}: {message}", 50)
    return None


def _seconds(text: str) -> str:
    """ "1m3.2" or "12.5" (Go durations, seconds) -> "1 min 3 s" / "13 s"."""
    minutes = re.match(r"(\d+)m([\d.]+)", text)
    if minutes:
        return f"{int(minutes[1])} min {round(float(minutes[2]))} s"
    try:
        return f"{max(round(float(text.rstrip('s'))), 1)} s"
    except ValueError:
        return text


def timeout_message(last: Step | None, seconds: float) -> str:
    """Why a spawn gave up, from where it got to."""
    limit = f"{round(seconds / 60)} minutes" if seconds >= 120 else f"{round(seconds)} seconds"
    said = last.message.rstrip(".") if last is not None else ""  # one full stop, not two
    if last is not None and last.waiting_for_gpus:
        return (
            f"Your server did not start within {limit}: {said[:1].lower()}{said[1:]}. "
            "Try fewer GPUs or another GPU type, or try again later."
        )
    if last is not None and last.progress >= 40 and last.progress < 70:
        return f"Your server did not start within {limit}: the image was still being pulled. Try again in a few minutes; it will be faster once the image is on the node."
    if last is not None:
        return f"Your server did not start within {limit}; last step: {said}."
    return f"Your server did not start within {limit}, and the cluster reported no progress."
