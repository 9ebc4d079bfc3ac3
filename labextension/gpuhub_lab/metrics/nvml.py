"""Read this server's GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``).

One :meth:`NVMLSource.read` returns a list of GPU dicts in the shape of the metrics API
(``index, uuid, name, utilization, memory_used, memory_total, temperature, power, mig,
processes``, plus ``error`` when that one device failed). It never raises: a missing library
or driver becomes a *reason*, a failing device becomes an entry with ``error`` set, so one
lost GPU does not hide the others.

A binding may lack functions: an older nvidia-ml-py (MIG came with 11.0), or a stand-in
written for another tool (jupyterlab-nvdashboard's needs little more than utilization and
memory). Only counting the GPUs and their memory is required; any other figure the binding
cannot give is null, as one the GPU does not support.

Only the GPUs this server may use are reported: NVML sees every GPU on the machine, but a
server started with ``CUDA_VISIBLE_DEVICES`` (LocalGPUSpawner, Kubernetes CPU-only pods)
only owns those.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from gpuhub.core.devices import visible_devices

#: How long to wait before trying ``nvmlInit`` again after it failed (driver not loaded...).
INIT_RETRY_SECONDS = 60.0

#: What a binding must have to read anything at all.
REQUIRED = (
    "nvmlInit",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetMemoryInfo",
)


class Visibility:
    """Which devices ``CUDA_VISIBLE_DEVICES`` lets this process use.

    The value is read as CUDA reads it (:func:`gpuhub.core.devices.visible_devices`): indices
    (``0,2``), GPU UUIDs (``GPU-8f...``, unique prefixes allowed, as CUDA does) or MIG UUIDs
    (``MIG-...``). Unset means "all"; empty (or ``-1``, ``NoDevFiles``) means "none".
    """

    def __init__(self, value: str | None) -> None:
        devices = visible_devices(value)
        self.all = devices is None
        self.items = [str(d) for d in devices or ()]

    @property
    def none(self) -> bool:
        return not self.all and not self.items

    def allows(self, index: int, uuid: str) -> bool:
        if self.all:
            return True
        return any(item == str(index) or (item.startswith("GPU-") and uuid.startswith(item))
                   for item in self.items)  # fmt: skip

    def allows_mig(self, parent_index: int, parent_uuid: str, mig_uuid: str) -> bool:
        if self.all or self.allows(parent_index, parent_uuid):
            return True
        return any(item.startswith("MIG-") and mig_uuid.startswith(item) for item in self.items)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NVMLSource:
    """GPU figures from an NVML binding: ``pynvml`` or a stand-in with the same functions."""

    kind = "nvml"

    def __init__(self, module: str | ModuleType = "pynvml", visible: str | None = None) -> None:
        self._module_spec = module
        self.nvml: Any = None
        self.visibility = Visibility(visible)
        self.reason: str | None = None
        self._next_try = 0.0
        # What the binding raises: pynvml's NVMLError, or anything from a binding without it.
        self._errors: type[Exception] = Exception
        # uuid -> (its handle, its parent GPU's handle for a MIG slice), from the last read()
        self._handles: dict[str, tuple[Any, Any]] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def _start(self) -> bool:
        """Import the binding and ``nvmlInit``; on failure remember why, retry later."""
        if self.nvml is not None:
            return True
        now = time.monotonic()
        if now < self._next_try:
            return False
        self._next_try = now + INIT_RETRY_SECONDS
        try:
            spec = self._module_spec
            nvml = importlib.import_module(spec) if isinstance(spec, str) else spec
        except ImportError:
            self.reason = "The nvidia-ml-py package is not installed on this server."
            return False
        missing = [name for name in REQUIRED if not callable(getattr(nvml, name, None))]
        if missing:
            self.reason = (
                f"The NVML binding {getattr(nvml, '__name__', nvml)!r} cannot read GPUs: it "
                f"has no {', '.join(missing)}."
            )
            return False
        errors = getattr(nvml, "NVMLError", Exception)
        try:
            nvml.nvmlInit()
        except errors as exc:
            code = getattr(exc, "value", None)
            if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1):
                self.reason = "No NVIDIA driver on this server (libnvidia-ml.so not found)."
            elif code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
                self.reason = "The NVIDIA driver is installed but not loaded on this machine."
            else:
                self.reason = f"NVML could not start: {exc}."
            return False
        self.nvml, self._errors = nvml, errors
        self.reason = None
        return True

    def _fn(self, name: str) -> Any:
        """The binding's function ``name``, or None where it has none."""
        return getattr(self.nvml, name, None)

    def close(self) -> None:
        if self.nvml is not None:
            shutdown = self._fn("nvmlShutdown")
            if shutdown is not None:
                with contextlib.suppress(self._errors):
                    shutdown()
            self.nvml = None

    # -- reading -----------------------------------------------------------------------
    def read(self) -> tuple[list[dict[str, Any]], str | None]:
        """All visible GPUs now, and why there are none when the list is empty."""
        if self.visibility.none:
            return [], "This server was started without a GPU."
        if not self._start():
            return [], self.reason
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except self._errors as exc:
            return [], f"NVML could not count the GPUs: {exc}."
        gpus: list[dict[str, Any]] = []
        self._handles = {}
        for index in range(count):
            gpus.extend(self._read_device(index))
        if not gpus:
            if count == 0:
                return [], "The NVIDIA driver is loaded but reports no GPU on this machine."
            return [], "None of this machine's GPUs is assigned to this server."
        return gpus, None

    def _read_device(self, index: int) -> list[dict[str, Any]]:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = self._uuid(handle, index)
        except self._errors as exc:
            if not self.visibility.all and str(index) not in self.visibility.items:
                return []  # cannot tell whether it is ours: do not show a stranger's error
            return [_failed(index, f"GPU-unknown-{index}", f"GPU {index}", exc)]
        try:
            mig_devices = self._mig_devices(handle)
            if mig_devices is not None:
                return self._read_migs(index, uuid, handle, mig_devices)
            if not self.visibility.allows(index, uuid):
                return []
            name = self._name(handle, index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            self._handles[uuid] = (handle, None)
            return [
                {
                    "index": index,
                    "uuid": uuid,
                    "name": name,
                    "utilization": self._optional("nvmlDeviceGetUtilizationRates", handle, "gpu"),
                    "memory_used": int(memory.used),
                    "memory_total": int(memory.total),
                    "temperature": self._temperature(handle),
                    "power": _watts(self._optional("nvmlDeviceGetPowerUsage", handle)),
                    "mig": False,
                    "processes": self._processes(handle),
                    "error": None,
                }
            ]
        except self._errors as exc:
            if not self.visibility.allows(index, uuid):
                return []
            try:
                name = self._name(handle, index)
            except self._errors:
                name = f"GPU {index}"
            return [_failed(index, uuid, name, exc)]

    def _uuid(self, handle: Any, index: int) -> str:
        """The GPU's UUID; a binding without UUIDs gets one made of its index (a chart's key)."""
        get = self._fn("nvmlDeviceGetUUID")
        return _text(get(handle)) if get is not None else f"GPU-{index}"

    def _name(self, handle: Any, index: int) -> str:
        get = self._fn("nvmlDeviceGetName")
        return _text(get(handle)) if get is not None else f"GPU {index}"

    def _temperature(self, handle: Any) -> Any:
        # NVML_TEMPERATURE_GPU is 0 in every NVML; a binding may not name it.
        sensor = getattr(self.nvml, "NVML_TEMPERATURE_GPU", 0)
        return self._optional("nvmlDeviceGetTemperature", handle, None, sensor)

    def _mig_devices(self, handle: Any) -> list[Any] | None:
        """The MIG slices of a GPU in MIG mode, else None."""
        nvml = self.nvml
        mig_mode = self._fn("nvmlDeviceGetMigMode")
        if mig_mode is None:
            return None  # a binding from before MIG
        try:
            current, _pending = mig_mode(handle)
        except self._errors as exc:
            if _is(nvml, exc, "NVML_ERROR_NOT_SUPPORTED"):
                return None  # not a MIG-capable GPU
            raise
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return None
        handles = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
            except self._errors as exc:
                if _is(nvml, exc, "NVML_ERROR_NOT_FOUND"):
                    continue  # an empty slot
                raise
        return handles

    def _read_migs(
        self, index: int, parent_uuid: str, parent: Any, migs: Sequence[Any]
    ) -> list[dict[str, Any]]:
        """One entry per MIG slice; temperature and power are the parent GPU's."""
        nvml = self.nvml
        temperature = self._temperature(parent)
        power = _watts(self._optional("nvmlDeviceGetPowerUsage", parent))
        entries = []
        for slot, mig in enumerate(migs):
            uuid = _text(nvml.nvmlDeviceGetUUID(mig))
            if not self.visibility.allows_mig(index, parent_uuid, uuid):
                continue
            memory = nvml.nvmlDeviceGetMemoryInfo(mig)
            self._handles[uuid] = (mig, parent)
            entries.append(
                {
                    "index": index,
                    "uuid": uuid,
                    "name": _text(nvml.nvmlDeviceGetName(mig)),
                    # NVML has no utilization counter for a MIG slice (DCGM profiling does).
                    "utilization": self._optional("nvmlDeviceGetUtilizationRates", mig, "gpu"),
                    "memory_used": int(memory.used),
                    "memory_total": int(memory.total),
                    "temperature": temperature,
                    "power": power,
                    "mig": True,
                    "mig_slot": slot,
                    "parent_uuid": parent_uuid,
                    "processes": self._processes(mig),
                    "error": None,
                }
            )
        return entries

    def read_figures(self, previous: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """``previous`` (what :meth:`read` returned) with utilization and memory read again:
        two NVML calls per device. The rest (names, processes, temperature, power, the list
        of devices) is kept: a sampler re-reads it with :meth:`read` once a second. None when
        a device is not as it was, or failed: then :meth:`read` everything."""
        nvml = self.nvml
        if nvml is None:
            return None
        memory_of = nvml.nvmlDeviceGetMemoryInfo
        handles = self._handles
        gpus: list[dict[str, Any]] = []
        try:
            for gpu in previous:
                found = None if gpu.get("error") else handles.get(gpu["uuid"])
                if found is None:
                    return None
                handle = found[0]
                memory = memory_of(handle)
                fresh = gpu.copy()
                fresh["utilization"] = self._optional(
                    "nvmlDeviceGetUtilizationRates", handle, "gpu"
                )
                fresh["memory_used"] = int(memory.used)
                fresh["memory_total"] = int(memory.total)
                gpus.append(fresh)
        except self._errors:
            return None
        return gpus

    def loop_safe(self, full: bool) -> bool:
        """Whether a read (everything, or the figures only) may run on an event loop: once
        NVML has started (its calls then take tens of microseconds; starting it can take
        seconds); the sampler still times them. A binding that declares
        ``gpuhub_full_read_waits`` (the simulated GPUs, which may wait a measuring window when
        a process appears) has its full reads kept off the loop."""
        if self.nvml is None:
            return False
        return not (full and getattr(self.nvml, "gpuhub_full_read_waits", False))

    def _optional(self, name: str, handle: Any, attr: str | None = None, *args: Any) -> Any:
        """A figure this GPU (or the binding) may not support: None then; other NVML errors
        propagate."""
        fn = getattr(self.nvml, name, None)
        if fn is None:
            return None
        try:
            value = fn(handle, *args)
        except self._errors as exc:
            if _is(self.nvml, exc, "NVML_ERROR_NOT_SUPPORTED"):
                return None
            raise
        return getattr(value, attr) if attr else value

    def _processes(self, handle: Any) -> list[dict[str, Any]]:
        by_pid: dict[int, int | None] = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses",
                     "nvmlDeviceGetGraphicsRunningProcesses"):  # fmt: skip
            fn = self._fn(name)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except self._errors as exc:
                if _is(self.nvml, exc, "NVML_ERROR_NOT_SUPPORTED"):
                    continue
                raise
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                used = None if used is None else int(used)
                # A process with both a compute and a graphics context is listed twice.
                previous = by_pid.get(p.pid)
                by_pid[p.pid] = used if previous is None else max(previous, used or 0)
        return [
            {"pid": pid, "memory_used": used, "kernel_id": None, "path": None}
            for pid, used in sorted(by_pid.items())
        ]


def _is(nvml: Any, exc: BaseException, name: str) -> bool:
    return getattr(exc, "value", None) == getattr(nvml, name, object())


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000.0, 1)


def _failed(index: int, uuid: str, name: str, exc: Exception) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": uuid,
        "name": name,
        "utilization": None,
        "memory_used": None,
        "memory_total": None,
        "temperature": None,
        "power": None,
        "mig": False,
        "processes": [],
        "error": f"NVML cannot read this GPU: {exc}.",
    }
