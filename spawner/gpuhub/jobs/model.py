"""The job model: what a submit asks for, what a job is, and how a backend answers.

One request shape for every entry point (sidebar, magics, REST): :meth:`JobRequest.parse`
turns the raw JSON body into a validated request or raises :class:`JobError` with one
sentence naming the field. Resources (image, cpu, memory, gpu_type, gpus) go through
:func:`gpuhub.core.options.parse_launch_options`, the same path as the spawn form; this module
only adds what is particular to jobs (notebook, kind, name, workers, runtime, parameters).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any

from gpuhub.core.options import (
    LaunchOptions,
    OptionsError,
    Problems,
    as_given,
    check_json_value,
    parse_launch_options,
    whole_number,
)
from gpuhub.core.policy import Policy
from gpuhub.core.quantity import format_cpu, format_memory, human_memory
from gpuhub.jobs.kinds import DISPLAY_NAMES, KINDS
from gpuhub.jobs.kinds.base import JobKind
from gpuhub.jobs.kinds.phase import FINAL_STATUSES as FINAL_STATUSES
from gpuhub.jobs.kinds.phase import STATUSES as STATUSES
from gpuhub.jobs.kinds.phase import Status as Status

# A job kind's name: one registered in gpuhub.jobs.kinds ("job", "pytorchjob", "tfjob",
# "trainjob", "pipeline"), which says all that is particular to it.
Kind = str
# The kinds gpuhub knows are KINDS, in gpuhub's order: the registry itself, so a kind
# registered later is offered too. How sentences name them:
KIND_NAMES = DISPLAY_NAMES

# A job's status ("queued", "pending", "running", ...) is said where the kinds read it
# (gpuhub.jobs.kinds.phase, imported above): the kinds must not import this module, which
# asks them to check a request.

# Keys of the REST body besides the launch options that parse_launch_options checks.
JOB_FIELDS = ("notebook", "kind", "workers", "runtime", "parameters", "name")

MAX_WORKERS = 64
MAX_NOTEBOOK_BYTES = 16 * 1024 * 1024
MAX_PARAMETERS_BYTES = 64 * 1024
# A DNS-1123 label: Kubernetes object names and labels derive from it, so it is checked
# here for every backend, local included, and a job keeps its name wherever it runs.
_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 52  # leaves room for the suffixes backends append (e.g. "-worker-12", "-x7k2p")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class JobError(OptionsError):
    """A job request or operation was refused.

    ``field`` names the offending input ("notebook", "gpus", "id", ...), ``message`` is one
    sentence for the user and ``status`` the HTTP status the REST API answers with.
    Because it is an :class:`OptionsError`, code that already reports launch-option
    errors reports these too.
    """

    def __init__(
        self,
        field: str,
        message: str,
        status: int = 400,
        problems: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(field, message, problems)
        self.status = status


class JobNotFound(JobError):
    def __init__(self, job_id: str) -> None:
        shown = job_id if len(job_id) <= 40 else job_id[:37] + "..."
        super().__init__("id", f'There is no job "{shown}" among your jobs.', status=404)
        self.job_id = job_id


# Every job id is ``<name>-<6 hex digits>`` ("train-1e9fe9"), on every backend (new_job_id).
ID_HEX = 6


def new_job_id(stem: str, seed: bytes | None = None) -> str:
    """``<stem>-<6 hex digits>``: random digits (the local backend), or digits from ``seed``
    (a cluster job's owner, kind and idempotency key: a retried submit names the same
    object; the backend moves on to the next seed if another job has the id)."""
    digits = (
        secrets.token_hex(ID_HEX // 2)
        if seed is None
        else hashlib.sha256(seed).hexdigest()[:ID_HEX]
    )
    return f"{stem}-{digits}"


def check_job_id(job_id: str) -> str:
    """Job ids travel in URLs; refuse anything that could not be one of ours. Any shape an
    earlier gpuhub made is accepted (a cluster's ``train-ezs6vh3msvy4ddzv`` of gpuhub 0.1 is
    still found and cancelled); new ones are :func:`new_job_id`'s."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise JobNotFound(str(job_id))
    return job_id


def utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


