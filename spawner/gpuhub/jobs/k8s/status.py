"""A job's status in human terms, from its Kubernetes objects and its pod's log.

Pure functions over plain object dicts (as the apiserver returns them), so every case is
tested without a cluster: Job conditions, Training Operator conditions, pod phases, the
scheduler's ``Unschedulable`` message, image pull errors, and the runner's result line.
"""

from __future__ import annotations

import binascii
import json
import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuhub.core.quantity import human_memory
from gpuhub.jobs.k8s.manifests import LABEL_QUEUE_NAME
from gpuhub.jobs.model import FailedCell, Status
from gpuhub.jobs.run_notebook import OUTPUT_BEGIN, OUTPUT_END, RESULT_PREFIX

Obj = dict[str, Any]


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
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
LOST_OUTPUT = (
    "The executed notebook did not come back whole: without a shared home it travels in the "
    "pod's log, which the kubelet rotates at about 10 MiB; ask your admin for a shared home "
    "volume (jobs.homeVolume.shared) for big outputs."
)


@dataclass
class PodLog:
    """A job pod's log split into what the user reads, the result line and the notebook.

    ``output_problem``: one sentence when the log should have carried the executed notebook
    but it is cut short, corrupt or over the service's bound (None when it is fine, or when
    the notebook was not inflated: see ``inflate`` in :func:`parse_pod_log`).
    """

    text: str
    result: dict[str, Any] | None
    notebook: bytes | None
    output_problem: str | None = None
    has_output: bool = False  # a complete begin..end block was in the log

    @property
    def failed_cell(self) -> FailedCell | None:
        cell = (self.result or {}).get("failed_cell")
        if not isinstance(cell, dict):
            return None
        try:
            return FailedCell(**cell)
        except TypeError:
            return None


class OutputTooBig(Exception):
    """Inflating the executed notebook passed the bound."""


class _Inflater:
    """Streams base64 lines through gzip, holding at most ``limit`` inflated bytes.

    ``keep``: collect the notebook; otherwise only count (for a verdict without the memory).
    Raises :class:`OutputTooBig` or ``ValueError`` (corrupt) as soon as it knows.
    """

    def __init__(self, limit: int, keep: bool) -> None:
        self.limit = limit
        self.keep = keep
        self.size = 0
        self.parts: list[bytes] = []
        self._pending = ""
        self._gzip = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def feed(self, line: str) -> None:
        text = self._pending + line
        cut = len(text) - len(text) % 4
        self._pending = text[cut:]
        try:
            data = binascii.a2b_base64(text[:cut], strict_mode=True)
        except (binascii.Error, ValueError):
            raise ValueError("not base64") from None
        while data:
            piece = self._gzip.decompress(data, self.limit - self.size + 1)
            self.size += len(piece)
            if self.size > self.limit:
                raise OutputTooBig
            if self.keep:
                self.parts.append(piece)
            data = self._gzip.unconsumed_tail

    def finish(self) -> bytes:
        if self._pending or not self._gzip.eof:
            raise ValueError("cut short")
        return b"".join(self.parts)


