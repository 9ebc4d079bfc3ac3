"""Which NVIDIA GPUs this machine has, from NVML (``nvidia-ml-py``).

Discovery runs once per process; with no driver or no library it answers "no GPUs" and
says why, so a CPU-only machine runs gpuhub without special configuration.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from functools import cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    uuid: str
    memory_total: int  # bytes


@dataclass(frozen=True)
class Discovery:
    devices: tuple[Device, ...]
    reason: str | None  # why there are none, for logs and the UI


@cache
def discover() -> Discovery:
    """Enumerate GPUs with NVML, once. Never raises."""
    try:
        import pynvml
    except ImportError:
        return Discovery((), "the nvidia-ml-py package is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Discovery((), f"NVML could not start ({exc}); is the NVIDIA driver installed?")
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            devices.append(
                Device(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else name,
                    uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                    memory_total=int(memory),
                )
            )
        return Discovery(tuple(devices), None if devices else "NVML reports no GPUs")
    except pynvml.NVMLError as exc:
        return Discovery((), f"NVML failed while listing GPUs ({exc})")
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