# Lines the kernel writes to every job's log that say nothing about the job: a job's kernel
# talks to papermill over loopback TCP on the same machine or pod, which ipykernel >= 6.30
# warns about at every start.
_NOISE = ("Kernel is running over TCP without encryption",)
# papermill ends each "Executing Cell 3" line with a ruler of dashes.
_RULER = re.compile(r"(?<=[^\s-])-{8,}$", re.MULTILINE)


def without_noise(text: str) -> str:
    """A job's log as every client shows it (panel, ``%job logs``, the REST API): without
    the kernel's transport warnings (``_NOISE``) and papermill's trailing rulers."""
    if any(marker in text for marker in _NOISE):
        text = "".join(
            line
            for line in text.splitlines(keepends=True)
            if not any(marker in line for marker in _NOISE)
        )
    return _RULER.sub("", text)


def output_name(job_id: str) -> str:
    """The executed notebook's file name: the job's id, so two runs of one notebook open in
    tabs that say which run each is (``train-1e9fe9.ipynb``, not ``train.ipynb`` twice)."""
    return f"{job_id}.ipynb"


# -- the request ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Runtimes:
    """The Kubeflow Trainer runtimes (ClusterTrainingRuntime names) the admin offers for
    TrainJobs, and the one a TrainJob gets when it names none."""

    offered: tuple[str, ...] = ()
    default: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"runtimes": list(self.offered), "default_runtime": self.default}


@dataclass(frozen=True)
class NotebookRef:
    """A notebook inside the server root: ``path`` for the API, ``os_path`` on disk."""

    path: str  # relative to the server root, "/"-separated, as the contents API spells it
    os_path: Path  # resolved absolute path
    size: int

    @property
    def stem(self) -> str:
        return PurePosixPath(self.path).stem

    @property
    def directory(self) -> str:
        parent = str(PurePosixPath(self.path).parent)
        return "" if parent == "." else parent


@dataclass(frozen=True)
class JobRequest:
    """A validated submit. Build it with :meth:`parse`; every field is safe to use as is."""

    notebook: NotebookRef
    kind: Kind
    name: str  # DNS-1123 label
    resources: LaunchOptions  # per worker for distributed kinds
    workers: int  # 1 unless the kind is distributed (replicas, a TrainJob's numNodes)
    parameters: Mapping[str, Any]  # papermill parameters, JSON-serialisable
    runtime: str | None = None  # for kinds that take one (a TrainJob's ClusterTrainingRuntime)

    @property
    def total_gpus(self) -> int:
        return self.resources.gpus * self.workers

    @property
    def total_amount(self) -> Fraction:
        """What the job counts as against the quota, in GPUs (a share: its fraction)."""
        return self.resources.gpu_amount * self.workers

    def gpu_summary(self) -> str:
        return gpu_summary(self.resources, self.workers)

    @classmethod
    def parse(
        cls,
        raw: object,
        *,
        policy: Policy,
        groups: Iterable[str] = (),
        root_dir: str | os.PathLike[str] | None,
        max_notebook_bytes: int = MAX_NOTEBOOK_BYTES,
        max_workers: int = MAX_WORKERS,
        notebook: NotebookRef | None = None,
        kinds: Collection[str] | None = None,
        runtimes: Runtimes = Runtimes(),
    ) -> JobRequest:
        """Validate a REST body. Raises :class:`JobError` (or its parent ``OptionsError``).

        The kind and the notebook are checked first (the rest depends on them); then every
        other field, in the dialog's order (workers, resources, parameters, name), and one
        refusal lists all that is wrong (``problems``), the first as its ``message``. Nothing here touches anything but the filesystem's
        metadata, so a refused request has created nothing. ``notebook``: an already
        resolved notebook (the hub service has the user's notebook as content, not on
        disk; see :func:`gpuhub.service.notebook.shipped_notebook`), then ``root_dir`` is
        not used. ``kinds``: the kinds offered here (all of :data:`KINDS` if None), a
        refusal names them; ``runtimes``: the TrainJob runtimes offered and the default.
        """
        if not isinstance(raw, Mapping):
            raise JobError("body", "The request body must be a JSON object.")
        kind = parse_kind(raw.get("kind", "job"), kinds)
        if notebook is None:
            if root_dir is None:
                raise TypeError("JobRequest.parse needs root_dir or notebook")
            notebook = resolve_notebook(raw.get("notebook"), root_dir, max_bytes=max_notebook_bytes)
        # Each field on its own, in the dialog's order: one refusal tells everything wrong.
        problems = Problems()
        workers = problems.check(parse_workers, raw.get("workers"), kind, max_workers)
        runtime = problems.check(parse_runtime, raw.get("runtime"), kind, runtimes)
        resources = problems.check(
            parse_launch_options, raw, policy, groups, ignore=JOB_FIELDS, subject="job"
        )
        if resources is not None:
            problems.check(check_device_claims, kind, resources)
        parameters = problems.check(parse_parameters, raw.get("parameters"))
        name = problems.check(parse_name, raw.get("name"), default_from=notebook.stem)
        if problems.errors:
            first = OptionsError.of(problems.errors)
            status = first.status if isinstance(first, JobError) else 400
            raise JobError(first.field, first.message, status, first.problems)
        return cls(
            notebook=notebook,
            kind=kind,
            name=name,
            resources=resources,
            workers=workers,
            parameters=parameters,
            runtime=runtime,
        )


