"""What gpuhub reads of each Kubernetes kind it watches, and one decoder for all of them.

A pod as kube-apiserver sends it is about 3.5 KB of JSON (managed fields, defaults, the
kubelet's status), of which gpuhub reads perhaps 300 bytes. ``json.loads`` builds every
one of those containers; :func:`decode_list` and :func:`decode_event` hand the JSON to
msgspec with the shape of what gpuhub reads (one ``TypedDict`` per kind, :data:`KINDS`), and
msgspec skips the rest without building it: about five times less CPU for a LIST page.

The objects come out as plain dicts holding exactly the fields declared here, nested as the
API nests them, so :mod:`gpuhub.k8s.inventory` and the jobs service read them as they read
``json.loads``'s. A field gpuhub starts to read must be declared here first (a test compares
every function of the inventory on both decodings of real apiserver answers). An answer that
does not fit the declared types (a type the API's schema does not allow) is decoded whole
instead: slower, never wrong.

To watch a new kind, declare its ``TypedDict`` and add it to :data:`KINDS` under the name
its watch uses; the list and watch code (:mod:`gpuhub.k8s.listwatch`) needs nothing else.
"""

from __future__ import annotations

import gc
import logging
from typing import Any, TypedDict

import msgspec

log = logging.getLogger("gpuhub.k8s.objects")

# What the API writes for a resource amount: a string ("2Gi", "8"); numbers are let in too.
Quantity = str | int | float


# -- metadata: every kind's ---------------------------------------------------------------------
class OwnerReference(TypedDict, total=False):
    kind: str
    name: str  # a ResourceClaim made from a pod's template names its pod
    uid: str
    controller: bool | None


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    resourceVersion: str
    creationTimestamp: str | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    ownerReferences: list[OwnerReference] | None


# -- Pod: what it holds (resources, by container), where it runs, whose it is -------------------
class ResourceRequirements(TypedDict, total=False):
    limits: dict[str, Quantity] | None
    requests: dict[str, Quantity] | None


class EnvVar(TypedDict, total=False):
    name: str
    value: str | None


class Container(TypedDict, total=False):
    resources: ResourceRequirements | None
    env: list[EnvVar] | None


class SchedulingGate(TypedDict, total=False):
    name: str


class PodSpec(TypedDict, total=False):
    nodeName: str | None
    containers: list[Container] | None
    initContainers: list[Container] | None
    schedulingGates: list[SchedulingGate] | None


class PodStatus(TypedDict, total=False):
    phase: str | None


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


# -- Node: what it offers and whether pods may go there ---------------------------------------------
class Taint(TypedDict, total=False):
    key: str
    value: str | None
    effect: str


class NodeSpec(TypedDict, total=False):
    taints: list[Taint] | None
    unschedulable: bool | None


class NodeCondition(TypedDict, total=False):
    type: str
    status: str


class NodeStatus(TypedDict, total=False):
    allocatable: dict[str, Quantity] | None
    capacity: dict[str, Quantity] | None
    conditions: list[NodeCondition] | None


class Node(TypedDict, total=False):
    metadata: ObjectMeta
    spec: NodeSpec
    status: NodeStatus


# -- resource.k8s.io/v1 (DRA): what gpuhub.k8s.dra_inventory reads -------------------------------
# A device attribute is one of these (list-typed ones, alpha, are not read); "bool", "int"
# and "string" name types, so the functional form spells them.
DeviceAttribute = TypedDict(  # noqa: UP013
    "DeviceAttribute", {"string": str, "bool": bool, "int": int, "version": str}, total=False
)


class DeviceCapacity(TypedDict, total=False):
    value: Quantity


class Device(TypedDict, total=False):
    name: str
    attributes: dict[str, DeviceAttribute] | None
    capacity: dict[str, DeviceCapacity] | None
    allowMultipleAllocations: bool | None


class ResourcePool(TypedDict, total=False):
    name: str
    generation: int


class ResourceSliceSpec(TypedDict, total=False):
    driver: str
    pool: ResourcePool
    nodeName: str | None
    devices: list[Device] | None


class ResourceSlice(TypedDict, total=False):
    metadata: ObjectMeta
    spec: ResourceSliceSpec


class DeviceRequestAllocationResult(TypedDict, total=False):
    driver: str
    pool: str
    device: str
    consumedCapacity: dict[str, Quantity] | None
    shareID: str | None


class DeviceAllocationResult(TypedDict, total=False):
    results: list[DeviceRequestAllocationResult] | None


class AllocationResult(TypedDict, total=False):
    devices: DeviceAllocationResult | None


