"""A job's status in human terms where it is no one kind's: its place in Kueue's queue, and
its primary pod's log (the runner's result line and the executed notebook). Each kind reads
its own phase (:meth:`gpuhub.jobs.kinds.base.WorkloadKind.phase`).

Pure functions over plain object dicts (as the apiserver returns them), so every case is
tested without a cluster.
"""

from __future__ import annotations

import binascii
import functools
import json
import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuhub.core.quantity import human_memory
from gpuhub.jobs.kinds import of_object
from gpuhub.jobs.kinds.phase import Phase
from gpuhub.jobs.model import FailedCell
from gpuhub.jobs.run_notebook import OUTPUT_BEGIN, OUTPUT_END, RESULT_PREFIX
from gpuhub.k8s.kueue import QueueUse, shortages, waiting_words
from gpuhub.k8s.labels import QUEUE_NAME_LABEL

Obj = dict[str, Any]

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


_FORBIDDEN = re.compile(r'^(?:Error creating: )?(?:pods "[^"]*" is forbidden: )?')


def refusal_text(event_message: str) -> str:
    """The admission's reason in a controller's ``FailedCreate`` event, without the
    ``Error creating: pods "x-" is forbidden:`` preamble."""
    return _FORBIDDEN.sub("", event_message.strip(), count=1)


def queue_of(obj: Obj) -> str | None:
    """The Kueue LocalQueue a job waits in: it carries Kueue's queue-name label and is
    suspended (Kueue resumes it once admitted, and suspends it again if it is evicted).
    None for a job that is not waiting in a queue, or is being deleted."""
    queue = (obj["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL)
    if not queue or obj["metadata"].get("deletionTimestamp") or not of_object(obj).suspended(obj):
        return None
    return str(queue)


# Why Kueue took an admitted job's quota back (a Workload's Evicted condition's reason), in
# people's words; the job waits in its queue again.
_EVICTED = {
    "Preempted": "Kueue gave its GPUs to a job or server that comes first",
    "PodsReadyTimeout": "its pods did not start in time, so Kueue stopped it",
    "InactiveWorkload": "Kueue stopped it",
}
# Kueue's words for a queue that cannot admit anything: the admin's to fix.
_QUEUE_BROKEN = ("doesn't exist", "does not exist", "is inactive", "not found")


def queue_phase(
    queue: str,
    workload: Obj | None,
    *,
    gpus: int = 0,
    gpu_name: str = "",
    resource: str = "",
    use: QueueUse | None = None,
    place: int | None = None,
    fair: bool = False,
) -> Phase:
    """A job waiting in Kueue's queue: status ``queued``, and why in people's words
    (:func:`gpuhub.k8s.kueue.waiting_words`): what of the queue's GPUs is in use and by how
    many (``use``, its ClusterQueue's), read from its Workload's conditions
    (kueue.x-k8s.io, docs/concepts/workload/) where Kueue has tried it: ``QuotaReserved=False``
    (what it lacks: :func:`gpuhub.k8s.kueue.shortages`), ``Evicted`` (taken back), admitted
    but not resumed yet. Kueue's own message is for the admin's log, never shown here.

    ``gpus``: what the job asks for in all, of ``resource`` (the GPU type ``gpu_name``);
    ``place``: its place in line (1 = next), said beside the message, not in it; ``fair``:
    it waits in its user's own LocalQueue of a queue ordered by past usage (``queue`` is
    then the admin's name for the queue, ``place`` the place in its ClusterQueue).
    """
    say = functools.partial(
        waiting_words,
        queue,
        gpus=gpus,
        gpu_name=gpu_name,
        resource=resource,
        use=use,
        place=place,
        say_place=False,
        fair=fair,
    )
    if workload is None:
        return Phase("queued", say())
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    evicted = conditions.get("Evicted")
    if evicted and evicted.get("status") == "True":
        why = _EVICTED.get(str(evicted.get("reason") or ""), "Kueue stopped it")
        return Phase("queued", f"{why[0].upper()}{why[1:]}. {say()}")
    admitted = conditions.get("Admitted")
    if admitted and admitted.get("status") == "True":
        return Phase("queued", "Admitted by Kueue; starting.")
    reserved = conditions.get("QuotaReserved")
    message = str((reserved or {}).get("message") or "")
    if reserved and reserved.get("status") == "False" and message:
        lacking = shortages(message)
        if lacking:
            mine = [s for s in lacking if s.resource == resource] or lacking
            shortage = next((s for s in mine if s.never), mine[0])
            return Phase("queued", say(shortage=shortage))
        if any(part in message for part in _QUEUE_BROKEN):
            return Phase(
                "queued",
                f'Waiting in queue "{queue}", which cannot admit anything now (it is missing '
                "or inactive); tell your admin.",
            )
    return Phase("queued", say())


def kueue_says(workload: Obj | None) -> str:
    """Kueue's own words on a waiting Workload (its ``Evicted`` or ``QuotaReserved=False``
    message), for the admin's log: "" when it says nothing."""
    conditions = {
        c.get("type"): c for c in ((workload or {}).get("status") or {}).get("conditions") or []
    }
    for kind, status in (("Evicted", "True"), ("QuotaReserved", "False")):
        condition = conditions.get(kind)
        if condition and condition.get("status") == status and condition.get("message"):
            return f"{kind}: {condition['message']}"
    return ""


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
