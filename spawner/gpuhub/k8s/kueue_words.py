"""What gpuhub reads of a Kueue queue (a workload's place in line, :class:`Pending`; what of a
ClusterQueue's quota is in use, :class:`QueueUse`) and what a person reads while something
waits in it, built once for the spawn page and for queued jobs alike (:func:`waiting_words`):
what is in use of the queue's GPUs and by how many, and the place in line, never Kueue's own
message, which only the admin's log keeps. What that message says is read structurally
where it can be (:func:`shortages`). :mod:`gpuhub.k8s.kueue` names these too."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuhub.core import words
from gpuhub.core.quantity import parse_quantity


@dataclass(frozen=True)
class Pending:
    """One workload waiting in a LocalQueue, as the visibility API lists it."""

    name: str  # the Workload's name
    position: int  # 1 = next to be admitted
    owners: tuple[tuple[str, str, str], ...]  # (kind, name, uid) of its owners
    # Its place among every LocalQueue's workloads in the ClusterQueue (1 = next): the place
    # that counts where each user has a LocalQueue of their own (admission fair sharing).
    in_cluster_queue: int | None = None


@dataclass(frozen=True)
class QueueUse:
    """What a LocalQueue's ClusterQueue has and what of it is taken: per (flavor, resource),
    its nominal quota and what workloads have reserved of it, and how many workloads hold a
    reservation (servers and jobs alike, all the namespaces it serves)."""

    cluster_queue: str
    nominal: Mapping[tuple[str, str], float]
    reserved: Mapping[tuple[str, str], float]
    workloads: int

    def of(self, resource: str, flavor: str | None = None) -> tuple[float, float] | None:
        """``(reserved, nominal)`` of ``resource`` in ``flavor`` (every flavor of it when
        None or unknown here); None where the queue has no quota for it."""
        keys = [k for k in self.nominal if k[1] == resource]
        if flavor is not None and (flavor, resource) in self.nominal:
            keys = [(flavor, resource)]
        if not keys:
            return None
        return sum(self.reserved.get(k, 0.0) for k in keys), sum(self.nominal[k] for k in keys)


def queue_use(cluster_queue: Mapping[str, Any]) -> QueueUse:
    """A ClusterQueue's JSON (either version) as a :class:`QueueUse`."""
    spec, status = cluster_queue.get("spec") or {}, cluster_queue.get("status") or {}
    nominal: dict[tuple[str, str], float] = {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                key = (str(flavor.get("name") or ""), str(resource.get("name") or ""))
                nominal[key] = _amount(resource.get("nominalQuota"))
    reserved: dict[tuple[str, str], float] = {}
    for flavor in status.get("flavorsReservation") or []:
        for resource in flavor.get("resources") or []:
            key = (str(flavor.get("name") or ""), str(resource.get("name") or ""))
            reserved[key] = _amount(resource.get("total"))
    holders = status.get("reservingWorkloads")
    return QueueUse(
        str((cluster_queue.get("metadata") or {}).get("name") or ""),
        nominal,
        reserved,
        holders if isinstance(holders, int) and not isinstance(holders, bool) else 0,
    )


def _amount(value: Any) -> float:
    try:
        return float(parse_quantity(value))
    except (TypeError, ValueError, ArithmeticError):
        return 0.0


# What a workload's owner is, as a person waiting behind it would say it.
_OWNER_WORDS = {
    "Pod": "server",
    "Job": "job",
    "PyTorchJob": "job",
    "TFJob": "job",
    "TrainJob": "job",
    "JobSet": "job",
    "RayJob": "job",
    "MPIJob": "job",
}


def in_front(line: list[Pending], place: int) -> str:
    """ "2 servers and 1 job": the workloads ahead of ``place`` in ``line``, by what they are
    (a pod waiting on its own is a server: the pods gpuhub queues are its servers)."""
    counts: dict[str, int] = {}
    for pending in line:
        if pending.position >= place:
            continue
        kinds = [_OWNER_WORDS.get(kind, "workload") for kind, _name, _uid in pending.owners]
        what = kinds[0] if kinds else "workload"
        counts[what] = counts.get(what, 0) + 1
    parts = [words.plural(n, what) for what, n in sorted(counts.items(), key=_server_first)]
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _server_first(item: tuple[str, int]) -> tuple[int, str]:
    return ({"server": 0, "job": 1}.get(item[0], 2), item[0])


@dataclass(frozen=True)
class Shortage:
    """What one pod set of a Workload lacks, read from Kueue's ``QuotaReserved=False``
    message: the resource and flavor, how many more are needed (None when not said), and
    whether the request is over all the queue may ever have (it never fits)."""

    resource: str
    flavor: str
    more: int | None = None
    never: bool = False


_SHORTAGE = re.compile(
    r"insufficient (?P<unused>unused )?quota for (?P<resource>[^\s,;]+) in flavor "
    r"(?P<flavor>[^\s,;]+)(?P<rest>[^;]*)"
)
_MORE = re.compile(r"(?P<more>\d+) more needed")


def shortages(message: str) -> list[Shortage]:
    """Kueue's reasons a Workload got no quota (``couldn't assign flavors to pod set main:
    insufficient unused quota for nvidia.com/gpu in flavor a100, 4 more needed``, one per pod
    set, ``;``-separated), each as a :class:`Shortage`; empty for any other message."""
    found = []
    for match in _SHORTAGE.finditer(message or ""):
        rest = match["rest"]
        more = _MORE.search(rest)
        found.append(
            Shortage(
                match["resource"],
                match["flavor"],
                int(more["more"]) if more else None,
                # "insufficient quota ... request > maximum capacity": more than it could
                # ever be given, not merely more than is free.
                never=not match["unused"] or "maximum capacity" in rest,
            )
        )
    return found


def _holders(count: int) -> str:
    """ "1 job or server", "3 jobs and servers": who holds a queue's quota (Kueue counts
    workloads, not what they are)."""
    return "1 job or server" if count == 1 else f"{count:,} jobs and servers"


def waiting_words(
    queue: str,
    *,
    gpus: int,
    gpu_name: str = "",
    resource: str = "",
    use: QueueUse | None = None,
    shortage: Shortage | None = None,
    place: int | None = None,
    line: list[Pending] | None = None,
    say_place: bool = True,
    fair: bool = False,
) -> str:
    """What waits in Kueue's queue, in people's words: the spawn page's sentence and a
    queued job's message. 'Waiting in queue "gpus" for 1 A100 GPU: 4 of 4 A100 GPUs in use
    by 3 jobs and servers; you are 2nd in line, behind 1 server.'

    ``gpus``: what the waiting server or job asks for in all, of ``resource`` (the GPU type's
    display name ``gpu_name``); ``use``: its queue's quota and what is taken of it
    (:meth:`KueueAPI.usage`, None where it cannot be read); ``shortage``: what Kueue said
    it lacks, when it has tried (:func:`shortages`); ``place``: 1 = next, with the ``line``
    it is in (None where that cannot be read). ``say_place``: the spawn page says the place
    here; a job's status says it beside the message (give its ``place`` all the same).
    ``fair``: the queue orders by past usage (admission fair sharing, each user in a LocalQueue
    of their own): ``place`` is the place in the ClusterQueue, ``line`` only the user's own
    workloads, and the words say why someone who came later may go first.
    """
    asked = f" for {words.gpus(gpus, gpu_name)}" if gpus else ""
    head = f'Waiting in queue "{queue}"{asked}'
    parts = []
    flavor = shortage.flavor if shortage is not None else None
    figures = use.of(resource or (shortage.resource if shortage else ""), flavor) if use else None
    if figures is not None:
        taken, quota = figures
        noun = words.gpu_noun(gpu_name, 2 if quota != 1 else 1)
        if shortage is not None and shortage.never:
            parts.append(
                f"the queue has {words.amount(quota)} {noun} in all, fewer than asked for, so "
                "it cannot start: ask for fewer, or ask your admin for more quota"
            )
        else:
            free = f" ({words.amount(quota - taken)} free)" if taken < quota else ""
            holders = _holders(use.workloads if use else 0)
            parts.append(
                f"{words.amount(taken)} of {words.amount(quota)} {noun} in use by {holders}{free}"
            )
            if gpus and taken + gpus <= quota and shortage is None and place in (None, 1):
                # Enough is free and nothing waits ahead: Kueue has not taken it in yet.
                parts[-1] += ", so Kueue is about to admit it"
    elif shortage is not None and shortage.never:
        parts.append("it asks for more than the queue can ever give: ask for fewer GPUs")
    elif shortage is not None and shortage.more:
        parts.append(f"{words.gpus(shortage.more, gpu_name)} more must come free first")
    if say_place:
        if place is not None:
            # A user's own LocalQueue lists only their workloads: what is in front is not known.
            ahead = "" if fair else in_front(line or [], place)
            parts.append(
                f"you are {words.ordinal(place)} in line" + (f", behind {ahead}" if ahead else "")
            )
        elif line is None:
            parts.append("its place in line cannot be read")
        else:
            parts.append("Kueue has not given it a place in line yet")
    if fair:
        parts.append(FAIR_QUEUE_WORDS)
    if not parts:
        return f"{head}."
    return f"{head}: {'; '.join(parts)}."


# Kueue orders a fair queue by each LocalQueue's GPU use, decayed with its half-life (the
# cluster admin's usageHalfLifeTime), which gpuhub does not read: the words say no figure.
FAIR_QUEUE_WORDS = (
    "the queue favours who used least recently, so someone who asked after you may go first"
)