class ResourceClaimConsumerReference(TypedDict, total=False):
    apiGroup: str | None
    resource: str
    name: str


class ResourceClaimStatus(TypedDict, total=False):
    allocation: AllocationResult | None
    reservedFor: list[ResourceClaimConsumerReference] | None


class ResourceClaim(TypedDict, total=False):
    metadata: ObjectMeta
    status: ResourceClaimStatus


class CELDeviceSelector(TypedDict, total=False):
    expression: str


class DeviceSelector(TypedDict, total=False):
    cel: CELDeviceSelector | None


class DeviceClassSpec(TypedDict, total=False):
    selectors: list[DeviceSelector] | None


class DeviceClass(TypedDict, total=False):
    metadata: ObjectMeta
    spec: DeviceClassSpec


# The kinds gpuhub watches, by the name of their watch: their shape as gpuhub reads it.
KINDS: dict[str, Any] = {
    "pods": Pod,
    "nodes": Node,
    "resourceslices": ResourceSlice,
    "resourceclaims": ResourceClaim,
    "deviceclasses": DeviceClass,
}


# -- lists and watch events ------------------------------------------------------------------
# "continue" is a Python keyword: the functional form spells it.
ListMeta = TypedDict("ListMeta", {"resourceVersion": str, "continue": str}, total=False)


class ListPage(msgspec.Struct):
    """One page of a LIST: its items (each as :data:`KINDS` shapes it) and where it ends."""

    items: list[Any]
    version: str
    token: str | None


class Event(TypedDict):
    """One watch event: ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK`` or ``ERROR``, and
    the object (for ``ERROR``, the API's ``Status``)."""

    type: str
    object: dict[str, Any]


_decoders: dict[tuple[str, str], msgspec.json.Decoder[Any]] = {}
_generic = msgspec.json.Decoder()
_warned: set[str] = set()


def _decoder(kind: str, what: str) -> msgspec.json.Decoder[Any]:
    """The decoder of a LIST answer (``what="list"``) or a watch event of ``kind``."""
    found = _decoders.get((kind, what))
    if found is None:
        item = KINDS[kind]
        fields = (
            {"metadata": ListMeta, "items": list[item] | None}  # type: ignore[valid-type]
            if what == "list"
            else {"type": str, "object": item}
        )
        name = f"{item.__name__}{what.title()}"
        shape: Any = TypedDict(name, fields, total=False)  # type: ignore[misc]
        found = _decoders[(kind, what)] = msgspec.json.Decoder(shape)
    return found


def _whole(body: bytes) -> Any:
    try:
        return _generic.decode(body)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None


def _decode(kind: str, what: str, body: bytes) -> tuple[Any, str | None]:
    """``body`` decoded into ``kind``'s shape, or whole (as ``json.loads`` would) where it
    does not fit that shape, with why. Malformed JSON raises ``ValueError``."""
    try:
        return _decoder(kind, what).decode(body), None
    except msgspec.ValidationError as exc:
        return _whole(body), str(exc)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None


def _misfit(kind: str, why: str | None) -> None:
    if why is not None and kind not in _warned:
        _warned.add(kind)
        log.warning("gpuhub: %s from the Kubernetes API decoded whole (slower): %s", kind, why)


def decode_list(kind: str, body: bytes) -> ListPage:
    """One LIST answer for the watch ``kind`` (a key of :data:`KINDS`).

    The cyclic GC is paused meanwhile: a page is thousands of fresh containers, and GC passes
    over them while decoding would cost more than the decoding."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        doc, why = _decode(kind, "list", body)
    finally:
        if enabled:
            gc.enable()
    _misfit(kind, why)
    if not isinstance(doc, dict):
        raise ValueError(f"a LIST of {kind} answered {type(doc).__name__}, not an object")
    meta = doc.get("metadata") or {}
    return ListPage(
        items=doc.get("items") or [],
        version=str(meta.get("resourceVersion") or ""),
        token=meta.get("continue") or None,
    )


def decode_event(kind: str, line: bytes) -> Event:
    """One line of a watch of ``kind``. An ``ERROR`` event's object is the API's ``Status``
    (``code``, ``reason``, ``message``), decoded whole."""
    doc, why = _decode(kind, "event", line)
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
        raise ValueError(f"a watch of {kind} sent {line[:200]!r}, not an event")
    if doc["type"] == "ERROR":
        doc = _whole(line) if why is None else doc  # a Status, not a pod: all of it
    else:
        _misfit(kind, why)
    obj = doc.get("object")
    return {"type": doc["type"], "object": obj if isinstance(obj, dict) else {}}
