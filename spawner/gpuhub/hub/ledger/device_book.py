"""The device book of one workstation: which server or job holds each GPU.

One book per hub process (all LocalGPUSpawners share :data:`ALLOCATOR`). It is the
:class:`gpuhub.hub.ledger.ledger.HoldingsSource` of local mode (through its line,
:class:`gpuhub.hub.ledger.line.GPULine`). Allocation happens on the event loop
without awaiting, so two spawns cannot take the same GPU.

A GPU is never handed out twice:

* a server holds its GPUs from the moment its options are accepted until it has stopped;
* processes that outlive their server (local jobs, ``nohup`` runs, stray kernels) keep its
  GPUs: when a server stops, its surviving processes are found from the hub (never from
  state the user can write) and the GPUs they can see move to a *job hold*, released only
  once every one of those processes (pid + start time) is gone;
* after a hub restart, servers' holds come back from the spawners' saved state
  (:meth:`GPUAllocator.claim`) and job holds from the book's own file next to the hub's
  database (``LocalGPUSpawner.ledger_file``), written atomically. A damaged or missing file
  costs nothing that runs: the hub also finds every live process carrying a grant it signed
  (:mod:`gpuhub.hub.ledger.launches`) and holds what they were given. Holding too long is the safe
  direction.

The words: a *holder* (:class:`Holder`) is who holds devices in the book, a server or the
processes its server left running (a *job hold*), with what the book must know about it;
holders are found by their :class:`HolderKey`, a (user, kind, name) record, never a joined
string, so no server name a user picks can stand for another holder. What a holder holds, as
the ledger counts it against the quota, is a :class:`gpuhub.core.holdings.Holding`
(:meth:`GPUAllocator.holdings`).

A GPU type shared by memory (:mod:`gpuhub.core.sharing`) puts several holders on one device: the
book keeps, per shared device, what each holder was given of its memory, and a device holds
shares while they add up to at most its memory (``Holder.device_memory``); a device is
either handed out whole or shared, never both. A share follows the same rules as a whole
GPU: its server's processes that outlive it keep it in a job hold, the file and the signed
grants bring it back after a restart.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpuhub.core.holdings import HolderKind, Holding, job_hold_name
from gpuhub.hub.ledger import launches
from gpuhub.hub.ledger.launches import Process, Proof
from gpuhub.hub.ledger.statefile import Damaged, kind_of, restore_json, write_json

log = logging.getLogger(__name__)

LEDGER_VERSION = 2
SAVE_RETRY_SECONDS = 10.0  # after a failed write, between tries when nothing changes


class NotEnoughGPUs(Exception):
    """Fewer GPUs are free than were asked for."""

    def __init__(self, wanted: int, free: int, total: int) -> None:
        super().__init__(f"{wanted} wanted, {free} of {total} free")
        self.wanted, self.free, self.total = wanted, free, total


@dataclass(frozen=True)
class HolderKey:
    """Which holder: the book's key of a user's server, or of the processes one of their
    servers left running (``kind="job"``, named after that server). :attr:`Holder.key` is
    its holder's."""

    user: str
    kind: HolderKind
    name: str

    def __str__(self) -> str:  # log lines only; never a key
        return f"{self.user}'s {self.kind} {self.name or 'default'!r}"


@dataclass(frozen=True)
class HeldProcess:
    """One process that keeps a job hold: pid and start time (a pid alone may be reused),
    its command line, the server launch it came from, and the gpuhub job it is part of
    (its ``GPUHUB_JOB_ID``; "" for none): people know a hold by its jobs, not its pids."""

    pid: int
    started: float
    command: str = ""
    launch: str = ""
    job: str = ""

    @property
    def process(self) -> Process:
        return (self.pid, self.started)


@dataclass
class Holder:
    """Who holds a set of devices, as the book keeps it: a server, or the processes its server
    left running (a job hold), with its GPU type, its processes and its share of a device.
    Not to be confused with a :class:`~gpuhub.core.holdings.Holding`: what a holder holds now,
    as the ledger counts it."""

    user: str
    kind: HolderKind
    name: str  # server name, or the server name whose processes these are
    gpu_type: str = ""
    since: float = field(default_factory=time.time)
    processes: list[HeldProcess] = field(default_factory=list)  # job holds only
    pending: bool = False  # a job hold whose processes are still being looked for
    launch: str = ""  # servers: this launch's id (GPUHUB_SERVER_ID)
    # A share of a GPU shared by memory: the bytes asked for, of a device of
    # ``device_memory`` bytes; 0 for whole devices.
    gpu_memory: int = 0
    device_memory: int = 0

    @property
    def key(self) -> HolderKey:
        return HolderKey(self.user, self.kind, self.name)

    @property
    def shared(self) -> bool:
        return self.gpu_memory > 0 and self.device_memory > 0


