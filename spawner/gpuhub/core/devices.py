"""Which NVIDIA GPUs this machine has, from NVML (``nvidia-ml-py``), and which of them a
process may use (``CUDA_VISIBLE_DEVICES``, read as CUDA reads it: :func:`visible_devices`).

Discovery runs once per process; with no driver or no library it answers "no GPUs" and
says why, so a CPU-only machine runs gpuhub without special configuration.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from functools import cache

log = logging.getLogger(__name__)

#: A device named in ``CUDA_VISIBLE_DEVICES``: an index, or a ``GPU-``/``MIG-`` UUID (or
#: a unique prefix of one, as CUDA allows).
VisibleDevice = int | str
UUID_PREFIXES = ("GPU-", "MIG-")


def _leading_index(entry: str) -> int:
    """The number an entry starts with, as C's ``strtoul`` reads it (``"1gpu"`` is 1), or
    -1 when it does not start with one."""
    unsigned = entry.removeprefix("+")
    digits = len(unsigned) - len(unsigned.lstrip("0123456789"))
    return int(unsigned[:digits]) if digits else -1


def visible_devices(value: str | None) -> tuple[VisibleDevice, ...] | None:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lets a process use, in CUDA's order.

    The one reading of the variable in gpuhub, with CUDA's rules (PyTorch's
    ``torch.cuda._parse_visible_devices`` reads it the same way):

    * unset: ``None``, every device;
    * empty: no device;
    * entries are device indices or ``GPU-``/``MIG-`` UUIDs, comma-separated, spaces
      around them ignored; an index is read like ``strtoul`` (``"1gpu"`` is 1);
    * the first invalid entry ends the list: a negative index (``-1``), a word such as
      ``NoDevFiles`` (what some batch schedulers set for jobs without GPUs) or an empty
      entry; ``"0,2,-1,1"`` is devices 0 and 2;
    * a device named twice makes the whole list empty.
    """
    if value is None:
        return None
    devices: list[VisibleDevice] = []
    for raw in value.split(","):
        entry = raw.strip()
        device: VisibleDevice
        if entry.startswith(UUID_PREFIXES):
            device = entry
        else:
            device = _leading_index(entry)
            if device < 0:
                break
        if device in devices:
            return ()
        devices.append(device)
    return tuple(devices)


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
