"""The over-share watch: a workstation's share of a GPU that uses more memory than it asked
for (docs/architecture.md, "Shared GPUs").

Where the admin runs the CUDA MPS control daemon, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` holds
each share to its memory and nothing here fires. Without it, nothing stops a notebook from
taking the whole device from the others on it; so the hub's monitor reads what each share's
own processes use (:attr:`gpuhub.hub.monitor.utilization.GPUSample.own_memory`: NVML's per-process GPU
memory, or resident memory for simulated GPUs), warns a server that is over at once, and
stops it, like idle reclaim, if it is still over ``grace`` seconds later, saying why.

A process with no launch grant is attributed through its OS account where users have their
own (:func:`gpuhub.hub.monitor.utilization.attribute`); memory that still proves no holder
of a shared GPU is nobody's to take: :class:`StrayWatch` ends its processes after the same
grace and tells the fleet admins. No process escapes both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuhub.core import words
from gpuhub.core.holdings import Holding
from gpuhub.core.quantity import human_memory
from gpuhub.hub.monitor.utilization import GPUSample, Unexplained

HoldingKey = tuple[str, str, str]


@dataclass
class Overuse:
    """A share seen over its memory: since when, and what it used at the last look."""

    since: float
    used: int
    device: str


def used_by_share(holding: Holding, samples: Iterable[GPUSample]) -> tuple[int, str] | None:
    """What a share's own processes use of its GPU (bytes, and which GPU), or None where it
    is not a share by memory or its processes' memory is not known (never counted as over)."""
    if holding.share is None or not holding.memory:
        return None
    known = [s for s in samples if s.own_memory is not None]
    if not known:
        return None
    return sum(s.own_memory or 0 for s in known), known[0].gpu


class ShareWatch:
    """Which servers holding a share are over it, since when; who must be stopped now."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.over: dict[HoldingKey, Overuse] = {}

    def observe(
        self, seen: Iterable[tuple[HoldingKey, Holding, tuple[GPUSample, ...]]], now: float
    ) -> tuple[list[HoldingKey], list[HoldingKey]]:
        """Update from one tick's samples; returns (newly warned, to stop now)."""
        warned: list[HoldingKey] = []
        stop: list[HoldingKey] = []
        still: dict[HoldingKey, Overuse] = {}
        for key, holding, samples in seen:
            if holding.kind != "server":
                continue  # a job's processes run within its server's share
            used = used_by_share(holding, samples)
            if used is None or used[0] <= holding.memory:
                continue  # under its share again (or unknown): the warning is lifted
            entry = self.over.get(key)
            if entry is None:
                entry = Overuse(now, used[0], used[1])
                warned.append(key)
            entry.used, entry.device = used
            still[key] = entry
            if now - entry.since >= self.grace:
                stop.append(key)
        self.over = still
        return warned, stop

    def reason(self, holding: Holding, key: HoldingKey) -> str:
        """Why a server was stopped, after "because" (the notice's wording)."""
        entry = self.over[key]
        return (
            f"its processes used {human_memory(entry.used)} of GPU {entry.device}, more than "
            f"its {human_memory(holding.memory)} share, for {words.duration(self.grace)} "
            "(the others sharing that GPU need the rest)"
        )

    def warning(self, holding: Holding, key: HoldingKey) -> str:
        """The warning a user reads on hub pages and in the notices API."""
        entry = self.over[key]
        server = f"server {holding.name!r}" if holding.name else "default server"
        deadline = datetime.fromtimestamp(entry.since + self.grace, UTC)
        return (
            f"Your {server} uses {human_memory(entry.used)} of GPU {entry.device}, more than "
            f"its {human_memory(holding.memory)} share of {holding.gpu_type or 'the GPU'}: "
            f"it will be stopped on {deadline:%Y-%m-%d at %H:%M:%S} UTC unless it uses less "
            "by then. Free GPU memory (restart a kernel, use smaller batches) or start it "
            "again with a larger share."
        )

    def deadline(self, key: HoldingKey) -> float:
        return self.over[key].since + self.grace


@dataclass
class Stray:
    """A process on a shared GPU that no holder explains: since when, its account, use."""

    since: float
    account: str
    gpu: str
    used: int  # bytes, the device's unexplained memory at the last look


class StrayWatch:
    """Processes whose memory on a shared GPU no holder explains (no launch grant, and not
    attributed to a holder through their OS account): none may use the others' memory for
    nothing, so each is ended once it has been seen for ``grace`` seconds, and the fleet
    admins are told which process and which account (the monitor's log and fleet page)."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.seen: dict[int, Stray] = {}

    def observe(self, unexplained: Iterable[Unexplained], now: float) -> list[int]:
        """Update from one tick's unexplained memory; returns the pids to end now."""
        still: dict[int, Stray] = {}
        for entry in unexplained:
            if not entry.used:
                continue
            accounts = entry.accounts or ("",) * len(entry.pids)
            for pid, account in zip(entry.pids, accounts, strict=False):
                found = self.seen.get(pid)
                if found is None:
                    found = Stray(now, account, entry.gpu, entry.used)
                found.used = entry.used
                still[pid] = found
        self.seen = still
        return [pid for pid, stray in still.items() if now - stray.since >= self.grace]

    def ended(self, pid: int, when: float) -> str:
        """What the fleet admins read once ``pid`` was ended."""
        stray = self.seen.pop(pid)
        at = datetime.fromtimestamp(when, UTC)
        return (
            f"{at:%Y-%m-%d %H:%M:%S} UTC: ended process {pid} (OS account "
            f"{stray.account or 'unknown'}) on shared GPU {stray.gpu}: its memory there "
            f"({human_memory(stray.used)} unexplained in all) proved no holder for "
            f"{words.duration(self.grace)}."
        )
