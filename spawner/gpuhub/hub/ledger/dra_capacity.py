"""What every DRA device of the cluster has free, from ResourceSlices, DeviceClasses and
allocated ResourceClaims (:class:`DeviceState`), and a DRA GPU type's figures from it.

The capacity watch (:mod:`gpuhub.hub.ledger.capacity`) feeds each event of the three kinds to
one ``set_*`` method here: a slice's devices replace its pool's (the newest generation of a
pool only, as the scheduler reads it), a claim's allocation moves its devices' use (O(its
results), at most 32), a class replaces its compiled selectors. Reading (:meth:`rooms`) walks
the devices a type can use only after something changed, and is kept until then.

A device is free for a whole claim when no claim has it; a device that allows multiple
allocations (consumable capacity, the NVIDIA driver's memory shares) has its ``memory`` less
what the shares allocated on it consumed; a whole allocation of it leaves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuhub.core.dra import DRAType
from gpuhub.core.dra_devices import Device, DeviceClassInfo
from gpuhub.core.sharing import Sharing
from gpuhub.hub.ledger.gpu_capacity import DeviceFree, GPUCapacity
from gpuhub.k8s.dra_inventory import ClaimInfo, SliceInfo

DeviceKey = tuple[str, str, str]  # (driver, pool, device), as an allocation result names it
ClaimKey = tuple[str, str]  # (namespace, name)


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

    @property
    def taken(self) -> bool:
        return not self.claims


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
        self._matching: dict[tuple[Any, ...], tuple[int, tuple[DeviceKey, ...]]] = {}
        self._rooms: dict[tuple[Any, ...], tuple[int, tuple[DeviceRoom, ...]]] = {}

    # -- changes -----------------------------------------------------------------------------
    def set_slice(self, name: str, info: SliceInfo | None) -> bool:
        """A slice came, changed (``info``) or went (None); True if a figure may move."""
        old = self.slices.pop(name, None)
        if info is not None:
            self.slices[name] = info
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
        old = self.classes.pop(name, None)
        if info is not None:
            self.classes[name] = info
        if old == info:
            return False
        self.device_generation += 1
        self.generation += 1
        return True

    def set_claim(self, key: ClaimKey, info: ClaimInfo | None) -> bool:
        """A claim came, changed or went; True if a figure may move. O(its results)."""
        old = self.claims.pop(key, None)
        if info is not None and (info.devices or info.pods):
            self.claims[key] = info
        else:
            info = None
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
        self, dra: DRAType, node_ok: Callable[[str], bool], node_generation: int
    ) -> tuple[DeviceKey, ...]:
        """The devices of ``dra``'s class that pass its selectors, on nodes ``node_ok``
        accepts; recomputed only when devices, classes or nodes changed."""
        key = (dra, node_generation)
        hit = self._matching.get(key)
        if hit is not None and hit[0] == self.device_generation:
            return hit[1]
        klass = self.classes.get(dra.device_class)
        found: tuple[DeviceKey, ...] = ()
        if klass is not None:
            found = tuple(
                sorted(
                    (
                        k
                        for k, d in self.devices.items()
                        if d.node and node_ok(d.node) and klass.admits(d) and dra.admits(d)
                    ),
                    key=_device_order,
                )
            )
        if len(self._matching) > 64:
            self._matching.clear()
        self._matching[key] = (self.device_generation, found)
        return found

    def rooms(
        self, dra: DRAType, node_ok: Callable[[str], bool], node_generation: int
    ) -> tuple[DeviceRoom, ...]:
        """What each device ``dra`` can use has free now (kept until a figure moves)."""
        key = (dra, node_generation)
        hit = self._rooms.get(key)
        if hit is not None and hit[0] == self.generation:
            return hit[1]
        rooms = tuple(self.room(k) for k in self.matching(dra, node_ok, node_generation))
        if len(self._rooms) > 64:
            self._rooms.clear()
        self._rooms[key] = (self.generation, rooms)
        return rooms

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


def figures(
    rooms: Iterable[DeviceRoom],
    sharing: Sharing | None,
    who: Callable[[ClaimKey], Iterable[str]] | None = None,
) -> GPUCapacity:
    """A DRA type's figures from its devices' rooms: whole devices free and in all, the most
    free on one node; shared by memory, devices with room for the smallest share, memory
    free and in all, and the largest share one device could give now. Each device's own
    figures come along, most free first (:class:`DeviceFree`), with who holds them (``who``:
    a claim's holders in words)."""
    rooms = tuple(rooms)

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
                for r in rooms
            ),
            key=lambda d: (-(d.memory_free or 0), not d.free),
        )
    )
    if sharing is None or sharing.memory is None:
        per_node: dict[str, int] = {}
        for room in rooms:
            if room.free:
                per_node[room.device.node] = per_node.get(room.device.node, 0) + 1
        free = sum(per_node.values())
        return GPUCapacity(
            free=free,
            total=len(rooms),
            largest_free=max(per_node.values(), default=0),
            dra_devices=each,
        )
    known = [r for r in rooms if r.memory_total is not None]
    smallest = max(sharing.min, 1)
    with_room = sum(1 for r in known if (r.memory_free or 0) >= smallest)
    return GPUCapacity(
        free=with_room,
        total=len(rooms),
        largest_free=1 if with_room else 0,
        devices=len(rooms),
        memory_free=sum(r.memory_free or 0 for r in known),
        memory_total=sum(r.memory_total or 0 for r in known),
        largest_share=max((r.memory_free or 0 for r in known), default=0),
        dra_devices=each,
    )


def _device_order(key: DeviceKey) -> tuple[str, int, str]:
    """Pool (node), then GPU minor numerically (gpu-2 before gpu-10), then name."""
    name = key[2]
    digits = name.split("-")[1] if name.startswith("gpu-") and "-" in name else ""
    return (key[1], int(digits) if digits.isdigit() else -1, name)
