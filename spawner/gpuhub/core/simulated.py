"""Simulated GPUs' figures, from the processes that use them (demos and tests).

``LocalGPUSpawner.gpu_devices = "simulated:N"`` hands out indices of N GPUs that do not
exist; a simulated GPU's processes are those whose ``CUDA_VISIBLE_DEVICES`` lists its index,
among processes started under a server with simulated GPUs (``GPUHUB_SIMULATED_GPUS`` in
their environment), less Jupyter's own machinery (the server and a job's runner, marked with
``GPUHUB_SIMULATED_MACHINERY``), which on a real GPU creates no CUDA context. Its utilization
is their CPU activity over the last second (100 % = one busy core), as NVML reports a real
GPU's over its last sample period, and its memory their resident memory.

Whose a process is, is not decided here: the tracker keeps what the hub needs to check it
(the launch grant a process carries and the OS account it runs as, :attr:`Usage.grants`),
and the hub believes only what that proves (:class:`gpuhub.hub.ledger.launches.Proof`),
never what a process says of itself (``JUPYTERHUB_USER``).

The one rule for every screen: the lab's NVML stand-in (:mod:`gpuhub_lab.metrics.simulated`,
the sidebar and ``%gpu``, in a server or in a job) and the hub's utilization source
(:class:`gpuhub.hub.monitor.utilization.SimulatedUtilization`, the fleet page and reclaim) both read
them from here, so they show the same figures for the same GPU.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import psutil

from gpuhub.core.devices import visible_devices
from gpuhub.core.env import LAUNCH_ENV, MACHINERY_ENV, SIMULATED_GPUS_ENV

#: Seconds of CPU activity one utilization figure covers (NVML: 1/6 s to 1 s).
WINDOW = 1.0
Grant = tuple[str, int]  # the GPUHUB_LAUNCH a process carries, and its real uid
Known = tuple[psutil.Process, frozenset[int], Grant | None]

__all__ = [
    "SIMULATED_GPUS_ENV",
    "TRACKER",
    "WINDOW",
    "Tracker",
    "Usage",
    "uses_simulated_gpus",
    "visible_indices",
]


def uses_simulated_gpus(environ: dict[str, str]) -> frozenset[int]:
    """The simulated GPUs a process with this (initial) environment uses: none unless it was
    started under a server with simulated GPUs, and none for Jupyter's machinery itself."""
    if SIMULATED_GPUS_ENV not in environ or environ.get(MACHINERY_ENV) == "1":
        return frozenset()
    return visible_indices(environ.get("CUDA_VISIBLE_DEVICES"))


def visible_indices(value: str | None) -> frozenset[int]:
    """Indices a ``CUDA_VISIBLE_DEVICES`` value lists. Unset counts as none here: a process
    that never heard of gpuhub does not use a simulated GPU."""
    return frozenset(d for d in visible_devices(value) or () if isinstance(d, int))


@dataclass
class Usage:
    """One sample's figures per simulated GPU index."""

    utilization: dict[int, float] = field(default_factory=dict)
    processes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # (pid, rss)
    # pid -> the launch grant it carries and its real uid, for the hub to check (not proof
    # by itself: gpuhub.hub.ledger.launches.Proof).
    grants: dict[int, Grant] = field(default_factory=dict)
    # pid -> its real uid: whose account a process without a grant runs as.
    accounts: dict[int, int] = field(default_factory=dict)


class Tracker:
    """psutil processes by (pid, start time), with the devices each one sees.

    ``cpu_percent`` needs the same Process object between two calls, and a process's
    environment never changes after it started, so both are kept; only new processes have
    their environment read. It looks at its own OS account's processes, or every process
    when it runs as root (the hub on a workstation whose servers run as their users).
    """

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        # The process reading is left out (a Jupyter server, the hub), unless it is a GPU user
        # itself: a kernel reading for ``%gpu`` sets this.
        self.count_self = False
        # (pid, start time) -> the process, the devices it sees, the grant it carries
        self._known: dict[tuple[int, float], Known] = {}
        self._lock = threading.Lock()
        self._usage = Usage()
        self._measured = 0.0  # monotonic time of the last measurement

    def refresh(self) -> Usage:
        """Measure now. Utilization covers the last ``window`` seconds however long ago the
        previous call was (the hub asks every 30 s, the lab every second), so both read the
        same figure for the same moment: when the last measurement is older, or a process
        is new, this one starts a new one and waits ``window`` seconds (callers run it in a
        thread); when it is less than half a window old, its figures are the answer, as
        NVML's are between its samples."""
        with self._lock:
            age = time.monotonic() - self._measured
            if age < self.window / 2:
                return self._usage
            users, new = self._users()
            if new or age > 2 * self.window:
                for proc, _, _ in users:
                    try:
                        proc.cpu_percent(None)
                    except (psutil.Error, OSError):
                        continue
                time.sleep(self.window)
                users, _ = self._users()
            usage = Usage()
            for proc, devices, grant in users:
                try:
                    cpu = proc.cpu_percent(None)
                    rss = proc.memory_info().rss
                    usage.accounts[proc.pid] = proc.uids().real
                except (psutil.Error, OSError):
                    continue
                if grant is not None:
                    usage.grants[proc.pid] = grant
                for index in devices:
                    usage.utilization[index] = usage.utilization.get(index, 0.0) + cpu
                    usage.processes.setdefault(index, []).append((proc.pid, rss))
            self._measured = time.monotonic()
            self._usage = usage
        return usage

    def expire(self) -> None:
        """Forget the last measurement: the next :meth:`refresh` measures a new window."""
        with self._lock:
            self._measured = 0.0

    def _users(self) -> tuple[list[Known], bool]:
        """The processes that use simulated GPUs, with theirs; and whether one of them is
        new (its CPU measurement starts now)."""
        me = -1 if self.count_self else os.getpid()
        uid = os.getuid()
        everyone = os.geteuid() == 0  # others' environments are unreadable otherwise
        seen: set[tuple[int, float]] = set()
        found = []
        new = False
        for proc in psutil.process_iter(["pid", "uids", "create_time"]):
            info = proc.info
            uids = info.get("uids")
            if info["pid"] == me or uids is None or (uids.real != uid and not everyone):
                continue
            key = (info["pid"], info["create_time"] or 0.0)
            seen.add(key)
            entry = self._known.get(key)
            if entry is None:
                grant: Grant | None = None
                try:
                    environ = proc.environ()
                    devices = uses_simulated_gpus(environ)
                    if devices and environ.get(LAUNCH_ENV):
                        grant = (environ[LAUNCH_ENV], uids.real)
                    proc.cpu_percent(None)  # starts the measurement; first answer is 0
                except (psutil.Error, OSError):
                    devices = frozenset()
                entry = self._known[key] = (proc, devices, grant)
                new = new or bool(devices)
            if entry[1]:
                found.append(entry)
        for key in set(self._known) - seen:
            del self._known[key]
        return found, new

    @property
    def usage(self) -> Usage:
        return self._usage


#: One tracker per process: ``cpu_percent`` needs the same Process objects between samples.
TRACKER = Tracker()
