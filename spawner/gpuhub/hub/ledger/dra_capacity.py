"""What every DRA device of the cluster has free, from ResourceSlices, DeviceClasses and
allocated ResourceClaims (:class:`DeviceState`), and a DRA GPU type's figures from it.

The capacity watch (:mod:`gpuhub.hub.ledger.capacity`) feeds each event of the three kinds to
one ``set_*`` method here: a slice's devices replace its pool's (the newest generation of a
pool only, as the scheduler reads it), a claim's allocation moves its devices' use (O(its
results), at most 32), a class replaces its compiled selectors. Which devices a type can use is
found again only when devices, classes or nodes change; what they have free is kept in
running sums per type (:class:`TypeDevices`) that a claim event moves for its devices only.

A device is free for a whole claim when no claim has it; a device that allows multiple
allocations (consumable capacity, the NVIDIA driver's memory shares) has its ``memory`` less
what the shares allocated on it consumed; a whole allocation of it leaves nothing.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuhub.core.dra import DRAType
from gpuhub.core.dra_devices import Device, DeviceClassInfo, device_class_info
from gpuhub.core.policy import GPUType
from gpuhub.core.sharing import Sharing
from gpuhub.hub.ledger.gpu_capacity import DeviceFree, GPUCapacity
from gpuhub.k8s.dra_inventory import (
    RESOURCE_GROUP,
    RESOURCE_VERSION,
    ClaimInfo,
    SliceInfo,
    claim_info,
    slice_info,
)
from gpuhub.k8s.inventory import NodeInfo, node_admits
from gpuhub.k8s.listwatch import Reflector, Source

log = logging.getLogger("gpuhub.hub.ledger.dra_capacity")

RESOURCE_PATH = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}"
DeviceKey = tuple[str, str, str]  # (driver, pool, device), as an allocation result names it
ClaimKey = tuple[str, str]  # (namespace, name)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _replace(table: dict[K, V], key: K, info: V | None) -> V | None:
    """Put ``info`` in ``table`` at ``key`` (None: take it out); what stood there before, so
    that the caller can tell whether anything changed."""
    old = table.pop(key, None)
    if info is not None:
        table[key] = info
    return old


@dataclass
class Use:
    """What claims hold of one device: whole allocations, and the memory shares consumed."""

    whole: int = 0
    memory: int = 0
    claims: set[ClaimKey] = field(default_factory=set)


@dataclass(frozen=True)
class DeviceRoom:
    """One device a DRA type can use and what it has free now."""

    device: Device
    free: bool  # no claim holds any of it: a whole claim could have it
    memory_free: int | None  # bytes a share could have now (None: it has no memory capacity)
    memory_total: int | None
    claims: tuple[ClaimKey, ...] = ()  # the claims allocated it


class DeviceState:
    """Slices, classes and allocated claims as the figures read them (module docstring)."""

    def __init__(self) -> None:
        self.slices: dict[str, SliceInfo] = {}
        self._pool_slices: dict[tuple[str, str], set[str]] = {}
        self._pool_devices: dict[tuple[str, str], list[DeviceKey]] = {}
        self.devices: dict[DeviceKey, Device] = {}
        self.classes: dict[str, DeviceClassInfo] = {}
        self.claims: dict[ClaimKey, ClaimInfo] = {}
        self.use: dict[DeviceKey, Use] = {}
        # (namespace, pod) -> its claims: a holding names the devices its pods were given.
        self.pod_claims: dict[ClaimKey, set[ClaimKey]] = {}
        self.generation = 0  # moves on every change a figure reads
        self.device_generation = 0  # moves when devices or classes change (not claims)
        # Per type (its config, nodes, smallest share): its devices and running sums.
        self._views: dict[tuple[Any, ...], tuple[int, TypeDevices]] = {}

    # -- changes -----------------------------------------------------------------------------
    def set_slice(self, name: str, info: SliceInfo | None) -> bool:
        """A slice came, changed (``info``) or went (None); True if a figure may move."""
        old = _replace(self.slices, name, info)
        if old == info:
            return False
        pools = {(s.driver, s.pool) for s in (old, info) if s is not None}
        for pool in pools:
            names = self._pool_slices.setdefault(pool, set())
            if old is not None and (old.driver, old.pool) == pool:
                names.discard(name)
            if info is not None and (info.driver, info.pool) == pool:
                names.add(name)
            self._republish(pool)
            if not names:
                del self._pool_slices[pool]
        self.device_generation += 1
        self.generation += 1
        return True

    def _republish(self, pool: tuple[str, str]) -> None:
        """The pool's devices from its slices of the newest generation (O(its devices))."""
        for key in self._pool_devices.pop(pool, ()):
            self.devices.pop(key, None)
        slices = [self.slices[n] for n in self._pool_slices.get(pool, ())]
        newest = max((s.generation for s in slices), default=0)
        published = []
        for piece in slices:
            if piece.generation == newest:
                for device in piece.devices:
                    self.devices[device.key] = device
                    published.append(device.key)
        if published:
            self._pool_devices[pool] = published

    def set_class(self, name: str, info: DeviceClassInfo | None) -> bool:
        if _replace(self.classes, name, info) == info:
            return False
        self.device_generation += 1
        self.generation += 1
        return True

    def set_claim(self, key: ClaimKey, info: ClaimInfo | None) -> bool:
        """A claim came, changed or went; True if a figure may move. O(its results)."""
        if info is not None and not (info.devices or info.pods):
            info = None  # holds nothing: as if gone
        old = _replace(self.claims, key, info)
        if old == info:
            return False
        if old is not None:
            self._count(old, -1)
        if info is not None:
            self._count(info, +1)
        self.generation += 1
        return True

    def _count(self, claim: ClaimInfo, sign: int) -> None:
        for result in claim.devices:
            for _, view in self._views.values():  # a handful: the hub's DRA types
                if result.key in view.rooms:
                    view.dirty.add(result.key)
            use = self.use.setdefault(result.key, Use())
            if result.share:
                use.memory += sign * (result.memory or 0)
            else:
                use.whole += sign
            if sign > 0:
                use.claims.add(claim.key)
            else:
                use.claims.discard(claim.key)
            if not use.claims and not use.whole and not use.memory:
                del self.use[result.key]
        for pod in claim.pods:
            pod_key = (claim.namespace, pod)
            if sign > 0:
                self.pod_claims.setdefault(pod_key, set()).add(claim.key)
            else:
                held = self.pod_claims.get(pod_key)
                if held is not None:
                    held.discard(claim.key)
                    if not held:
                        del self.pod_claims[pod_key]

    def relisted(self, kind: str, items: Iterable[Any]) -> None:
        """Replace everything of ``kind`` (``resourceslices``, ``resourceclaims``,
        ``deviceclasses``) with a fresh LIST's objects, decoded."""
        if kind == "resourceslices":
            self.slices, self._pool_slices, self.devices = {}, {}, {}
            self._pool_devices = {}
            for piece in items:
                self.slices[piece.name] = piece
                self._pool_slices.setdefault((piece.driver, piece.pool), set()).add(piece.name)
            for pool in list(self._pool_slices):
                self._republish(pool)
            self.device_generation += 1
        elif kind == "deviceclasses":
            self.classes = {c.name: c for c in items}
            self.device_generation += 1
        else:
            self.claims, self.use, self.pod_claims = {}, {}, {}
            self._views.clear()  # every device's use may have moved
            for claim in items:
                if claim.devices or claim.pods:
                    self.claims[claim.key] = claim
                    self._count(claim, +1)
        self.generation += 1

    # -- reading -----------------------------------------------------------------------------
    def devices_of(self, claims: Iterable[ClaimKey]) -> list[tuple[Device | None, DeviceKey]]:
        """The devices allocated to ``claims`` (a pod's), each once, in the claims' order."""
        out: dict[DeviceKey, Device | None] = {}
        for key in claims:
            claim = self.claims.get(key)
            for result in claim.devices if claim is not None else ():
                out.setdefault(result.key, self.devices.get(result.key))
        return [(device, key) for key, device in out.items()]

    def matching(
        self, dra: DRAType, node_ok: Callable[[str], bool], node_generation: Hashable
    ) -> tuple[DeviceKey, ...]:
        """The devices of ``dra``'s class that pass its selectors, on nodes ``node_ok``
        accepts (O(devices): only when devices, classes or nodes changed)."""
        klass = self.classes.get(dra.device_class)
        if klass is None:
            return ()
        return tuple(
            sorted(
                (
                    k
                    for k, d in self.devices.items()
                    if d.node and node_ok(d.node) and klass.admits(d) and dra.admits(d)
                ),
                key=_device_order,
            )
        )

    def devices_for(
        self,
        dra: DRAType,
        node_ok: Callable[[str], bool],
        node_generation: Hashable,
        sharing: Sharing | None = None,
    ) -> TypeDevices:
        """The devices a type can use and its running sums, brought up to date: made anew
        when devices, classes or nodes changed (``node_generation``), else moved by the
        devices claims changed since (O(those))."""
        smallest = sharing.min if sharing is not None and sharing.memory is not None else 0
        key = (dra, node_generation, smallest)
        hit = self._views.get(key)
        if hit is None or hit[0] != self.device_generation:
            if len(self._views) >= 64:  # types no view asks for any more
                self._views.clear()
            keys = self.matching(dra, node_ok, node_generation)
            view = TypeDevices([self.room(k) for k in keys], smallest)
            self._views[key] = (self.device_generation, view)
            return view
        view = hit[1]
        if view.dirty:
            view.update(self)
        return view

    def rooms(
        self, dra: DRAType, node_ok: Callable[[str], bool], node_generation: Hashable
    ) -> tuple[DeviceRoom, ...]:
        """What each device ``dra`` can use has free now, in device order."""
        return tuple(self.devices_for(dra, node_ok, node_generation).rooms.values())

    def room(self, key: DeviceKey) -> DeviceRoom:
        device = self.devices[key]
        use = self.use.get(key)
        total = device.memory
        if use is None:
            return DeviceRoom(device, True, total, total)
        claims = tuple(sorted(use.claims))
        if use.whole or total is None:
            return DeviceRoom(device, False, 0 if total is not None else None, total, claims)
        return DeviceRoom(device, False, max(total - use.memory, 0), total, claims)