def kinds_sentence(kinds: Iterable[str]) -> str:
    """The kinds offered, as a refusal names them: ``"job" (training job), "trainjob"
    (TrainJob)``."""
    return ", ".join(f"{as_given(k)} ({KIND_NAMES[k]})" for k in kinds if k in KIND_NAMES)


def parse_kind(value: Any, offered: Collection[str] | None = None) -> Kind:
    """A job kind among those offered here (the admin's choice on a cluster; every kind
    when ``offered`` is None)."""
    kinds = [k for k in KINDS if offered is None or k in offered]
    if value in (None, "") and "job" in kinds:
        return "job"
    if not isinstance(value, str) or value not in kinds:
        if not kinds:
            raise JobError("kind", "No job kind is offered here; ask your admin.")
        offered_text = f"the kinds offered are {kinds_sentence(kinds)}"
        if value in (None, ""):
            raise JobError("kind", f"Choose a job kind: {offered_text}.")
        shown = as_given(value)
        known = isinstance(value, str) and value in KINDS
        raise JobError(
            "kind",
            f"Job kind {shown} is {'not offered here' if known else 'not one gpuhub knows'}; "
            f"{offered_text}.",
        )
    return value


def check_device_claims(kind: Kind, resources: LaunchOptions) -> None:
    """Refuse GPUs of a type claimed through DRA for a kind whose pods cannot carry a claim."""
    gpu_type = resources.gpu_type
    job_kind = KINDS[kind]
    if gpu_type is None or gpu_type.dra is None or resources.gpus == 0:
        return
    if job_kind.no_claims:
        able = _any_of(k for k in KINDS.values() if not k.no_claims)
        raise JobError(
            "gpu_type",
            f"A {job_kind.display_name} cannot have {gpu_type.display_name} GPUs: "
            f"{job_kind.no_claims}; submit {able} instead, or pick another GPU type.",
        )


def parse_runtime(value: Any, kind: Kind, runtimes: Runtimes) -> str | None:
    """The runtime of a kind that runs through one: one the admin offers, else the default.
    Other kinds take none."""
    if not KINDS[kind].takes_runtime:
        if value not in (None, ""):
            raise JobError(
                "runtime",
                f"A runtime applies only to {_any_of(k for k in KINDS.values() if k.takes_runtime)}"
                f"; a {KIND_NAMES[kind]} takes none (you gave {as_given(value)}).",
            )
        return None
    offered = ", ".join(as_given(r) for r in runtimes.offered)
    if value in (None, ""):
        if runtimes.default is None:
            raise JobError(
                "runtime",
                f"No training runtime is offered for {KIND_NAMES[kind]}s here; ask your admin "
                "to offer one.",
            )
        return runtimes.default
    if not isinstance(value, str) or value not in runtimes.offered:
        raise JobError(
            "runtime",
            f"Runtime {as_given(value)} is not offered here; the runtimes offered are "
            f"{offered or 'none'}.",
        )
    return value


