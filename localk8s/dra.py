"""Dynamic Resource Allocation on the local cluster: the NVIDIA driver's DeviceClasses and a
simulated driver that publishes its ResourceSlices.

The real scheduler allocates claims from what is published here, and the controller-manager
releases them, exactly as on a cluster running NVIDIA's DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu): the same driver name ``gpu.nvidia.com``, the same
DeviceClasses, device names, attribute and capacity names and types, so a CEL selector that
works here works there. What no kubelet does here (NodePrepareResources, CDI) the process
node's agent does for its own devices (:mod:`localk8s.agent.pods`).

A node of the nodes file (:mod:`localk8s.nodes`) gets DRA devices from its ``dra`` entry::

    dra: {product: NVIDIA A100-SXM4-80GB, gpus: 4}                  # whole GPUs
    dra: {product: NVIDIA H100 80GB HBM3, gpus: 2, shares: memory}  # shareable by memory
    dra: {product: NVIDIA A100-SXM4-80GB, mig: [{1g.10gb: 7}, {3g.40gb: 1, 2g.20gb: 2}]}

- ``gpus``: whole GPUs, ``gpu-0`` .. ``gpu-<n-1>``, class ``gpu.nvidia.com``.
- ``mig``: GPUs in MIG mode after those, one mapping of profile to count per GPU. As the
  driver does with static MIG (its default), a MIG-mode GPU publishes only its MIG devices,
  ``gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>``, class
  ``mig.nvidia.com``, with the profile's capacities and one ``memorySlice<i>`` per slice.
- ``shares: memory``: the driver's consumable shares (``--consumable-shares=memory``, its
  main branch): every whole GPU allows multiple allocations and its ``memory`` capacity has a
  request policy (default the whole GPU, 1Mi steps), so claims asking
  ``capacity.requests.memory`` share one GPU until its memory is spent, and a claim asking
  for none takes all of it.

The process node's GPUs claimed through DRA are its own (agent flag ``--dra-gpus``),
numbered after the ones it advertises as ``nvidia.com/gpu``, and shareable by memory: a node
never offers one GPU both ways.

The classes leave out the chart's ``extendedResourceName: nvidia.com/gpu``: on this cluster
``nvidia.com/gpu`` stays the device plugin's, so a pod asking for it never lands on a DRA
node.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .kubeapi import KubeAPI

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
RESOURCE_API = "resource.k8s.io/v1"
MEBI = 2**20
# The driver's versions, as it publishes them (semver, from NVML).
DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"
SIMULATED_PRODUCT = "gpuhub-simulated-GPU"  # the process node's, as its node label says
SIMULATED_MEMORY = 16 * 2**30  # what gpuhub_lab's simulated GPUs have (metrics/simulated.py)


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile as NVML describes it (``nvidia-smi mig -lgip``)."""

    id: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    jpeg: int
    ofa: int
    slices: int  # memory slices it covers; its placements start at multiples of this


@dataclass(frozen=True)
class Product:
    memory: int  # bytes
    architecture: str
    compute_capability: str
    mig: dict[str, MigProfile]
    memory_slices: int = 8


_A100_80GB_MIG = {
    "1g.10gb": MigProfile(19, 9728, 14, 1, 0, 0, 0, 1),
    "2g.20gb": MigProfile(14, 19968, 28, 2, 1, 0, 0, 2),
    "3g.40gb": MigProfile(9, 40192, 42, 3, 2, 0, 0, 4),
    "4g.40gb": MigProfile(5, 40192, 56, 4, 2, 0, 0, 4),
    "7g.80gb": MigProfile(0, 81152, 98, 7, 5, 1, 1, 8),
}

PRODUCTS = {
    "NVIDIA A100-SXM4-80GB": Product(81920 * MEBI, "Ampere", "8.0.0", _A100_80GB_MIG),
    "NVIDIA H100 80GB HBM3": Product(81559 * MEBI, "Hopper", "9.0.0", {}),
    SIMULATED_PRODUCT: Product(SIMULATED_MEMORY, "Simulated", "8.0.0", {}),
}


# Kueue's quota names for DRA requests (its Configuration's resources.deviceClassMappings, in
# count mode): a request counts its device count, a memory share one device.
KUEUE_RESOURCES = {GPU_CLASS: "gpu.nvidia.com/gpu", MIG_CLASS: "mig.nvidia.com/mig"}