# Devices a type's figures carry one by one (GPUCapacity.dra_devices): every device up to this
# many (the fleet page lists them; the form shows the first few), else this many of the most
# free, so that a view of a 40,000-device cluster stays small.
SHOWN = 256


class TypeDevices:
    """The devices one DRA type can use (:meth:`DeviceState.devices_for`) and running sums of
    what they have free, moved by deltas as claims move devices' use."""

    def __init__(self, rooms: Iterable[DeviceRoom], smallest: int) -> None:
        self.rooms: dict[DeviceKey, DeviceRoom] = {r.device.key: r for r in rooms}
        self.smallest = max(smallest, 1)  # the least memory a share may ask for
        self.nodes: dict[str, list[DeviceKey]] = {}
        for key, room in self.rooms.items():
            self.nodes.setdefault(room.device.node, []).append(key)
        self.free = self.with_room = self.memory_free = self.memory_total = 0
        self.node_free: dict[str, int] = {}  # whole devices free per node
        self.node_best: dict[str, int] = {}  # the most memory free on one device per node
        for room in self.rooms.values():
            self._add(room, +1)
        for node in self.nodes:
            self._node(node)
        self.dirty: set[DeviceKey] = set()  # devices whose use changed since

    def _add(self, room: DeviceRoom, sign: int) -> None:
        self.free += sign * room.free
        if room.memory_total is not None:
            self.memory_total += sign * room.memory_total
            self.memory_free += sign * (room.memory_free or 0)
            self.with_room += sign * ((room.memory_free or 0) >= self.smallest)

    def _node(self, node: str) -> None:
        keys = self.nodes[node]
        self.node_free[node] = sum(self.rooms[k].free for k in keys)
        self.node_best[node] = max((self.rooms[k].memory_free or 0 for k in keys), default=0)

    def update(self, state: DeviceState) -> None:
        nodes = set()
        for key in self.dirty:
            if key not in state.devices:
                continue  # gone with its slice: the next device change makes the view anew
            old, new = self.rooms[key], state.room(key)
            self._add(old, -1)
            self._add(new, +1)
            self.rooms[key] = new
            nodes.add(new.device.node)
        for node in nodes:
            self._node(node)
        self.dirty.clear()

    def shown(self, by_memory: bool) -> list[DeviceRoom]:
        """Every device, or :data:`SHOWN` of those on the nodes with the most free."""
        if len(self.rooms) <= SHOWN:
            return list(self.rooms.values())
        score = self.node_best if by_memory else self.node_free
        # As many nodes as hold SHOWN devices on average (a few dozen), more if they hold fewer.
        wanted = -(-SHOWN * len(self.nodes) // len(self.rooms))
        while True:
            picked: list[DeviceRoom] = []
            for node in heapq.nlargest(wanted, score, key=score.__getitem__):
                picked.extend(self.rooms[k] for k in self.nodes[node])
                if len(picked) >= SHOWN:
                    return picked
            if wanted >= len(score):
                return picked
            wanted *= 4


def figures(
    view: TypeDevices,
    sharing: Sharing | None,
    who: Callable[[ClaimKey], Iterable[str]] | None = None,
) -> GPUCapacity:
    """A DRA type's figures from its devices (:class:`TypeDevices`): whole devices free and in
    all, the most free on one node; shared by memory, devices with room for the smallest
    share, memory free and in all, and the largest share one device could give now. The
    devices' own figures come along (:data:`SHOWN` at most), most free first
    (:class:`DeviceFree`), with who holds them (``who``: a claim's holders in words)."""
    by_memory = sharing is not None and sharing.memory is not None

    def holders(room: DeviceRoom) -> tuple[str, ...]:
        if who is None:
            return ()
        return tuple(dict.fromkeys(name for claim in room.claims for name in who(claim)))

    each = tuple(
        sorted(
            (
                DeviceFree(
                    r.device.short_words,
                    r.device.node,
                    r.free,
                    r.memory_free,
                    r.memory_total,
                    holders(r),
                )
                for r in view.shown(by_memory)
            ),
            key=lambda d: (-(d.memory_free or 0), not d.free),
        )
    )
    total = len(view.rooms)
    if not by_memory:
        return GPUCapacity(
            free=view.free,
            total=total,
            largest_free=max(view.node_free.values(), default=0),
            dra_devices=each,
        )
    return GPUCapacity(
        free=view.with_room,
        total=total,
        largest_free=1 if view.with_room else 0,
        devices=total,
        memory_free=view.memory_free,
        memory_total=view.memory_total,
        largest_share=max(view.node_best.values(), default=0),
        dra_devices=each,
    )


def _device_order(key: DeviceKey) -> tuple[str, int, str]:
    """Pool (node), then GPU minor numerically (gpu-2 before gpu-10), then name."""
    name = key[2]
    digits = name.split("-")[1] if name.startswith("gpu-") and "-" in name else ""
    return (key[1], int(digits) if digits.isdigit() else -1, name)


def node_takes(node: NodeInfo | None, gpu_type: GPUType) -> bool:
    """Whether pods of ``gpu_type`` may run on ``node`` (known, Ready, not cordoned, its
    labels and taints): a DRA type's devices count only there."""
    return node is not None and node.usable and node_admits(node, gpu_type)


# The kinds of the watch: their collection's path (resource.k8s.io/v1, read as JSON: the
# apiserver's protobuf of them is not read) and their decoder.
DRA_KINDS: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {
    "resourceslices": (f"{RESOURCE_PATH}/resourceslices", slice_info),
    "resourceclaims": (f"{RESOURCE_PATH}/resourceclaims", claim_info),
    "deviceclasses": (f"{RESOURCE_PATH}/deviceclasses", device_class_info),
}
LIST_PAGE = 500
# How long a cluster that serves no resource.k8s.io/v1 (before Kubernetes 1.34) waits before
# it is asked again: an upgrade is rare, and there is nothing to count meanwhile.
UNSERVED_RETRY = 300.0
# How long a kind the hub's service account may not read (403) waits before it is asked
# again: a Role fixed meanwhile is picked up within a minute, without a request a second.
FORBIDDEN_RETRY = 60.0
# What kube-apiserver's 403 says: 'User "..." cannot list resource "resourceslices" in API
# group "resource.k8s.io" at the cluster scope'.
_CANNOT = re.compile(r'cannot (\w+) resource "([^"]+)" in API group "([^"]*)"')


def forbidden_words(denied: Mapping[str, str]) -> str:
    """The one sentence for DRA objects the hub may not read: ``denied`` maps each kind to
    the verb its 403 named (``{"resourceslices": "list"}``)."""
    by_verb: dict[str, list[str]] = {}
    for kind in DRA_KINDS:
        if kind in denied:
            by_verb.setdefault(denied[kind], []).append(kind)
    what = " or ".join(f"{verb} {_and(kinds)}" for verb, kinds in by_verb.items())
    return (
        f"the hub's service account may not {what} (API group {RESOURCE_GROUP}), so GPUs "
        "claimed through DRA cannot be counted; an admin should install the chart's RBAC for "
        "DRA (rbac.create, templates/rbac-dra.yaml) or grant list and watch on "
        f"resourceslices, resourceclaims and deviceclasses of {RESOURCE_GROUP} to the hub"
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _denied_verb(kind: str, exc: Any, asked: str) -> str:
    """The verb a 403 names for ``kind`` (the apiserver's message), else ``asked``."""
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else exc.body
    found = _CANNOT.search(str(body or ""))
    return found.group(1) if found and found.group(2) == kind else asked


def _key(kind: str, meta: Mapping[str, Any]) -> Any:
    """What names an object of ``kind`` in :class:`DeviceState`: a claim its namespace and
    name, a slice or class its name."""
    name = str(meta.get("name") or "")
    return (str(meta.get("namespace") or ""), name) if kind == "resourceclaims" else name


class DeviceWatch(Reflector):
    """LIST then WATCH of ResourceSlices, ResourceClaims and DeviceClasses into one
    :class:`DeviceState` (each event O(its object)), as
    :class:`gpuhub.k8s.listwatch.Reflector` does; ``on_change`` is called after every change
    a figure reads. A cluster that does not serve ``resource.k8s.io/v1`` has no DRA devices
    (:attr:`served` False), and the rest of the capacity watch is not held up. A kind the
    hub may not read (403) is said once in the log and kept as :attr:`forbidden` (the form
    says it), and asked again every :data:`FORBIDDEN_RETRY` seconds."""

    list_page = LIST_PAGE
    watched = tuple(DRA_KINDS)

    def __init__(
        self,
        api_client: Any,
        on_change: Callable[[], None],
        *,
        request_timeout: float = 30,
        watch_timeout: int = 300,
    ) -> None:
        self._api_client = api_client
        self.on_change = on_change
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.state = DeviceState()
        self.synced = dict.fromkeys(DRA_KINDS, False)
        self.served: bool | None = None  # None: not asked yet
        self.error: str | None = None
        # Kinds the hub's service account may not read (403), and the verb refused.
        self.denied: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def api_client(self) -> Any:
        return self._api_client

    @property
    def ready(self) -> bool:
        """Whether the figures say what the cluster has (all three kinds listed)."""
        return all(self.synced.values())

    def _refused(self, kind: str, exc: Any, asked: str) -> float | None:
        """No ``resource.k8s.io/v1`` (404): no DRA devices, asked again slowly; a kind the hub
        may not read (403): said, and asked again every :data:`FORBIDDEN_RETRY` seconds
        until a fixed Role lets it."""
        if exc.status == 404:
            if self.served is not False:
                log.info("The cluster serves no resource.k8s.io/v1: no DRA devices")
            self.served = False
            self.synced[kind] = True  # nothing to wait for: no devices
            self.on_change()
            return UNSERVED_RETRY
        if exc.status == 403:
            self._forbidden(kind, _denied_verb(kind, exc, asked))
            return FORBIDDEN_RETRY
        return None

    @property
    def forbidden(self) -> str:
        """Why DRA's GPUs cannot be counted when the hub may not read their objects, a
        sentence without its capital; "" when it may read them all."""
        return forbidden_words(self.denied) if self.denied else ""

    def _forbidden(self, kind: str, verb: str) -> None:
        """A 403: said once per kind in the log, and as :attr:`error` (the form says it)."""
        if self.denied.get(kind) != verb:
            self.denied[kind] = verb
            log.warning("DRA devices unavailable: %s.", forbidden_words({kind: verb}))
        self.error = self.forbidden
        self.synced[kind] = False

    def _failed(self, kind: str, detail: str) -> None:
        if self.error is None:
            log.warning("DRA devices unavailable (%s): %s", kind, detail)
        self.error = self.forbidden or detail  # a 403's sentence says what to do: keep it
        self.synced[kind] = False

    # -- what the Reflector lists and watches ----------------------------------------------
    def _source(self, kind: str) -> Source:
        return Source(kind, DRA_KINDS[kind][0], encoding="json")

    def _lists(self, kind: str) -> dict[Any, Any]:
        """A LIST's objects, decoded (the API's JSON never stays), by :func:`_key`."""
        return {}

    def _take(self, kind: str, item: Mapping[str, Any], lists: dict[Any, Any]) -> None:
        lists[_key(kind, item.get("metadata") or {})] = DRA_KINDS[kind][1](item)

    def _drop(self, kind: str, item: Mapping[str, Any], lists: dict[Any, Any]) -> None:
        lists.pop(_key(kind, item.get("metadata") or {}), None)

    def _install(self, kind: str, lists: dict[Any, Any], end: Mapping[str, Any]) -> str:
        self.state.relisted(kind, lists.values())
        self.served, self.synced[kind] = True, True
        if self.denied.pop(kind, None) is not None:
            log.info("DRA devices: the hub may now read %s", kind)
            self.error = self.forbidden or None
        if self.ready:
            self.error = None
        self.on_change()
        return str((end.get("metadata") or {}).get("resourceVersion") or "")

    def _apply(self, kind: str, event: Mapping[str, Any]) -> str | None:
        return self.apply(kind, event)

    def apply(self, kind: str, event: Mapping[str, Any]) -> str | None:
        """One watch event of ``kind``; the version it carries."""
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "BOOKMARK":
            return meta.get("resourceVersion")
        gone = event.get("type") == "DELETED"
        info = None if gone else DRA_KINDS[kind][1](obj)
        key = _key(kind, meta)
        if kind == "resourceclaims":
            moved = self.state.set_claim(key, info)
        elif kind == "resourceslices":
            moved = self.state.set_slice(key, info)
        else:
            moved = self.state.set_class(key, info)
        if moved:
            self.on_change()
        return meta.get("resourceVersion")
