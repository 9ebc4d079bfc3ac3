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
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from gpuhub.core.env import SIMULATED_GPUS_ENV

# The processes behind each simulated GPU are counted in gpuhub, which the hub reads too.
from gpuhub.core.simulated import TRACKER, visible_indices

__all__ = ["NAME", "SIMULATED_GPUS_ENV", "count", "module_name", "visible_indices"]

NAME = "Simulated GPU"
MEMORY_TOTAL = 16 * 2**30  # bytes per simulated GPU

#: Counting the devices measures the processes' CPU over a window, and waits for one when a
#: process is new (:meth:`gpuhub.core.simulated.Tracker.refresh`): never on an event loop.
gpuhub_full_read_waits = True

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
        return max(0, int(os.environ.get(SIMULATED_GPUS_ENV, "0")))
    except ValueError:
        return 0


def module_name() -> str | None:
    """This module's import name when this server's GPUs are simulated, else None."""
    return __name__ if count() > 0 else None


_tracker = TRACKER
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
