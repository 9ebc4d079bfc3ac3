"""``import pynvml`` inside the benchmark's Jupyter server: the NVML stand-in.

jupyterlab-nvdashboard imports ``pynvml`` itself (it has no setting for another module), so
the benchmark puts this folder first on the server's ``PYTHONPATH``. The module it hands out
*is* ``harness.fake_nvml`` (same scenario, same call counters as gpuhub's sampler), with
the few extra names nvdashboard reads when it is imported; those report "not supported",
as a GPU without NVLink does.
"""

from __future__ import annotations

import sys
from typing import Any

from harness import fake_nvml as _fake


class NVMLError_LibraryNotFound(_fake.NVMLError):
    def __init__(self, value: int = _fake.NVML_ERROR_LIBRARY_NOT_FOUND) -> None:
        super().__init__(value)


class NVMLError_NotSupported(_fake.NVMLError):
    def __init__(self, value: int = _fake.NVML_ERROR_NOT_SUPPORTED) -> None:
        super().__init__(value)


def _not_supported(*_args: Any) -> Any:
    raise NVMLError_NotSupported()


_EXTRA: dict[str, Any] = {
    "NVMLError_LibraryNotFound": NVMLError_LibraryNotFound,
    "NVMLError_NotSupported": NVMLError_NotSupported,
    "NVML_NVLINK_MAX_LINKS": 0,
    "NVML_PCIE_UTIL_TX_BYTES": 0,
    "NVML_PCIE_UTIL_RX_BYTES": 1,
    "nvmlDeviceGetNvLinkVersion": _not_supported,
    "nvmlDeviceGetMaxPcieLinkGeneration": _not_supported,
    "nvmlDeviceGetPcieThroughput": _not_supported,
    "nvmlDeviceGetFieldValues": _not_supported,
}
for _name, _value in _EXTRA.items():
    setattr(_fake, _name, _value)
sys.modules[__name__] = _fake
