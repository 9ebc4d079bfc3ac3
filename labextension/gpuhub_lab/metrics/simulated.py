"""Simulated GPUs behind the ``pynvml`` functions gpuhub reads, for demos and tests.

``LocalGPUSpawner.gpu_devices = "simulated:N"`` hands out indices of N GPUs that do not
exist and tells the server so with ``GPUHUB_SIMULATED_GPUS=N``; the sampler then imports
this module instead of ``pynvml`` (:func:`module_name`), and every figure comes from psutil:

* a simulated GPU's processes are the processes whose ``CUDA_VISIBLE_DEVICES`` lists its
  index (a kernel inherits its server's), among those started under a server with simulated
  GPUs (``GPUHUB_SIMULATED_GPUS`` in their environment: a stray ``CUDA_VISIBLE_DEVICES=0``
  elsewhere on the machine is not a simulated GPU's user), except the process reading (the
  Jupyter server itself does no GPU work);
* its utilization is their CPU activity (100 % = one busy core), capped at 100 %;
* its used memory is their resident memory (RSS), each process's as its "GPU memory".

So a busy cell makes the chart move on a laptop without a driver. Temperature, power and
MIG are "not supported", as on some real boards. Names say "Simulated" so nothing passes for
a real GPU.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import psutil

#: Set by LocalGPUSpawner: how many simulated GPUs the machine has (their indices 0..N-1).
ENV = "GPUHUB_SIMULATED_GPUS"
NAME = "Simulated GPU"
MEMORY_TOTAL = 16 * 2**30  # bytes per simulated GPU

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1


class NVMLError(Exception):
    """Same shape as pynvml's: ``value`` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            NVML_ERROR_UNINITIALIZED: "Uninitialized",
            NVML_ERROR_NOT_SUPPORTED: "Not Supported",
            NVML_ERROR_NOT_FOUND: "Not Found",
            NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        }.get(self.value, f"NVML error {self.value}")


def count() -> int:
    """Simulated GPUs on this machine, from ``$GPUHUB_SIMULATED_GPUS`` (0 when unset or bad)."""
    try:
        return max(0, int(os.environ.get(ENV, "0")))
    except ValueError:
        return 0


def module_name() -> str | None:
    """This module's import name when this server's GPUs are simulated, else None."""
    return __name__ if count() > 0 else None


def visible_indices(value: str | None) -> frozenset[int]:
    """Indices a ``CUDA_VISIBLE_DEVICES`` value lists. Unset counts as none here: a process
    that never heard of gpuhub does not use a simulated GPU."""
    if not value:
        return frozenset()
    return frozenset(int(v) for v in value.split(",") if v.strip().isdigit())


@dataclass
class _Usage:
    """One sample's figures per simulated GPU index."""

    utilization: dict[int, float] = field(default_factory=dict)
    processes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # (pid, rss)


class _Tracker:
    """psutil processes by (pid, start time), with the devices each one sees.

    ``cpu_percent`` needs the same Process object between two calls, and a process's
    environment never changes after it started, so both are kept; only new processes have
    their environment read.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[int, float], tuple[psutil.Process, frozenset[int]]] = {}
        self._lock = threading.Lock()
        self._usage = _Usage()

    def refresh(self) -> _Usage:
        me = os.getpid()
        uid = os.getuid()
        seen: set[tuple[int, float]] = set()
        usage = _Usage()
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
    def usage(self) -> _Usage:
        return self._usage


_tracker = _Tracker()
_initialized = 0


@dataclass(frozen=True)
class _Handle:
    index: int


def _check() -> None:
    if not _initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


# --- the pynvml functions ------------------------------------------------------------------
def nvmlInit() -> None:
    global _initialized
    if count() == 0:
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    _initialized += 1


def nvmlShutdown() -> None:
    global _initialized
    _initialized = max(0, _initialized - 1)


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return "simulated"


def nvmlDeviceGetCount() -> int:
    _check()
    # One refresh per sample: the sampler counts first, then reads each device.
    _tracker.refresh()
    return count()


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _check()
    if not 0 <= index < count():
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Handle(index)


def nvmlDeviceGetName(handle: _Handle) -> str:
    _check()
    return NAME


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    _check()
    return f"GPU-5130a7ed-0000-0000-0000-{handle.index:012d}"


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> SimpleNamespace:
    _check()
    busy = _tracker.usage.utilization.get(handle.index, 0.0)
    return SimpleNamespace(gpu=round(min(100.0, busy)), memory=0)


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> SimpleNamespace:
    _check()
    used = min(MEMORY_TOTAL, sum(rss for _, rss in _tracker.usage.processes.get(handle.index, [])))
    return SimpleNamespace(total=MEMORY_TOTAL, used=used, free=MEMORY_TOTAL - used)


def _unsupported(*_args: Any) -> Any:
    _check()
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


nvmlDeviceGetTemperature = _unsupported
nvmlDeviceGetPowerUsage = _unsupported
nvmlDeviceGetMigMode = _unsupported
nvmlDeviceGetGraphicsRunningProcesses = _unsupported


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[SimpleNamespace]:
    _check()
    return [
        SimpleNamespace(pid=pid, usedGpuMemory=rss)
        for pid, rss in _tracker.usage.processes.get(handle.index, [])
    ]