def server_key(user: str, server: str) -> HolderKey:
    """The key of a user's server."""
    return HolderKey(user, "server", server)


def jobs_key(user: str, server: str) -> HolderKey:
    """The key of the job hold of a user's server: what its processes kept when it stopped."""
    return HolderKey(user, "job", server)


def alive(process: Process) -> bool:
    """Whether this exact process (not a later one with the same pid) still runs."""
    import psutil

    pid, started = process
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - started) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


def _held(process: HeldProcess | Process) -> HeldProcess:
    return process if isinstance(process, HeldProcess) else HeldProcess(*process)


class GPUAllocator:
    def __init__(
        self, store: str | os.PathLike[str] | None = None, proof: Proof | None = None
    ) -> None:
        self._holder_of: dict[int, HolderKey] = {}  # devices handed out whole
        # Devices shared by memory: device -> holder -> bytes of its memory they were given.
        self._shares: dict[int, dict[HolderKey, int]] = {}
        self._holders: dict[HolderKey, Holder] = {}
        self.store: Path | None = None
        self.proof: Proof | None = None  # whose a process is (launches.Proof)
        self._unsaved = False  # the last write failed: try again at the next change
        self._retry_at = 0.0
        if store is not None:
            self.open(store, proof)

    # -- persistence of job holds (servers are restored from JupyterHub's own state) --------
    def open(self, store: str | os.PathLike[str], proof: Proof | None = None) -> None:
        """Use ``store`` for job holds: load what a previous hub process left there, and hold
        what live processes that prove a grant (``proof``) were given (once per path)."""
        path = Path(store).resolve()
        if self.store == path:
            return
        self.store, self.proof = path, proof
        damage = restore_json(path, self._restore)
        rebuilt = self._rebuild(proof) if proof is not None else []
        self.prune()
        if damage is not None:
            held = ", ".join(f"{o}: GPUs {self.held_by(o)}" for o in rebuilt) or "none"
            log.error(
                damage.sentence(
                    "the GPU ledger",
                    f"rebuilt the job holds from the processes that run (held: {held})",
                )
            )
        elif rebuilt:
            log.warning(
                "gpuhub: the GPU ledger %s did not list processes that still run on GPUs the "
                "hub gave them; holding them again: %s",
                path,
                ", ".join(f"{o}: GPUs {self.held_by(o)}" for o in rebuilt),
            )
        if damage is not None or rebuilt:
            self._save()

    def _restore(self, data: Any) -> list[str]:
        """Take the job holds in ``data``; return what was wrong (entries are skipped one by
        one: what can be read is kept)."""
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict | list):
            return [f"expected an object with a list of job holds, found {kind_of(data)}"]
        jobs = data["jobs"]
        entries = list(jobs.values()) if isinstance(jobs, dict) else list(jobs)
        problems = []
        for n, entry in enumerate(entries, 1):
            try:
                holder, devices = _job_hold_from(entry)
            except Damaged as exc:
                problems.append(f"job hold {n}: {exc}")
                continue
            self._claim_job(holder, devices)
        return problems

    def _rebuild(self, proof: Proof) -> list[HolderKey]:
        """Hold, for every live process that proves a grant of this hub and that no job hold
        lists, the devices it was given and can see (its server's job hold)."""
        known = {p.process for h in self._holders.values() for p in h.processes}
        rebuilt: list[HolderKey] = []
        try:
            found = launches.running(proof)
        except Exception as exc:  # psutil cannot look: nothing more to hold, say so
            log.error("gpuhub: cannot look for processes holding GPUs: %s", exc)
            return []
        for proc in found:
            if proc.process in known:
                continue
            grant = proc.launch
            given = set(grant.devices)
            devices = given if proc.visible is None else given & proc.visible
            if not devices:
                continue
            holder = Holder(
                grant.user,
                "job",
                grant.server,
                grant.gpu_type,
                since=proc.process[1],
                processes=[HeldProcess(*proc.process, proc.command, grant.launch, proc.job)],
                gpu_memory=grant.gpu_memory,
                device_memory=grant.device_memory,
            )
            self._claim_job(holder, sorted(devices))
            if holder.key not in rebuilt:
                rebuilt.append(holder.key)
        return rebuilt

    def _claim_job(self, holder: Holder, devices: Iterable[int]) -> None:
        """Add a job hold's processes and devices to what the book already has for it."""
        current = self._holders.get(holder.key)
        if current is not None and current.kind == "job":
            seen = {p.process for p in current.processes}
            current.processes += [p for p in holder.processes if p.process not in seen]
            current.since = min(current.since, holder.since)
            holder = current
        self.claim(holder.key, devices, holder)

    def _save(self) -> None:
        """Write the job holds (atomically). A failure is logged and tried again at the next
        change; it never reaches whoever asked the book something."""
        if self.store is None:
            return
        jobs = [
            {
                "user": holder.user,
                "name": holder.name,
                "gpu_type": holder.gpu_type,
                "since": holder.since,
                "devices": self.held_by(key),
                "processes": [
                    [p.pid, p.started, p.command, p.launch, p.job] for p in holder.processes
                ],
                **(
                    {"gpu_memory": holder.gpu_memory, "device_memory": holder.device_memory}
                    if holder.shared
                    else {}
                ),
            }
            for key, holder in self._holders.items()
            if holder.kind == "job"
        ]
        try:
            write_json(self.store, {"version": LEDGER_VERSION, "jobs": jobs})
        except OSError as exc:
            self._retry_at = time.monotonic() + SAVE_RETRY_SECONDS
            if not self._unsaved:
                log.error(
                    "gpuhub: cannot write the GPU ledger %s (%s); the job holds stay held in "
                    "the hub, which tries again at the next change",
                    self.store,
                    exc,
                )
            self._unsaved = True
        else:
            if self._unsaved:
                log.warning("gpuhub: the GPU ledger %s is written again", self.store)
            self._unsaved = False

    # -- reading ------------------------------------------------------------------------------
    def held_by(self, key: HolderKey) -> list[int]:
        whole = [d for d, o in self._holder_of.items() if o == key]
        return sorted(whole + [d for d, held in self._shares.items() if key in held])

    def memory_of(self, key: HolderKey) -> int:
        """Bytes of GPU memory ``key`` was given on shared devices (0: whole devices)."""
        return sum(held.get(key, 0) for held in self._shares.values())

    def holder(self, key: HolderKey) -> Holder | None:
        return self._holders.get(key)

    def free(self, candidates: Iterable[int]) -> list[int]:
        """Devices nobody holds, whole or in part."""
        self.prune()
        return [d for d in candidates if d not in self._holder_of and not self._shares.get(d)]

    def room(self, candidates: Iterable[int], device_memory: int) -> dict[int, int]:
        """Bytes of memory left to share on each candidate device of ``device_memory`` bytes
        (0 on a device handed out whole)."""
        self.prune()
        return {
            d: 0
            if d in self._holder_of
            else max(device_memory - sum(self._shares.get(d, {}).values()), 0)
            for d in candidates
        }

    def holdings(self, user: str | None = None) -> list[Holding]:
        """What each server and job hold now (the ledger's source in local mode)."""
        self.prune()
        by_key: dict[HolderKey, list[int]] = {}  # one pass, not one per key (4,000 GPUs)
        for device, key in self._holder_of.items():
            by_key.setdefault(key, []).append(device)
        memory_of: dict[HolderKey, int] = {}
        for device, held in self._shares.items():
            for key, memory in held.items():
                by_key.setdefault(key, []).append(device)
                memory_of[key] = memory_of.get(key, 0) + memory
        out = []
        for key, holder in self._holders.items():
            if user is not None and holder.user != user:
                continue
            devices = tuple(sorted(by_key.get(key, ())))
            share, memory = None, 0
            if holder.shared:
                memory = memory_of.get(key, 0)
                share = Fraction(memory, holder.device_memory)
            jobs: tuple[str, ...] = ()
            if devices:
                # A job hold is what a stopped server's processes (its jobs) still use, named
                # by that server and those jobs, as every page and notice names it.
                what = ""
                if holder.kind == "job":
                    jobs = tuple(dict.fromkeys(p.job for p in holder.processes if p.job))
                    others = dict.fromkeys(p.command for p in holder.processes if not p.job)
                    what = job_hold_name(holder.name, jobs, [c for c in others if c])
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
                        processes=tuple((p.pid, p.command) for p in holder.processes),
                        jobs=jobs,
                        share=share,
                        memory=memory,
                    )
                )
        return out

    # -- changing -----------------------------------------------------------------------------
    def allocate(
        self, key: HolderKey, count: int, candidates: Sequence[int], holder: Holder | None = None
    ) -> list[int]:
        """Take ``count`` free devices from ``candidates`` for ``key`` (lowest first); for a
        ``holder`` with a share (:attr:`Holder.shared`), its memory on one device."""
        self.release(key)  # a restarting server gives back what it had
        if holder is not None and holder.shared:
            return [self._share(key, candidates, holder)]
        free = self.free(candidates)
        if count > len(free):
            raise NotEnoughGPUs(count, len(free), len(candidates))
        chosen = sorted(free)[:count]
        for device in chosen:
            self._holder_of[device] = key
        if holder is not None:
            self._holders[key] = holder
        log.info("GPUs %s -> %s", chosen, key)
        return chosen

    def _share(self, key: HolderKey, candidates: Sequence[int], holder: Holder) -> int:
        """Give ``holder`` its memory on the candidate with the most memory left (each holder
        gets as much of a GPU's compute as can be had; the lowest index on a tie)."""
        room = self.room(candidates, holder.device_memory)
        fits = [d for d in candidates if room[d] >= holder.gpu_memory]
        if not fits:
            raise NotEnoughGPUs(1, 0, len(candidates))
        device = min(fits, key=lambda d: (-room[d], d))
        self._shares.setdefault(device, {})[key] = holder.gpu_memory
        self._holders[key] = holder
        log.info("GPU %s (%s bytes) -> %s", device, holder.gpu_memory, key)
        return device

    def claim(self, key: HolderKey, devices: Iterable[int], holder: Holder | None = None) -> None:
        """Record devices already in use (state restored after a restart)."""
        devices = list(devices)
        if holder is not None and holder.kind == "server" and holder.launch:
            self._take_back(holder, devices)
        if holder is not None and holder.shared:
            for device in devices:
                if device in self._holder_of:
                    log.warning(
                        "GPU %s is held whole by %s and shared by %s; keeping both",
                        device,
                        self._holder_of[device],
                        key,
                    )
                # The safe direction: a share comes back even if the device's memory is over
                # its size now (the holders are there; nothing new fits until some end).
                self._shares.setdefault(device, {})[key] = holder.gpu_memory
            self._holders[key] = holder
            return
        for device in devices:
            current = self._holder_of.get(device)
            if current not in (None, key):
                log.warning(
                    "GPU %s is claimed by both %s and %s; keeping %s",
                    device,
                    current,
                    key,
                    current,
                )
                continue
            self._holder_of[device] = key
        if holder is not None:
            self._holders[key] = holder

    def _take_back(self, server: Holder, devices: list[int]) -> None:
        """A running server's state came back after the book found its processes: those
        processes are the server's, not a job hold (the server hands them over when it
        stops, as ever)."""
        jobs = jobs_key(server.user, server.name)
        hold = self._holders.get(jobs)
        if hold is None or not any(p.launch == server.launch for p in hold.processes):
            return
        hold.processes = [p for p in hold.processes if p.launch != server.launch]
        for device in devices:
            if self._holder_of.get(device) == jobs:
                del self._holder_of[device]
            self._drop_share(device, jobs)
        if not hold.processes or not self.held_by(jobs):
            self.release(jobs)
        else:
            self._save()

    def _drop_share(self, device: int, key: HolderKey) -> None:
        held = self._shares.get(device)
        if held is not None and held.pop(key, None) is not None and not held:
            del self._shares[device]

    def release(self, key: HolderKey) -> list[int]:
        released = self.held_by(key)
        for device in released:
            if self._holder_of.get(device) == key:
                del self._holder_of[device]
            self._drop_share(device, key)
        holder = self._holders.pop(key, None)
        if released:
            log.info("GPUs %s released by %s", released, key)
        if holder is not None and holder.kind == "job":
            self._save()
        return released

    def hand_to_jobs(self, key: HolderKey) -> list[int]:
        """The server ``key`` is gone: its devices move to its job hold, pending until
        :meth:`settle` says which of them its surviving processes still use."""
        devices = self.held_by(key)
        server = self._holders.get(key)
        self.release(key)
        if not devices:
            return []
        jobs = jobs_key(key.user, key.name)
        previous = self._holders.get(jobs)
        holder = Holder(
            user=key.user,
            kind="job",
            name=key.name,
            gpu_type=server.gpu_type if server else "",
            processes=previous.processes if previous else [],
            pending=True,
            gpu_memory=server.gpu_memory if server else 0,
            device_memory=server.device_memory if server else 0,
        )
        self.claim(jobs, devices, holder)
        return devices

    def settle(
        self,
        jobs: HolderKey,
        devices: Iterable[int],
        survivors: Sequence[tuple[HeldProcess | Process, Iterable[int] | None]],
    ) -> list[int]:
        """Keep, of ``devices`` pending in ``jobs``, those ``survivors`` can use; free the rest.
        ``None`` as a survivor's devices means "could not tell": it keeps them all."""
        holder = self._holders.get(jobs)
        if holder is None:
            return []
        devices = set(devices) & set(self.held_by(jobs))
        kept: set[int] = set()
        for _, visible in survivors:
            kept |= devices if visible is None else devices & set(visible)
        for device in devices - kept:
            if self._holder_of.get(device) == jobs:
                del self._holder_of[device]
            self._drop_share(device, jobs)
        seen = {p.process for p in holder.processes}
        holder.processes = [
            *holder.processes,
            *(p for p in (_held(s) for s, _ in survivors) if p.process not in seen),
        ]
        holder.pending = False
        if not self.held_by(jobs):
            self._holders.pop(jobs, None)
        if devices - kept:
            log.info("GPUs %s released by %s", sorted(devices - kept), jobs)
        self._save()
        return sorted(kept)

    def prune(self) -> None:
        """Release job holds whose processes have all ended (and write a failed save again)."""
        ended = [
            key
            for key, holder in self._holders.items()
            if holder.kind == "job"
            and not holder.pending
            and not any(alive(p.process) for p in holder.processes)
        ]
        for key in ended:
            self.release(key)
        if self._unsaved and not ended and time.monotonic() >= self._retry_at:
            self._save()


