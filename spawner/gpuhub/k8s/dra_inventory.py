"""What the ``resource.k8s.io/v1`` objects say about GPUs: the devices a ResourceSlice
publishes (:func:`slice_info`), which devices a ResourceClaim was allocated and for which pods
(:func:`claim_info`), and a DeviceClass's selectors (:func:`gpuhub.core.dra_devices.device_class_info`).

Pure functions of the API's JSON, one typed decode per kind, for the hub's capacity watch
(:mod:`gpuhub.hub.ledger.dra_capacity`). Each keeps only what the figures read, so that an
event whose object changed elsewhere (a claim's driver status, a slice's managed fields)
compares equal to what is kept and costs nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuhub.core.dra_devices import Device, device_from_slice, quantity_of

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"


@dataclass(frozen=True)
class SliceInfo:
    """One ResourceSlice: its pool (and the pool's generation: the scheduler uses only a
    pool's newest) and its devices."""

    name: str
    driver: str
    pool: str
    generation: int
    node: str  # "" for devices reachable from several nodes (nodeSelector, allNodes)
    devices: tuple[Device, ...]


@dataclass(frozen=True)
class Allocated:
    """One device of a claim's allocation: whole (``memory`` None), or a share of a device
    that allows multiple allocations, consuming ``memory`` bytes of it."""

    driver: str
    pool: str
    device: str
    memory: int | None = None
    share: bool = False  # a consumable-capacity share (the result has a shareID)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True)
class ClaimInfo:
    """A ResourceClaim as the figures read it: the devices it was allocated (none while it
    waits) and the pods it is for (those it is reserved for, and the pod that owns a claim
    made from its template)."""

    namespace: str
    name: str
    devices: tuple[Allocated, ...]
    pods: tuple[str, ...]  # pod names, in the claim's namespace

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def slice_info(obj: Mapping[str, Any]) -> SliceInfo:
    """A ResourceSlice (API JSON). A slice of shared counters (partitionable devices) has no
    devices; its devices' ``consumesCounters`` are not read (static MIG devices, which the
    NVIDIA driver publishes by default, are plain devices)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    driver = str(spec.get("driver") or "")
    pool = spec.get("pool") or {}
    pool_name = str(pool.get("name") or "")
    node = str(spec.get("nodeName") or "")
    devices = []
    for entry in spec.get("devices") or ():
        if isinstance(entry, Mapping):
            device = device_from_slice(driver, pool_name, node, entry)
            if device is not None:
                devices.append(device)
    try:
        generation = int(pool.get("generation") or 0)
    except (TypeError, ValueError):
        generation = 0
    return SliceInfo(
        name=str(meta.get("name") or ""),
        driver=driver,
        pool=pool_name,
        generation=generation,
        node=node,
        devices=tuple(devices),
    )


def claim_info(obj: Mapping[str, Any]) -> ClaimInfo:
    """A ResourceClaim (API JSON): its allocation's results (with each share's consumed
    ``memory``: every capacity a result consumed is a share's, and ``memory`` is the NVIDIA
    driver's name) and its pods."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    namespace = str(meta.get("namespace") or "")
    allocation = status.get("allocation") or {}
    devices = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        if not isinstance(result, Mapping):
            continue
        consumed = result.get("consumedCapacity") or {}
        memory = quantity_of(consumed.get("memory")) if isinstance(consumed, Mapping) else None
        devices.append(
            Allocated(
                driver=str(result.get("driver") or ""),
                pool=str(result.get("pool") or ""),
                device=str(result.get("device") or ""),
                memory=None if memory is None else int(memory.value),
                share=bool(result.get("shareID")),
            )
        )
    pods: dict[str, None] = {}
    for ref in status.get("reservedFor") or ():
        if isinstance(ref, Mapping) and ref.get("resource") == "pods" and not ref.get("apiGroup"):
            pods[str(ref.get("name") or "")] = None
    for owner in meta.get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("kind") == "Pod" and owner.get("controller"):
            pods[str(owner.get("name") or "")] = None
    pods.pop("", None)
    return ClaimInfo(
        namespace=namespace,
        name=str(meta.get("name") or ""),
        devices=tuple(devices),
        pods=tuple(pods),
    )
