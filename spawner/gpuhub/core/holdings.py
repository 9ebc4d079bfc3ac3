"""Who holds GPUs, in the words every process uses: a :class:`Holding` (a server's or a job's
GPUs), the user's quota (:class:`GPUQuota`) and the sentences a refusal over quota says.

The hub's ledger (:mod:`gpuhub.hub.ledger.ledger`) keeps the holdings; the jobs service and the
Kubernetes job kinds read and describe them, so they live here, below both.

A share of a GPU (:mod:`gpuhub.core.sharing`) counts as its fraction of a GPU, exactly
(:class:`~fractions.Fraction`): 8 GB of a 16 GB GPU is half a GPU, so a quota of 1 holds two
such shares or one whole GPU. Quotas may be fractions too (``"default": 0.5``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from gpuhub.core import words
from gpuhub.core.policy import PolicyConfigError
from gpuhub.core.quantity import human_memory

if TYPE_CHECKING:
    from gpuhub.core.policy import GPUType

HolderKind = Literal["server", "job"]

# Where a request waits for GPUs it was not given yet (:attr:`Holding.waiting`): gpuhub's line
# on a workstation (:mod:`gpuhub.hub.ledger.line`), Kueue's queue on Kubernetes (a job queued,
# a server's pod gated), or a node (a pod not bound yet, a grant whose pods do not show yet).
# What waits counts against the quota (it holds a place) but is never *held*: held, free,
# GPU-hours and the metrics count only devices given and pods bound to a node.
Waiting = Literal["", "line", "queue", "node"]
WAITING_WORDS: dict[str, str] = {
    "line": "waiting in line",
    "queue": "waiting in Kueue's queue",
    "node": "waiting for a node",
}


@dataclass(frozen=True)
class GPUQuota:
    """GPUs one user may hold at once, servers and jobs together (``gpu_quota``)."""

    default: Fraction | None = None
    groups: Mapping[str, Fraction] = field(default_factory=dict)

    def limit_for(self, groups: Iterable[str]) -> Fraction | None:
        """The largest quota among the user's groups, else the default (None: no quota)."""
        values = [self.groups[g] for g in groups if g in self.groups]
        return max(values) if values else self.default

    @classmethod
    def from_config(cls, value: Any, name: str = "gpu_quota") -> GPUQuota:
        """Validate the admin's ``{"default": int | None, "groups": {group: int}}``."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise PolicyConfigError(f"{name} must be a dict like {{'default': 2, 'groups': {{}}}}")
        extra = sorted(set(value) - {"default", "groups"})
        if extra:
            raise PolicyConfigError(
                f"{name} has unknown keys {extra}; known keys are default, groups"
            )
        default = value.get("default")
        if default is not None and not _count(default):
            raise PolicyConfigError(
                f"{name}.default must be a GPU count (0 or more; 0.5 for half a GPU) or None"
            )
        groups = value.get("groups") or {}
        if not isinstance(groups, Mapping) or not all(
            isinstance(k, str) and _count(v) for k, v in groups.items()
        ):
            raise PolicyConfigError(
                f"{name}.groups must map group names to GPU counts (0.5 for half a GPU)"
            )
        return cls(
            default=None if default is None else _fraction(default),
            groups={k: _fraction(v) for k, v in groups.items()},
        )


def _count(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value == value  # not NaN
        and 0 <= value < 10**9
    )


def _fraction(value: int | float) -> Fraction:
    """The quota as the admin wrote it (0.3 is 3/10, not the float nearest to it)."""
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


@dataclass(frozen=True)
class Workload:
    """The cluster object a job's pods belong to, as the hub matches it to its grant: gpuhub's
    kind (``job``, ``pytorchjob``, ``tfjob``, ``trainjob``, ``pipeline``) and the object's uid
    (a pipeline's KFP run id). Never its name: names are chosen by users."""

    kind: str
    uid: str


@dataclass(frozen=True)
class Holding:
    """GPUs one server or job of one user holds now: what the ledger counts against the quota
    and the fleet page lists. Not to be confused with a workstation's ``Holder``
    (:mod:`gpuhub.hub.ledger.device_book`): who holds devices there, as the book keeps it."""

    user: str
    kind: HolderKind
    name: str  # server name ("" for the default server) or job id
    gpus: int
    # The display name, for people; on Kubernetes a pod's holding names its GPU type's key
    # (or its resource) until :func:`named` gives it the display name.
    gpu_type: str = ""
    devices: tuple[int, ...] = ()  # device indices (local mode), for counting each GPU once
    since: float | None = None  # epoch seconds
    what: str = ""  # how people call it, where the kind and name do not say it well
    pods: tuple[tuple[str, str], ...] = ()  # (namespace, pod) on Kubernetes, for utilization
    # A workstation's job hold: the processes that keep it, (pid, command line).
    processes: tuple[tuple[int, str], ...] = ()
    workload: Workload | None = None  # a cluster job's object (its pods' controller)
    # A share of a GPU (gpuhub.core.sharing): the GPUs it counts as, and its GPU memory (bytes;
    # 0 for a time-sliced share); None for whole GPUs.
    share: Fraction | None = None
    memory: int = 0
    # "" once its GPUs are given (devices handed out, pods bound); else where it waits for
    # them (WAITING_WORDS). A waiting holding counts against the quota, and nowhere else.
    waiting: Waiting = ""
    # A workstation's job hold: the gpuhub jobs (ids) whose processes keep it.
    jobs: tuple[str, ...] = ()
    # Claimed through DRA: the devices its pods were allocated, in people's words ("GPU 3
    # (A100-SXM4-80GB) on a100-7"), once the scheduler allocated them.
    claimed: tuple[str, ...] = ()

    @property
    def held(self) -> bool:
        """Whether its GPUs are given (not waiting for them)."""
        return not self.waiting

    @property
    def waiting_words(self) -> str:
        """ "waiting in line", "waiting in Kueue's queue"; "" once held."""
        return WAITING_WORDS.get(self.waiting, "")

    @property
    def amount(self) -> Fraction:
        """What this holding counts as against the quota, in GPUs."""
        return self.share if self.share is not None else Fraction(self.gpus)

    @property
    def held_text(self) -> str:
        """ "2", "0.5 (8 GB)": what it holds, as the quota sentences list it."""
        shown = words.amount(self.amount)
        return f"{shown} ({human_memory(self.memory)})" if self.memory else shown

    @property
    def gpus_text(self) -> str:
        """What it holds, one figure per fact: "2 x NVIDIA A100", "8 GB of GPU 3 (T4), 0.5 GPU",
        "2 shares of A10, 0.5 GPU"; claimed through DRA, its devices: "1 x A100: GPU 3
        (A100-SXM4-80GB) on a100-7"."""
        name = self.gpu_type or "GPU"
        if self.share is None:
            held = f"{self.gpus} \u00d7 {name}"  # as the fleet page always wrote it
            return f"{held}: {', '.join(self.claimed)}" if self.claimed else held
        amount = words.gpu_amount(self.share)
        if self.memory:
            if self.claimed:
                where = ", ".join(self.claimed)
            elif self.devices:
                where = words.device_list(self.devices, name)
            else:
                where = f"one {name}"
            return f"{human_memory(self.memory)} of {where}, {amount}"
        return f"{words.plural(self.gpus, 'share')} of {name}, {amount}"

    @property
    def held_words(self) -> str:
        """What it holds, after "its": "2 NVIDIA A100 GPUs", "8 GB share of T4",
        "2 time-sliced shares of A10"."""
        name = self.gpu_type or "GPU"
        if self.share is None:
            return words.gpus(self.gpus, name)
        if self.memory:
            return f"{human_memory(self.memory)} share of {name}"
        return f"{words.plural(self.gpus, 'time-sliced share')} of {name}"

    @property
    def label(self) -> str:
        """How people call it: "server 'default'", "job 'train-1e9fe9'", "jobs of server
        'gpu1' (long-one-5ff007)" (a workstation's job hold: :func:`job_hold_name`)."""
        if self.what:
            return self.what
        if self.kind == "server":
            return f"server {self.name or 'default'!r}"
        return f"job {self.name!r}"

    @property
    def quota_text(self) -> str:
        """ "server 'a': 1", "job 'x': 1, waiting in Kueue's queue": one entry of the list
        the quota's sentences give."""
        waits = f", {self.waiting_words}" if self.waiting else ""
        return f"{self.label}: {self.held_text}{waits}"


def quota_list(holdings: Sequence[Holding]) -> str:
    """ "server 'a': 1, job 'x': 1, waiting in Kueue's queue": what counts against a quota,
    one entry per server or job. A job whose replicas are partly given their GPUs and partly
    waiting (a PyTorchJob's pods bound one by one) is one entry: "job 'x': 2, 1 of it
    waiting for a node"."""
    groups: dict[tuple[str, str, Workload | None], list[Holding]] = {}
    for holding in holdings:
        groups.setdefault((holding.kind, holding.name, holding.workload), []).append(holding)
    entries = []
    for group in groups.values():
        if len(group) == 1:
            entries.append(group[0].quota_text)
            continue
        shared = any(h.share is not None for h in group)
        whole = replace(
            group[0],
            gpus=sum(h.gpus for h in group),
            share=sum((h.amount for h in group), Fraction(0)) if shared else None,
            memory=sum(h.memory for h in group),
            waiting="",
        )
        waits = [h for h in group if h.waiting]
        entry = f"{whole.label}: {whole.held_text}"
        if waits:
            waited = words.amount(sum((h.amount for h in waits), Fraction(0)))
            entry += f", {waited} of it {waits[0].waiting_words}"
        entries.append(entry)
    return ", ".join(entries)


def job_hold_name(server: str, jobs: Sequence[str], others: Sequence[str] = ()) -> str:
    """What a workstation's job hold is called wherever it is shown (the fleet page, the
    user's notices, the holdings API): the server and the jobs the user knows, "jobs of
    server 'gpu1' (long-one-5ff007)"; processes that are no gpuhub job by their commands
    (``others``), never by pids or the runner's module."""
    named = [*jobs, *others]
    what = "jobs" if jobs else "processes"
    listed = f" ({', '.join(named)})" if named else ""
    return f"{what} of server {server or 'default'!r}{listed}"


def gpu_type_names(gpu_types: Mapping[str, GPUType]) -> dict[str, str]:
    """What people call the GPUs of a holding, by what the holding names them: its GPU type's
    key (every GPU pod gpuhub makes carries it in ``GPUHUB_GPU_TYPE``) or, for a pod without
    it, the resource it asks for where only one type asks for that resource."""
    by_resource: dict[str, set[str]] = {}
    for gpu_type in gpu_types.values():
        by_resource.setdefault(gpu_type.resource_name, set()).add(gpu_type.display_name)
    names = {resource: n.pop() for resource, n in by_resource.items() if len(n) == 1}
    names.update((key, gpu_type.display_name) for key, gpu_type in gpu_types.items())
    return names


def named(holding: Holding, names: Mapping[str, str]) -> Holding:
    """``holding`` with its GPU type's display name (:func:`gpu_type_names`), where known."""
    name = names.get(holding.gpu_type)
    return replace(holding, gpu_type=name) if name else holding


def per_workload(holdings: Iterable[Holding]) -> list[Holding]:
    """One holding per server or job of a user: on Kubernetes each pod is seen alone, and the
    replicas of a PyTorchJob or TFJob (and a grant for those not seen yet) are one job."""
    merged: dict[tuple[str, str, str, Workload | None, str], Holding] = {}
    for holding in holdings:
        # A job's replicas share its object (kind and uid); a grant for replicas not seen yet
        # names the same object once the service sent its uid. Replicas given their GPUs and
        # replicas still waiting stay apart: only the first are held.
        key = (holding.user, holding.kind, holding.name, holding.workload, holding.waiting)
        seen = merged.get(key)
        if seen is None:
            merged[key] = holding
            continue
        starts = [t for t in (seen.since, holding.since) if t is not None]
        merged[key] = replace(
            seen,
            gpus=seen.gpus + holding.gpus,
            devices=tuple(sorted({*seen.devices, *holding.devices})),
            since=min(starts) if starts else None,
            pods=seen.pods + holding.pods,
            processes=seen.processes + holding.processes,
            jobs=tuple(dict.fromkeys((*seen.jobs, *holding.jobs))),
            claimed=tuple(dict.fromkeys((*seen.claimed, *holding.claimed))),
            share=add_shares(seen, holding),
            memory=seen.memory + holding.memory,
        )
    return list(merged.values())


def add_shares(first: Holding, other: Holding) -> Fraction | None:
    """The share of two parts of one workload (its replicas), None when both are whole."""
    if first.share is None and other.share is None:
        return None
    return first.amount + other.amount


def gpus_held(holdings: Iterable[Holding]) -> Fraction:
    """GPUs held (given: waiting ones are not), each GPU counted at most once: a device held
    by several holdings of one user (a local job on its server's device, shares of one
    device) counts what they hold of it together, at most the whole device; holdings without
    device numbers count what they hold."""
    per_device: dict[int, Fraction] = {}
    total = Fraction(0)
    for holding in holdings:
        if holding.waiting:
            continue
        if holding.devices:
            each = holding.amount / len(holding.devices)
            for device in holding.devices:
                per_device[device] = per_device.get(device, Fraction(0)) + each
        else:
            total += holding.amount
    return total + sum((min(Fraction(1), part) for part in per_device.values()), Fraction(0))


def gpus_waiting(holdings: Iterable[Holding]) -> Fraction:
    """GPUs asked for by what waits for them (in line, in Kueue's queue, for a node)."""
    return sum((h.amount for h in holdings if h.waiting), Fraction(0))


def gpus_counted(holdings: Iterable[Holding]) -> Fraction:
    """What counts against the quota: GPUs held and GPUs waited for (a place in a line or a
    queue is kept for its GPUs)."""
    holdings = list(holdings)
    return gpus_held(holdings) + gpus_waiting(holdings)


def held_and_waiting(holdings: Sequence[Holding]) -> str:
    """ "2", "1 and wait for 1, 2": what a user has of their quota, as its sentences start
    ("You hold …"), one figure per fact: waiting is never called held."""
    held, waiting = gpus_held(holdings), gpus_waiting(holdings)
    if not waiting:
        return words.amount(held)
    both = words.amount(held + waiting)
    return f"{words.amount(held)} and wait for {words.amount(waiting)}, {both}"


class QuotaExceeded(Exception):
    """Taking ``wanted`` more GPUs would put the user over their quota (HTTP 403)."""

    status = 403

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _gpus(n: Fraction | int) -> str:
    return words.gpu_amount(n)


def quota_sentence(
    holdings: Sequence[Holding],
    limit: Fraction | int,
    wanted: Fraction | int,
    what: str = "server",
) -> str | None:
    """The refusal for taking ``wanted`` more GPUs (a share: its fraction) on top of
    ``holdings``; None if it fits."""
    if wanted <= 0:
        return None
    if wanted > limit:
        return (
            f"This {what} needs {_gpus(wanted)}, more than your quota of {_gpus(limit)} "
            "at once (servers and jobs together)."
        )
    if gpus_counted(holdings) + wanted <= limit:
        return None
    where = quota_list(holdings)
    stop = "stop a server or wait for a job to end" if holdings else "ask for fewer GPUs"
    comma = "," if gpus_waiting(holdings) else ""
    return (
        f"You hold {held_and_waiting(holdings)} of your quota of {_gpus(limit)} ({where}){comma} "
        f"and this {what} needs {words.amount(wanted)} more; {stop}."
    )