def _job_hold_from(entry: Any) -> tuple[Holder, list[int]]:
    """A job hold of the ledger file, every field checked (raises :class:`Damaged`)."""
    if not isinstance(entry, dict):
        raise Damaged(f"expected an object, found {kind_of(entry)}")
    user, name, gpu_type = entry.get("user"), entry.get("name"), entry.get("gpu_type", "")
    if not isinstance(user, str) or not user or not isinstance(name, str):
        raise Damaged("user and name must be strings")
    if not isinstance(gpu_type, str):
        raise Damaged("gpu_type must be a string")
    since = entry.get("since", time.time())
    if not _number(since):
        raise Damaged("since must be a number")
    devices = entry.get("devices")
    if not isinstance(devices, list) or not all(_whole(d) and d >= 0 for d in devices):
        raise Damaged("devices must be a list of device indices")
    processes = entry.get("processes")
    if not isinstance(processes, list) or not processes:
        raise Damaged("processes must be a list of [pid, start time]")
    held = []
    for process in processes:
        if (
            not isinstance(process, list)
            or not 2 <= len(process) <= 5
            or not _whole(process[0])
            or not _number(process[1])
            or not all(isinstance(text, str) for text in process[2:])
        ):
            raise Damaged("processes must be a list of [pid, start time]")
        held.append(HeldProcess(process[0], float(process[1]), *process[2:]))
    memory, device_memory = entry.get("gpu_memory", 0), entry.get("device_memory", 0)
    if not (_whole(memory) and _whole(device_memory) and 0 <= memory <= device_memory):
        raise Damaged("gpu_memory and device_memory must be numbers of bytes")
    holder = Holder(
        user,
        "job",
        name,
        gpu_type,
        float(since),
        held,
        gpu_memory=memory,
        device_memory=device_memory,
    )
    return holder, list(devices)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# The one device book of this hub process.
ALLOCATOR = GPUAllocator()
