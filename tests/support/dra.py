"""Recorded DRA objects of the local cluster and the gpu types the DRA tests ask about.

The objects in tests/k8s/data/dra/ are the local cluster's, read back from its apiserver
after its real scheduler allocated a whole A100 (``p-whole``), a MIG 1g.10gb (``p-mig``) and
two memory shares of one H100, 20Gi and 30Gi (``p-share20``, ``p-share30``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuhub.core.dra import DRAType
from gpuhub.core.dra_devices import device_class_info
from gpuhub.hub.ledger.dra_capacity import DeviceState
from gpuhub.k8s.dra_inventory import claim_info, slice_info

DATA = Path(__file__).parents[1] / "k8s" / "data" / "dra"
GI, MI = 2**30, 2**20
H100_MEMORY = 81559 * MI  # what the driver publishes for an H100 80GB HBM3


def items(kind: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"{kind}.json").read_text())["items"]


def state() -> DeviceState:
    devices = DeviceState()
    devices.relisted("resourceslices", [slice_info(o) for o in items("resourceslices")])
    devices.relisted("deviceclasses", [device_class_info(o) for o in items("deviceclasses")])
    devices.relisted("resourceclaims", [claim_info(o) for o in items("resourceclaims")])
    return devices


def dra(device_class: str, *selectors: str) -> DRAType:
    found = DRAType.from_config(
        "t.dra", {"device_class": device_class, "selectors": list(selectors)}
    )
    assert found is not None
    return found


def everywhere(node: str) -> bool:
    return True


A100 = dra(
    "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
)
H100 = dra(
    "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
)
MIG_1G = dra("mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