def kueue_device_class_mappings() -> list[dict[str, Any]]:
    """Kueue's ``resources.deviceClassMappings`` for the two classes."""
    return [{"name": name, "deviceClassNames": [cls]} for cls, name in KUEUE_RESOURCES.items()]


class DRASpecError(ValueError):
    """A node's ``dra`` entry is wrong; the message says what, what is expected and what was
    given."""


def device_classes() -> list[dict[str, Any]]:
    """``gpu.nvidia.com`` and ``mig.nvidia.com`` as the driver's chart defines them."""
    return [
        {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && "
                            f"device.attributes['{DRIVER}'].type == '{kind}'"
                        }
                    }
                ]
            },
        }
        for name, kind in ((GPU_CLASS, "gpu"), (MIG_CLASS, "mig"))
    ]


def check_spec(node: str, spec: Any) -> dict[str, Any]:
    """A node's ``dra`` entry, checked; raises :class:`DRASpecError`."""
    where = f"node {node}'s dra entry"
    if not isinstance(spec, dict):
        raise DRASpecError(f"{where} must be a mapping, not {spec!r}")
    unknown = set(spec) - {"product", "gpus", "mig", "shares"}
    if unknown:
        raise DRASpecError(
            f"{where} takes product, gpus, mig and shares; got {sorted(map(str, unknown))}"
        )
    product = spec.get("product")
    if product not in PRODUCTS:
        raise DRASpecError(f"{where}: product must be one of {sorted(PRODUCTS)}; got {product!r}")
    gpus = spec.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise DRASpecError(f"{where}: gpus must be a whole number of 0 or more; got {gpus!r}")
    if spec.get("shares") not in (None, "memory"):
        raise DRASpecError(f"{where}: shares must be 'memory' or absent; got {spec['shares']!r}")
    mig = spec.get("mig") or []
    if not isinstance(mig, list) or not all(isinstance(g, dict) for g in mig):
        raise DRASpecError(f"{where}: mig must be a list of profile: count mappings; got {mig!r}")
    profiles = PRODUCTS[product].mig
    for layout in mig:
        for name, count in layout.items():
            if name not in profiles:
                raise DRASpecError(
                    f"{where}: {product} has the MIG profiles {sorted(profiles) or 'none'}; "
                    f"got {name!r}"
                )
            if not isinstance(count, int) or count < 1:
                raise DRASpecError(f"{where}: MIG {name} count must be 1 or more; got {count!r}")
        _place(PRODUCTS[product], layout, where)
    if gpus + len(mig) == 0:
        raise DRASpecError(f"{where} names no GPUs: give gpus, mig or both")
    return spec


def _place(product: Product, layout: dict[str, int], where: str) -> list[tuple[str, int]]:
    """Each MIG device's (profile, placement start) on one GPU, largest first, as NVML places
    them; raises :class:`DRASpecError` when they do not fit the GPU's memory slices."""
    used = [False] * product.memory_slices
    placed = []
    wanted = sorted(
        ((name, product.mig[name]) for name, count in layout.items() for _ in range(count)),
        key=lambda item: -item[1].slices,
    )
    for name, profile in wanted:
        # A 1-slice profile cannot take the last slice (NVML offers placements 0-6 of 8).
        last = product.memory_slices - profile.slices - (1 if profile.slices == 1 else 0)
        for start in range(0, last + 1, profile.slices):
            if not any(used[start : start + profile.slices]):
                used[start : start + profile.slices] = [True] * profile.slices
                placed.append((name, start))
                break
        else:
            raise DRASpecError(
                f"{where}: the MIG devices {layout} do not fit one GPU's "
                f"{product.memory_slices} memory slices"
            )
    return sorted(placed, key=lambda item: item[1])


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _version(value: str) -> dict[str, str]:
    return {"version": value}