def parse_pod_log(
    log: str,
    *,
    inflate: bool = False,
    keep_notebook: bool = False,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    tail: bool = False,
) -> PodLog:
    """Take the runner's result line and executed-notebook block out of a pod's log.

    The block is skipped unless ``inflate``; then it is streamed through gzip with at most
    ``max_output_bytes`` inflated (a hostile notebook can print a gzip bomb), and the
    notebook is kept only with ``keep_notebook``. A block cut short (log rotation), corrupt
    or too big sets ``output_problem``. ``tail``: the log is only its last lines (for
    reading, not for a verdict), so a block without its begin marker is no loss.
    """
    shown: list[str] = []
    result: dict[str, Any] | None = None
    in_block = False
    inflater: _Inflater | None = None
    notebook: bytes | None = None
    problem: str | None = None
    has_output = False
    block_lines = 0
    for line in log.splitlines(keepends=True):
        stripped = line.strip()
        if in_block:
            if stripped == OUTPUT_END:
                in_block = False
                has_output = problem is None
                if inflater is not None and problem is None:
                    try:
                        data = inflater.finish()
                        notebook = data if keep_notebook else None
                    except ValueError:
                        problem, has_output = _corrupt(), False
                shown.append(
                    f"[gpuhub: executed notebook, {block_lines} log lines, sent back as the "
                    "job's output]\n"
                )
                inflater = None
            else:
                block_lines += 1
                if inflater is not None and problem is None:
                    try:
                        inflater.feed(stripped)
                    except OutputTooBig:
                        problem = _too_big(max_output_bytes)
                        inflater = None
                    except ValueError:
                        problem = _corrupt()
                        inflater = None
            continue
        if stripped == OUTPUT_BEGIN:
            in_block, block_lines = True, 0
            inflater = _Inflater(max_output_bytes, keep_notebook) if inflate else None
            continue
        if stripped == OUTPUT_END:
            # Everything before it was the block: a tail that began inside it, or a log
            # whose start (with the begin marker) the kubelet rotated away.
            if tail:
                shown = ["[gpuhub: executed notebook, sent back as the job's output]\n"]
            else:
                problem = LOST_OUTPUT
                shown = [
                    "[gpuhub: the start of this log was rotated away; see the job's message]\n"
                ]
            continue
        if stripped.startswith(RESULT_PREFIX):
            try:
                loaded = json.loads(stripped[len(RESULT_PREFIX) :])
                result = loaded if isinstance(loaded, dict) else None
            except (ValueError, RecursionError):
                result = None
            continue
        shown.append(line)
    if in_block and not tail:  # no end marker: the pod was cut off while printing
        problem, has_output, notebook = LOST_OUTPUT, False, None
    if problem is not None:
        notebook = None
    return PodLog("".join(shown), result, notebook, problem, has_output)


def _corrupt() -> str:
    return (
        "The executed notebook in the job's log is corrupt, so it cannot be sent back; "
        "the job's log still has the cells' output."
    )


def _too_big(limit: int) -> str:
    return (
        f"The executed notebook is over the {human_memory(limit)} the jobs service takes "
        "back from a job's log (jobs.maxOutputBytes); write big results to files instead."
    )


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


_FORBIDDEN = re.compile(r'^(?:Error creating: )?(?:pods "[^"]*" is forbidden: )?')


def refusal_text(event_message: str) -> str:
    """The admission's reason in a controller's ``FailedCreate`` event, without the
    ``Error creating: pods "x-" is forbidden:`` preamble."""
    return _FORBIDDEN.sub("", event_message.strip(), count=1)


def suspended(obj: Obj) -> bool:
    """A Job's or TrainJob's ``spec.suspend``, a Training Operator job's
    ``spec.runPolicy.suspend``."""
    spec = obj.get("spec") or {}
    if obj.get("kind") in ("Job", "TrainJob"):
        return bool(spec.get("suspend"))
    return bool((spec.get("runPolicy") or {}).get("suspend"))


