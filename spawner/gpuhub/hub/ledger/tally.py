"""A GPU type's live figures, kept current by deltas (:class:`gpuhub.hub.ledger.capacity.ClusterCapacity`).

Recomputing a type's figures walks every node (10,000 nodes: tens of milliseconds, over the
spawn form's 10 ms budget). A pod event changes what one node holds, so the cache keeps, per
type, each serving node's :class:`Part` and the sums over them: an event replaces one node's
part (microseconds), and a view reads the sums. Pure arithmetic, no Kubernetes here: the
parts come from the capacity cache, which knows what a node serves.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One serving node's part in a type's figures (units: GPUs, replicas or vGPU slots)."""

    have: int
    left: int
    devices: int | None = None  # GPUs a shared type's node shares; None: not known
    memory_whole: int | None = None  # bytes shared by memory; None: not known
    memory_left: int = 0  # bytes of it no pod holds
    share_room: int = 0  # the most memory one share could get on the node now


def _move(counter: Counter[int], value: int, sign: int) -> None:
    counter[value] += sign
    if counter[value] <= 0:
        del counter[value]


class Tally:
    """The sums over the parts of the nodes serving one type; ``memory``: shared by memory."""

    def __init__(self, memory: bool = False) -> None:
        self.memory = memory
        self.parts: dict[str, Part] = {}
        self.total = self.free = 0
        self.lefts: Counter[int] = Counter()  # free units per node -> how many nodes
        self.devices = self.devices_unknown = 0
        self.memory_total = self.memory_free = self.memory_unknown = 0
        self.rooms: Counter[int] = Counter()

    def set(self, node: str, part: Part | None) -> None:
        """``node``'s part now (None: it serves the type no more, or is gone)."""
        old = self.parts.pop(node, None)
        if old == part:
            if part is not None:
                self.parts[node] = part
            return
        if old is not None:
            self._add(old, -1)
        if part is not None:
            self.parts[node] = part
            self._add(part, +1)

    def _add(self, part: Part, sign: int) -> None:
        self.total += sign * part.have
        self.free += sign * part.left
        _move(self.lefts, part.left, sign)
        if part.devices is None:
            self.devices_unknown += sign
        else:
            self.devices += sign * part.devices
        if not self.memory:
            return
        if part.memory_whole is None:
            self.memory_unknown += sign
            return
        self.memory_total += sign * part.memory_whole
        self.memory_free += sign * part.memory_left
        _move(self.rooms, part.share_room, sign)

    @property
    def largest_free(self) -> int:
        return max(self.lefts, default=0)

    @property
    def largest_share(self) -> int:
        return max(self.rooms, default=0)