def _gpu_uuid(node: str, device: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuhub-localk8s/{node}/{device}"))


def _common_attributes(product_name: str, product: Product, minor: int) -> dict[str, Any]:
    return {
        "productName": _string(product_name),
        "brand": _string("Nvidia"),
        "architecture": _string(product.architecture),
        "cudaComputeCapability": _version(product.compute_capability),
        "driverVersion": _version(DRIVER_VERSION),
        "cudaDriverVersion": _version(CUDA_DRIVER_VERSION),
        "resource.kubernetes.io/pciBusID": _string(f"0000:{0x10 + minor:02x}:00.0"),
        "resource.kubernetes.io/pcieRoot": _string("pci0000:00"),
    }


def _quantity(count: int) -> dict[str, str]:
    return {"value": str(count)}


def devices(node: str, spec: dict[str, Any], first_minor: int = 0) -> list[dict[str, Any]]:
    """The devices the driver publishes for a node's ``dra`` entry (checked), whole GPUs
    numbered from ``first_minor``."""
    product_name = spec["product"]
    product = PRODUCTS[product_name]
    out = []
    minor = first_minor
    for _ in range(spec.get("gpus", 0)):
        name = f"gpu-{minor}"
        capacity: dict[str, Any] = {"memory": _quantity(product.memory)}
        device: dict[str, Any] = {
            "name": name,
            "attributes": {
                "type": _string("gpu"),
                "uuid": _string(f"GPU-{_gpu_uuid(node, name)}"),
                **_common_attributes(product_name, product, minor),
            },
            "capacity": capacity,
        }
        if spec.get("shares") == "memory":
            # The driver's consumable_shares.go, memory mode: default the whole GPU.
            device["allowMultipleAllocations"] = True
            capacity["memory"]["requestPolicy"] = {
                "default": str(product.memory),
                "validRange": {"min": "1Mi", "max": str(product.memory), "step": "1Mi"},
            }
        out.append(device)
        minor += 1
    for layout in spec.get("mig") or []:
        parent = f"GPU-{_gpu_uuid(node, f'gpu-{minor}')}"
        for profile_name, start in _place(product, layout, node):
            profile = product.mig[profile_name]
            name = f"gpu-{minor}-mig-{profile_name.replace('.', '')}-{profile.id}-{start}"
            capacity = {
                "multiprocessors": _quantity(profile.multiprocessors),
                "copyEngines": _quantity(profile.copy_engines),
                "decoders": _quantity(profile.decoders),
                "encoders": _quantity(0),
                "jpegEngines": _quantity(profile.jpeg),
                "ofaEngines": _quantity(profile.ofa),
                "memory": _quantity(profile.memory_mib * MEBI),
            }
            for i in range(start, start + profile.slices):
                capacity[f"memorySlice{i}"] = _quantity(1)
            out.append(
                {
                    "name": name,
                    "attributes": {
                        "type": _string("mig"),
                        "uuid": _string(f"MIG-{_gpu_uuid(node, name)}"),
                        "parentUUID": _string(parent),
                        "profile": _string(profile_name),
                        **_common_attributes(product_name, product, minor),
                    },
                    "capacity": capacity,
                }
            )
        minor += 1
    return out


def resource_slice(
    node: str, node_uid: str, device_list: list[dict[str, Any]], generation: int = 1
) -> dict[str, Any]:
    """The node's one ResourceSlice: pool named after the node, owned by the Node (so it goes
    with it), as the driver's kubelet plugin publishes it."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": device_list,
        },
    }


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def next_generation(current: dict[str, Any] | None, wanted: dict[str, Any]) -> int:
    """The pool generation for publishing ``wanted`` over ``current``: a changed pool gets a
    new generation (the scheduler ignores a pool whose slices disagree on it)."""
    if current is None:
        return 1
    generation = int(current["spec"]["pool"]["generation"])
    unchanged = (
        current["spec"].get("devices") == wanted["spec"]["devices"]
        and current["metadata"].get("ownerReferences", [{}])[0].get("uid")
        == wanted["metadata"]["ownerReferences"][0]["uid"]
    )
    return generation if unchanged else generation + 1


def publish(api: KubeAPI, node: str, node_uid: str, device_list: list[dict[str, Any]]) -> None:
    """Publish (or update) a node's ResourceSlice through the launcher's client."""
    wanted = resource_slice(node, node_uid, device_list)
    current = api.get(RESOURCE_API, "ResourceSlice", slice_name(node))
    wanted["spec"]["pool"]["generation"] = next_generation(current, wanted)
    api.apply(wanted)
