"""The device book of one workstation: which server or job holds each GPU.

One book per hub process (all LocalGPUSpawners share :data:`ALLOCATOR`). It is the
:class:`gpuhub.ledger.HoldingsSource` of local mode. Allocation happens on the event loop
without awaiting, so two spawns cannot take the same GPU.

A GPU is never handed out twice:

* a server holds its GPUs from the moment its options are accepted until it has stopped;
* processes that outlive their server (local jobs, ``nohup`` runs, stray kernels) keep its
  GPUs: when a server stops, its surviving processes are found from the hub (never from
  state the user can write) and the GPUs they can see move to a *job hold*, released only
  once every one of those processes (pid + start time) is gone;
* after a hub restart, servers' holds come back from the spawners' saved state
  (:meth:`GPUAllocator.claim`) and job holds from the book's own file next to the hub's
  database (``LocalGPUSpawner.ledger_file``). Holding too long is the safe direction.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .ledger import HolderKind, Holding

log = logging.getLogger(__name__)

Process = tuple[int, float]  # (pid, psutil create_time): a pid alone may be reused


class NotEnoughGPUs(Exception):
    """Fewer GPUs are free than were asked for."""

    def __init__(self, wanted: int, free: int, total: int) -> None:
        super().__init__(f"{wanted} wanted, {free} of {total} free")
        self.wanted, self.free, self.total = wanted, free, total


@dataclass
class Holder:
    """Who holds a set of devices: a server, or the processes its server left running."""

    user: str
    kind: HolderKind
    name: str  # server name, or the server name whose processes these are
    gpu_type: str = ""
    since: float = field(default_factory=time.time)
    processes: list[Process] = field(default_factory=list)  # job holds only
    pending: bool = False  # a job hold whose processes are still being looked for


def server_owner(user: str, server: str) -> str:
    return f"{user}/{server}"


def jobs_owner(user: str, server: str) -> str:
    return f"{user}/{server}#jobs"


def alive(process: Process) -> bool:
    """Whether this exact process (not a later one with the same pid) still runs."""
    import psutil

    pid, started = process
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - started) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


class GPUAllocator:
    def __init__(self, store: str | os.PathLike[str] | None = None) -> None:
        self._owner_of: dict[int, str] = {}
        self._holders: dict[str, Holder] = {}
        self.store: Path | None = None
        if store is not None:
            self.open(store)

    # -- persistence of job holds (servers are restored from JupyterHub's own state) --------
    def open(self, store: str | os.PathLike[str]) -> None:
        """Use ``store`` for job holds, loading what a previous hub process left there."""
        path = Path(store).resolve()
        if self.store == path:
            return
        self.store = path
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error(
                "gpuhub: cannot read the GPU ledger %s (%s); no job holds restored", path, exc
            )
            return
        for owner, entry in (data.get("jobs") or {}).items():
            try:
                holder = Holder(
                    user=entry["user"],
                    kind="job",
                    name=entry["name"],
                    gpu_type=entry.get("gpu_type", ""),
                    since=float(entry.get("since", time.time())),
                    processes=[(int(p), float(t)) for p, t in entry["processes"]],
                )
                self.claim(owner, [int(d) for d in entry["devices"]], holder)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("gpuhub: skipping a bad job hold in %s: %s", path, exc)
        self.prune()

    def _save(self) -> None:
        if self.store is None:
            return
        jobs = {
            owner: {**asdict(holder), "pending": False, "devices": self.held_by(owner)}
            for owner, holder in self._holders.items()
            if holder.kind == "job"
        }
        tmp = self.store.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": 1, "jobs": jobs}, indent=1))
        tmp.replace(self.store)

    # -- reading ------------------------------------------------------------------------------
    def held_by(self, owner: str) -> list[int]:
        return sorted(d for d, o in self._owner_of.items() if o == owner)

    def free(self, candidates: Iterable[int]) -> list[int]:
        self.prune()
        return [d for d in candidates if d not in self._owner_of]

    def holdings(self, user: str | None = None) -> list[Holding]:
        """What each server and job hold now (the ledger's source in local mode)."""
        self.prune()
        by_owner: dict[str, list[int]] = {}  # one pass, not one per owner (4,000 GPUs)
        for device, owner in self._owner_of.items():
            by_owner.setdefault(owner, []).append(device)
        out = []
        for owner, holder in self._holders.items():
            if user is not None and holder.user != user:
                continue
            devices = tuple(sorted(by_owner.get(owner, ())))
            if devices:
                # A job hold is what a stopped server's processes (its jobs) still use.
                what = (
                    ""
                    if holder.kind == "server"
                    else f"jobs of server {holder.name or 'default'!r}"
                )
                out.append(
                    Holding(
                        holder.user,
                        holder.kind,
                        holder.name,
                        len(devices),
                        holder.gpu_type,
                        devices,
                        holder.since,
                        what,
                    )
                )
        return out

    # -- changing -----------------------------------------------------------------------------
    def allocate(
        self, owner: str, count: int, candidates: Sequence[int], holder: Holder | None = None
    ) -> list[int]:
        """Take ``count`` free devices from ``candidates`` for ``owner`` (lowest first)."""
        self.release(owner)  # a restarting server gives back what it had
        free = self.free(candidates)
        if count > len(free):
            raise NotEnoughGPUs(count, len(free), len(candidates))
        chosen = sorted(free)[:count]
        for device in chosen:
            self._owner_of[device] = owner
        if holder is not None:
            self._holders[owner] = holder
        log.info("GPUs %s -> %s", chosen, owner)
        return chosen

    def claim(self, owner: str, devices: Iterable[int], holder: Holder | None = None) -> None:
        """Record devices already in use (state restored after a restart)."""
        for device in devices:
            current = self._owner_of.get(device)
            if current not in (None, owner):
                log.warning(
                    "GPU %s is claimed by both %s and %s; keeping %s",
                    device,
                    current,
                    owner,
                    current,
                )
                continue
            self._owner_of[device] = owner
        if holder is not None:
            self._holders[owner] = holder

    def release(self, owner: str) -> list[int]:
        released = self.held_by(owner)
        for device in released:
            del self._owner_of[device]
        holder = self._holders.pop(owner, None)
        if released:
            log.info("GPUs %s released by %s", released, owner)
        if holder is not None and holder.kind == "job":
            self._save()
        return released

    def hand_to_jobs(self, owner: str, jobs: str) -> list[int]:
        """The server ``owner`` is gone: its devices move to the job hold ``jobs``, pending
        until :meth:`settle` says which of them its surviving processes still use."""
        devices = self.held_by(owner)
        server = self._holders.get(owner)
        self.release(owner)
        if not devices:
            return []
        previous = self._holders.get(jobs)
        holder = Holder(
            user=server.user if server else owner.split("/", 1)[0],
            kind="job",
            name=server.name if server else owner.split("/", 1)[-1],
            gpu_type=server.gpu_type if server else "",
            processes=previous.processes if previous else [],
            pending=True,
        )
        self.claim(jobs, devices, holder)
        return devices

    def settle(
        self,
        jobs: str,
        devices: Iterable[int],
        survivors: Sequence[tuple[Process, set[int] | None]],
    ) -> list[int]:
        """Keep, of ``devices`` pending in ``jobs``, those ``survivors`` can use; free the rest.
        ``None`` as a survivor's devices means "could not tell": it keeps them all."""
        holder = self._holders.get(jobs)
        if holder is None:
            return []
        devices = set(devices) & set(self.held_by(jobs))
        kept: set[int] = set()
        for _, visible in survivors:
            kept |= devices if visible is None else devices & visible
        for device in devices - kept:
            del self._owner_of[device]
        holder.processes = [*holder.processes, *(p for p, _ in survivors)]
        holder.pending = False
        if not self.held_by(jobs):
            self._holders.pop(jobs, None)
        if devices - kept:
            log.info("GPUs %s released by %s", sorted(devices - kept), jobs)
        self._save()
        return sorted(kept)

    def prune(self) -> None:
        """Release job holds whose processes have all ended."""
        ended = [
            owner
            for owner, holder in self._holders.items()
            if holder.kind == "job"
            and not holder.pending
            and not any(alive(p) for p in holder.processes)
        ]
        for owner in ended:
            self.release(owner)


# The one device book of this hub process.
ALLOCATOR = GPUAllocator()
