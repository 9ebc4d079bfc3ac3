"""Simulated GPUs' figures, from the processes that use them (demos and tests).

``LocalGPUSpawner.gpu_devices = "simulated:N"`` hands out indices of N GPUs that do not
exist; a simulated GPU's processes are those whose ``CUDA_VISIBLE_DEVICES`` lists its index,
among processes started under a server with simulated GPUs (``GPUHUB_SIMULATED_GPUS`` in
their environment). Its utilization is their CPU activity (100 % = one busy core) and its
memory their resident memory. The lab's NVML stand-in
(:mod:`gpuhub_lab.metrics.simulated`) and the hub's utilization source
(:class:`gpuhub.utilization.SimulatedUtilization`) both read them from here.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import psutil

from .devices import visible_devices

#: Set by LocalGPUSpawner: how many simulated GPUs the machine has (their indices 0..N-1).
ENV = "GPUHUB_SIMULATED_GPUS"


def visible_indices(value: str | None) -> frozenset[int]:
    """Indices a ``CUDA_VISIBLE_DEVICES`` value lists. Unset counts as none here: a process
    that never heard of gpuhub does not use a simulated GPU."""
    return frozenset(d for d in visible_devices(value) or () if isinstance(d, int))


@dataclass
class Usage:
    """One sample's figures per simulated GPU index."""

    utilization: dict[int, float] = field(default_factory=dict)
    processes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # (pid, rss)


class Tracker:
    """psutil processes by (pid, start time), with the devices each one sees.

    ``cpu_percent`` needs the same Process object between two calls, and a process's
    environment never changes after it started, so both are kept; only new processes have
    their environment read.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[int, float], tuple[psutil.Process, frozenset[int]]] = {}
        self._lock = threading.Lock()
        self._usage = Usage()

    def refresh(self) -> Usage:
        me = os.getpid()
        uid = os.getuid()
        seen: set[tuple[int, float]] = set()
        usage = Usage()
        with self._lock:
            for proc in psutil.process_iter(["pid", "uids", "create_time"]):
                info = proc.info
                uids = info.get("uids")
                if info["pid"] == me or uids is None or uids.real != uid:
                    continue  # others' environments are unreadable anyway
                key = (info["pid"], info["create_time"] or 0.0)
                seen.add(key)
                entry = self._known.get(key)
                if entry is None:
                    try:
                        environ = proc.environ()
                        devices = (
                            visible_indices(environ.get("CUDA_VISIBLE_DEVICES"))
                            if ENV in environ
                            else frozenset()
                        )
                        proc.cpu_percent(None)  # starts the measurement; first answer is 0
                    except (psutil.Error, OSError):
                        devices = frozenset()
                    entry = self._known[key] = (proc, devices)
                proc, devices = entry
                if not devices:
                    continue
                try:
                    cpu = proc.cpu_percent(None)
                    rss = proc.memory_info().rss
                except (psutil.Error, OSError):
                    continue
                for index in devices:
                    usage.utilization[index] = usage.utilization.get(index, 0.0) + cpu
                    usage.processes.setdefault(index, []).append((proc.pid, rss))
            for key in set(self._known) - seen:
                del self._known[key]
            self._usage = usage
        return usage

    @property
    def usage(self) -> Usage:
        return self._usage


#: One tracker per process: ``cpu_percent`` needs the same Process objects between samples.
TRACKER = Tracker()