def _any_of(kinds: Iterable[JobKind]) -> str:
    """The kinds as a sentence lists them: "a PyTorchJob, a TFJob or a TrainJob"."""
    names = [f"a {k.display_name}" for k in kinds]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def resolve_notebook(
    value: Any, root_dir: str | os.PathLike[str], *, max_bytes: int = MAX_NOTEBOOK_BYTES
) -> NotebookRef:
    """Resolve a notebook path (API path, or absolute OS path) that must stay inside root.

    Symlinks are resolved before the check, so a link pointing out of the root is refused
    like ``../`` is.
    """
    if not isinstance(value, str) or not value.strip():
        raise JobError("notebook", "The notebook must be a path, such as train.ipynb.")
    if len(value) > 4096 or "\0" in value:
        raise JobError("notebook", "The notebook is not a valid path.")
    root = Path(root_dir).resolve()
    candidate = Path(value)
    if not candidate.is_absolute():
        candidate = root / value
    try:
        resolved = candidate.resolve(strict=False)
    except (OSError, RuntimeError):  # symlink loops
        raise JobError("notebook", f"Notebook {as_given(value)} is not a valid path.") from None
    if resolved != root and root not in resolved.parents:
        raise JobError(
            "notebook", f"Notebook {as_given(value)} is outside this server's root directory."
        )
    if resolved.suffix != ".ipynb":
        raise JobError("notebook", f"{as_given(value)} is not a notebook (an .ipynb file).")
    try:
        stat = resolved.stat()
    except OSError:
        raise JobError("notebook", f"Notebook {as_given(value)} does not exist.", 404) from None
    if not resolved.is_file():
        raise JobError("notebook", f"Notebook {as_given(value)} is not a file.")
    if stat.st_size > max_bytes:
        raise JobError(
            "notebook",
            f"Notebook {as_given(value)} is {format_memory(stat.st_size)}, over the "
            f"{format_memory(max_bytes)} a job may take; clear large outputs and try again.",
            413,
        )
    return NotebookRef(
        path=resolved.relative_to(root).as_posix(), os_path=resolved, size=stat.st_size
    )


def default_name(stem: str) -> str:
    """A DNS-1123 name from a notebook's file name ("Train ResNet (v2)" -> "train-resnet-v2")."""
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:MAX_NAME].strip("-")
    return slug or "notebook"


def parse_name(value: Any, *, default_from: str) -> str:
    if value in (None, ""):
        return default_name(default_from)
    if not isinstance(value, str) or len(value) > MAX_NAME or not _DNS_1123_LABEL.fullmatch(value):
        raise JobError(
            "name",
            f"The name {as_given(value)} must be at most {MAX_NAME} lower-case letters, digits or "
            '"-", '
            "starting and ending with a letter or digit.",
        )
    return value