def queue_of(obj: Obj) -> str | None:
    """The Kueue LocalQueue a job waits in: it carries Kueue's queue-name label and is
    suspended (Kueue resumes it once admitted, and suspends it again if it is evicted).
    None for a job that is not waiting in a queue, or is being deleted."""
    queue = (obj["metadata"].get("labels") or {}).get(LABEL_QUEUE_NAME)
    if not queue or obj["metadata"].get("deletionTimestamp") or not suspended(obj):
        return None
    return str(queue)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def queue_phase(queue: str, workload: Obj | None) -> Phase:
    """A job waiting in Kueue's queue: status ``queued``, Kueue's reason as the message.

    The reason is the Workload's (kueue.x-k8s.io/v1beta1, docs/concepts/workload/): an
    ``Evicted`` condition's message (preempted, or its pods were not ready in time), else
    ``QuotaReserved=False``'s (``couldn't assign flavors to pod set main: insufficient unused
    quota for nvidia.com/gpu in flavor a100, 1 more needed``; ``LocalQueue x doesn't
    exist``); admitted but not resumed yet says so.
    """
    if workload is None:
        return Phase("queued", f"Waiting for Kueue to take it into the queue {queue}.")
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    evicted = conditions.get("Evicted")
    if evicted and evicted.get("status") == "True" and evicted.get("message"):
        return Phase("queued", _sentence(f"Evicted by Kueue: {evicted['message']}"))
    admitted = conditions.get("Admitted")
    if admitted and admitted.get("status") == "True":
        return Phase("queued", "Admitted by Kueue; starting.")
    reserved = conditions.get("QuotaReserved")
    if reserved and reserved.get("status") == "False" and reserved.get("message"):
        return Phase("queued", _sentence(str(reserved["message"])))
    return Phase("queued", f"Waiting for its turn in the queue {queue}.")


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
        message = _failure(failed, pods, "the job failed")
        return Phase(
            "failed",
            error=f"The job failed: {message}.",
            started=status.get("startTime"),
            finished=failed.get("lastTransitionTime"),
        )
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        return Phase("running", "Running.", started=_started(running) or status.get("startTime"))
    ended = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    if ended and len(ended) == len(pods):
        # The Job controller batches pod updates: for about a second after its pod ends, a
        # Job has neither Complete nor Failed. It is not waiting for a pod again.
        return Phase("running", FINISHING, started=_started(ended) or status.get("startTime"))
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
        message = _failure(failed, pods, f"the {kind_name} failed")
        return Phase(
            "failed",
            error=f"The {kind_name} failed: {message}.",
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


def train_job_phase(obj: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
    """A TrainJob's status (Kubeflow Trainer v2): its ``Complete``/``Failed`` conditions
    (taken from its JobSet), its nodes' pods meanwhile, and Trainer's progress
    (``status.trainerStatus``) where the runtime reports it; ``refused``: why Kubernetes
    refused to create a node's pod."""
    status = obj.get("status") or {}
    started = _started(pods)
    if obj["metadata"].get("deletionTimestamp"):
        return Phase("cancelled", "Cancelled; stopping its pods.", started=started)
    complete = _condition(obj, "Complete")
    if complete:
        return Phase("succeeded", started=started, finished=complete.get("lastTransitionTime"))
    failed = _condition(obj, "Failed")
    if failed:
        message = _failure(failed, pods, "the TrainJob failed")
        return Phase(
            "failed",
            error=f"The TrainJob failed: {message}.",
            started=started,
            finished=failed.get("lastTransitionTime"),
        )
    if suspended(obj):
        return Phase("pending", "Suspended; it starts when it is resumed.")
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        return Phase("running", _trainer_progress(status) or "Running.", started=started)
    ended = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    if ended and len(ended) == len(pods):
        return Phase("running", FINISHING, started=started)
    if refused and not pods:
        return Phase("pending", f"Kubernetes refused to create the TrainJob's pods: {refused}")
    waiting = pod_waiting(pods, gpu)
    if waiting:
        return Phase("pending", waiting)
    return Phase("pending", "Waiting for Kubeflow Trainer to start its nodes.")


def _trainer_progress(status: Obj) -> str | None:
    """Trainer's own progress, in words: "Running: 40% done, about 3 minutes left."."""
    trainer = status.get("trainerStatus") or {}
    percent = trainer.get("progressPercentage")
    if not isinstance(percent, int) or isinstance(percent, bool):
        return None
    text = f"Running: {percent}% done"
    left = trainer.get("estimatedRemainingSeconds")
    if isinstance(left, int) and not isinstance(left, bool) and left >= 0:
        minutes = max(1, round(left / 60))
        text += f", about {minutes} minute{'s' if minutes != 1 else ''} left"
    return text + "."


def _failure(condition: Obj, pods: list[Obj], default: str) -> str:
    """Why a job failed, without the final stop. The controllers' own message names the rule
    that ended the job ("reached the specified backoff limit"); which pod failed, and how,
    is what the user can act on, so it comes first."""
    message = str(condition.get("message") or condition.get("reason") or default).rstrip(".")
    pod = _pod_failure(pods)
    return f"{pod}; {message}" if pod else message


def _pod_failure(pods: list[Obj]) -> str | None:
    """The first pod whose container failed, in words: ``worker 1 exited with code 137
    (OOMKilled)`` for a replica of a training job, ``its pod exited with code 1`` for a
    Job's pod; None when none did."""
    failures = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated") or {}
            if ended.get("exitCode"):
                failures.append((ended.get("finishedAt") or "", pod, ended))
    if not failures:
        return None
    _, pod, ended = min(failures, key=lambda f: f[0])
    labels = pod["metadata"].get("labels") or {}
    role = labels.get("training.kubeflow.org/replica-type")
    index = labels.get("training.kubeflow.org/replica-index")
    who = f"{role} {index}" if role and index is not None else "its pod"
    node = labels.get("batch.kubernetes.io/job-completion-index")
    if labels.get("jobset.sigs.k8s.io/replicatedjob-name") and node is not None:
        who = f"node {node}"  # a TrainJob's
    reason = ended.get("reason")
    why = f" ({reason})" if reason and reason not in ("Error", "Completed") else ""
    return f"{who} exited with code {ended['exitCode']}{why}"


def _started(pods: list[Obj]) -> str | None:
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


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
