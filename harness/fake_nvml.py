"""An NVML stand-in with the API surface of ``pynvml`` (nvidia-ml-py) that gpuhub uses.

Tests (and benchmarks, and the browser test's "GPU present" screenshot) control it: which
devices exist, their figures, MIG slices, the processes on each, and which calls fail. The
sampler never knows the difference: it imports an NVML module by name
(``GPUSampler.nvml_module``), and this module is one.

In-process: ``fake_nvml.install(Scenario(...))``. In another process (a Jupyter server
started by a test): write ``Scenario.to_json()`` to a file and set ``GPUHUB_FAKE_NVML`` to its
path; the module loads it on ``nvmlInit``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

# --- constants and errors, the pynvml names and values ------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Same shape as pynvml's: ``value`` is the NVML return code, ``str()`` its message."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


# --- the scenario a test sets up -----------------------------------------------------------
@dataclass
class FakeProcess:
    pid: int
    memory_used: int | None  # bytes; None = NVML does not know (as in some containers)


@dataclass
class FakeMig:
    uuid: str
    profile: str  # "1g.10gb"
    memory_total: int
    memory_used: int = 0
    processes: list[FakeProcess] = field(default_factory=list)


@dataclass
class FakeGPU:
    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = ""
    utilization: int = 0  # percent
    memory_total: int = 80 * 2**30
    memory_used: int = 0
    temperature: int = 35
    power_mw: int = 60_000
    processes: list[FakeProcess] = field(default_factory=list)
    mig: list[FakeMig] | None = None  # None: MIG off; a list: MIG on with these slices
    fail: dict[str, int] = field(default_factory=dict)  # NVML function name -> error code


@dataclass
class Scenario:
    gpus: list[FakeGPU] = field(default_factory=list)
    init_error: int | None = None  # e.g. NVML_ERROR_LIBRARY_NOT_FOUND
    driver_version: str = "550.54.15"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        data = json.loads(text)
        gpus = []
        for g in data.get("gpus", []):
            g["processes"] = [FakeProcess(**p) for p in g.get("processes", [])]
            if g.get("mig") is not None:
                g["mig"] = [
                    FakeMig(**{**m, "processes": [FakeProcess(**p) for p in m["processes"]]})
                    for m in g["mig"]
                ]
            gpus.append(FakeGPU(**g))
        return cls(
            gpus=gpus,
            init_error=data.get("init_error"),
            driver_version=data.get("driver_version", "550.54.15"),
        )


def a100s(count: int, **overrides: Any) -> Scenario:
    """``count`` identical A100s with distinct UUIDs: the usual bench/test machine."""
    return Scenario(
        gpus=[
            FakeGPU(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", **overrides)
            for i in range(count)
        ]
    )


# --- module state --------------------------------------------------------------------------
_lock = threading.Lock()
_scenario: Scenario | None = None
_initialized = 0
calls: dict[str, int] = {}  # NVML function name -> number of calls, for tests


def install(scenario: Scenario) -> None:
    """Make ``scenario`` what NVML reports from now on (in this process)."""
    global _scenario, _file_mtime
    with _lock:
        _scenario = scenario
        _file_mtime = None
        calls.clear()


_file_mtime: float | None = None


def scenario() -> Scenario:
    """The installed scenario, else the one in ``$GPUHUB_FAKE_NVML`` (re-read when it changes)."""
    global _scenario, _file_mtime
    path = os.environ.get("GPUHUB_FAKE_NVML")
    if path and (_scenario is None or _file_mtime is not None):
        mtime = os.stat(path).st_mtime
        if mtime != _file_mtime:
            with open(path, encoding="utf-8") as f:
                _scenario = Scenario.from_json(f.read())
            _file_mtime = mtime
    if _scenario is None:
        _scenario = Scenario()
    return _scenario


def _count(name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


def _check(name: str, gpu: FakeGPU | None = None) -> None:
    _count(name)
    if not _initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if gpu is not None and name in gpu.fail:
        raise NVMLError(gpu.fail[name])
    if gpu is not None and "*" in gpu.fail:
        raise NVMLError(gpu.fail["*"])


@dataclass(frozen=True)
class _Handle:
    gpu: FakeGPU
    mig: FakeMig | None = None


# --- the pynvml functions ------------------------------------------------------------------
def nvmlInit() -> None:
    global _initialized
    _count("nvmlInit")
    s = scenario()
    if s.init_error is not None:
        raise NVMLError(s.init_error)
    _initialized += 1


def nvmlShutdown() -> None:
    global _initialized
    _count("nvmlShutdown")
    _initialized = max(0, _initialized - 1)


def nvmlSystemGetDriverVersion() -> str:
    _check("nvmlSystemGetDriverVersion")
    return scenario().driver_version


def nvmlDeviceGetCount() -> int:
    _check("nvmlDeviceGetCount")
    return len(scenario().gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _check("nvmlDeviceGetHandleByIndex")
    gpus = scenario().gpus
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    gpu = gpus[index]
    if "nvmlDeviceGetHandleByIndex" in gpu.fail:
        raise NVMLError(gpu.fail["nvmlDeviceGetHandleByIndex"])
    return _Handle(gpu)


def nvmlDeviceGetName(handle: _Handle) -> str:
    _check("nvmlDeviceGetName", handle.gpu)
    if handle.mig is not None:
        return f"{handle.gpu.name} MIG {handle.mig.profile}"
    return handle.gpu.name


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    _check("nvmlDeviceGetUUID", handle.gpu)
    return handle.mig.uuid if handle.mig is not None else handle.gpu.uuid


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> SimpleNamespace:
    _check("nvmlDeviceGetUtilizationRates", handle.gpu)
    if handle.mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # as on real MIG devices
    return SimpleNamespace(gpu=handle.gpu.utilization, memory=0)


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> SimpleNamespace:
    _check("nvmlDeviceGetMemoryInfo", handle.gpu)
    src = handle.mig if handle.mig is not None else handle.gpu
    return SimpleNamespace(
        total=src.memory_total, used=src.memory_used, free=src.memory_total - src.memory_used
    )


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    _check("nvmlDeviceGetTemperature", handle.gpu)
    if handle.mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return handle.gpu.temperature


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    _check("nvmlDeviceGetPowerUsage", handle.gpu)
    if handle.mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return handle.gpu.power_mw


def nvmlDeviceGetMigMode(handle: _Handle) -> list[int]:
    _check("nvmlDeviceGetMigMode", handle.gpu)
    mode = NVML_DEVICE_MIG_DISABLE if handle.gpu.mig is None else NVML_DEVICE_MIG_ENABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(handle: _Handle) -> int:
    _check("nvmlDeviceGetMaxMigDeviceCount", handle.gpu)
    return 7 if handle.gpu.mig is not None else 0


def nvmlDeviceGetMigDeviceHandleByIndex(handle: _Handle, index: int) -> _Handle:
    _check("nvmlDeviceGetMigDeviceHandleByIndex", handle.gpu)
    migs = handle.gpu.mig or []
    if not 0 <= index < len(migs):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Handle(handle.gpu, migs[index])


def _processes(name: str, handle: _Handle) -> list[SimpleNamespace]:
    _check(name, handle.gpu)
    src = handle.mig if handle.mig is not None else handle.gpu
    return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.memory_used) for p in src.processes]


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[SimpleNamespace]:
    return _processes("nvmlDeviceGetComputeRunningProcesses", handle)


def nvmlDeviceGetGraphicsRunningProcesses(handle: _Handle) -> list[SimpleNamespace]:
    _check("nvmlDeviceGetGraphicsRunningProcesses", handle.gpu)
    return []