def parse_workers(value: Any, kind: Kind, max_workers: int = MAX_WORKERS) -> int:
    if value is None or value == "":
        return 1
    count = whole_number(value)
    if count is None:
        raise JobError(
            "workers", f"The number of workers must be a whole number (you gave {as_given(value)})."
        )
    value = count
    if not KINDS[kind].distributed:
        if value != 1:
            raise JobError(
                "workers",
                f"Workers apply only to {_any_of(k for k in KINDS.values() if k.distributed)}; "
                f"a {KIND_NAMES[kind]} runs once.",
            )
        return 1
    if not 1 <= value <= max_workers:
        raise JobError(
            "workers",
            f"The number of workers must be between 1 and {max_workers} (you gave {value}).",
        )
    return value


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def parse_parameters(value: Any) -> dict[str, Any]:
    """Papermill parameters: a JSON object whose keys are Python identifiers."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise JobError(
            "parameters",
            f"Parameters must be a mapping of names to values, such as "
            f'{{"epochs": 10}} (you gave {as_given(value)}).',
        )
    try:
        check_json_value(value, "parameters")
    except OptionsError as exc:
        raise JobError(exc.field, exc.message) from None
    for key in value:
        if not isinstance(key, str) or not _IDENTIFIER.fullmatch(key) or key == "__builtins__":
            raise JobError(
                "parameters",
                f"Parameter name {as_given(key)} must be a Python identifier, such as "
                '"learning_rate".',
            )
    try:
        text = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise JobError(
            "parameters",
            f"Parameters must be JSON values (numbers, strings, lists, objects): {exc}.",
        ) from None
    if len(text) > MAX_PARAMETERS_BYTES:
        raise JobError(
            "parameters",
            f"Parameters take {len(text)} bytes as JSON, over the limit of {MAX_PARAMETERS_BYTES}.",
        )
    parsed: dict[str, Any] = json.loads(text)  # a plain, detached copy
    return parsed


def gpu_summary(resources: LaunchOptions, workers: int = 1) -> str:
    """What a person reads in the jobs list: "2 x NVIDIA A100 80GB", or "CPU only"."""
    if resources.gpu_type is None or resources.gpus == 0:
        summary = "CPU only"
    elif resources.gpu_memory is not None:  # a share of one GPU's memory
        summary = f"{human_memory(resources.gpu_memory)} of 1 x {resources.gpu_type.display_name}"
    else:
        summary = f"{resources.gpus} x {resources.gpu_type.display_name}"
    if workers > 1:
        summary = f"{workers} workers, {summary} each"
    return summary


# -- the job ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailedCell:
    """Where a notebook failed (papermill's ``PapermillExecutionError``)."""

    index: int  # 0-based index of the cell in the executed notebook
    execution_count: int | None
    source: str  # truncated to a readable length
    ename: str
    evalue: str
    # The error's last lines as the kernel printed them (traceback or stderr), without colours.
    error_lines: str = ""


@dataclass
class JobRecord:
    """One job as every backend reports it and the REST API returns it (:meth:`to_json`).

    ``id`` is opaque to clients and unique per backend deployment; ``output`` is the
    executed notebook's path relative to the user's server root (None until there is one
    the server can open); ``url`` a page about the job elsewhere (e.g. the KFP run page).
    """

    id: str
    name: str
    kind: Kind
    backend: str  # "local", "kubernetes", "kfp": which backend owns it
    status: Status
    owner: str
    notebook: str  # source notebook, relative to the server root
    created: datetime
    started: datetime | None = None
    finished: datetime | None = None
    image: str | None = None
    cpu: str | None = None  # Kubernetes quantities, per worker
    memory: str | None = None
    gpu_type: str | None = None
    gpus: int = 0  # per worker
    gpu_memory: str | None = None  # a share of one GPU's memory, per worker ("8G")
    workers: int = 1
    gpu: str = "CPU only"  # human summary
    parameters: dict[str, Any] = field(default_factory=dict)
    output: str | None = None
    url: str | None = None
    message: str | None = None  # progress a person understands ("waiting for a free A100")
    error: str | None = None  # one sentence, when status is failed
    failed_cell: FailedCell | None = None
    progress: dict[str, int] | None = None  # {"done": cells run, "total": cells}, if known
    # While queued: 1 for the next job to be admitted, 2 behind it, ...; None when the queue
    # does not say (or the job is not queued).
    queue_position: int | None = None
    runtime: str | None = None  # a TrainJob's ClusterTrainingRuntime

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @classmethod
    def new(
        cls, job_id: str, request: JobRequest, *, backend: str, owner: str, **extra: Any
    ) -> JobRecord:
        """A pending record for a request just accepted."""
        res = request.resources
        return cls(
            id=job_id,
            name=request.name,
            kind=request.kind,
            backend=backend,
            status="pending",
            owner=owner,
            notebook=request.notebook.path,
            created=utcnow(),
            image=res.image,
            cpu=format_cpu(res.cpu),
            memory=format_memory(res.memory),
            gpu_type=res.gpu_type.key if res.gpu_type else None,
            gpus=res.gpus,
            gpu_memory=format_memory(res.gpu_memory) if res.gpu_memory is not None else None,
            workers=request.workers,
            gpu=request.gpu_summary(),
            parameters=dict(request.parameters),
            runtime=request.runtime,
            **extra,
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.status != "queued":
            data["queue_position"] = None
        for key in ("created", "started", "finished"):
            data[key] = _iso(getattr(self, key))
        data["elapsed"] = self.elapsed()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRecord:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("created", "started", "finished"):
            values[key] = parse_iso(values.get(key))
        if values.get("failed_cell"):
            values["failed_cell"] = FailedCell(**values["failed_cell"])
        return cls(**values)

    def elapsed(self, now: datetime | None = None) -> float | None:
        """Seconds run so far (or in total, once finished)."""
        if self.started is None:
            return None
        end = self.finished or now or utcnow()
        seconds = (end - self.started).total_seconds()
        return None if math.isnan(seconds) else max(0.0, round(seconds, 1))
