"""Hands out whole GPUs of one workstation to servers, each GPU to one server at a time.

One allocator per hub process (all LocalGPUSpawners share it). Allocation happens on the
event loop without awaiting, so two spawns cannot take the same GPU. After a hub restart the
spawners' saved state is replayed through :meth:`GPUAllocator.claim`, so a GPU held by a
still-running server is never handed out again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)


class NotEnoughGPUs(Exception):
    """Fewer GPUs are free than were asked for."""

    def __init__(self, wanted: int, free: int, total: int) -> None:
        super().__init__(f"{wanted} wanted, {free} of {total} free")
        self.wanted, self.free, self.total = wanted, free, total


class GPUAllocator:
    def __init__(self) -> None:
        self._owner_of: dict[int, str] = {}

    def held_by(self, owner: str) -> list[int]:
        return sorted(d for d, o in self._owner_of.items() if o == owner)

    def free(self, candidates: Iterable[int]) -> list[int]:
        return [d for d in candidates if d not in self._owner_of]

    def allocate(self, owner: str, count: int, candidates: Sequence[int]) -> list[int]:
        """Take ``count`` free devices from ``candidates`` for ``owner`` (lowest first)."""
        self.release(owner)  # a restarting server gives back what it had
        free = self.free(candidates)
        if count > len(free):
            raise NotEnoughGPUs(count, len(free), len(candidates))
        chosen = sorted(free)[:count]
        for device in chosen:
            self._owner_of[device] = owner
        log.info("GPUs %s -> %s", chosen, owner)
        return chosen

    def claim(self, owner: str, devices: Iterable[int]) -> None:
        """Record devices a running server already holds (state restored after a restart)."""
        for device in devices:
            current = self._owner_of.get(device)
            if current not in (None, owner):
                log.warning(
                    "GPU %s is claimed by both %s and %s; keeping %s",
                    device,
                    current,
                    owner,
                    current,
                )
                continue
            self._owner_of[device] = owner

    def release(self, owner: str) -> list[int]:
        released = self.held_by(owner)
        for device in released:
            del self._owner_of[device]
        if released:
            log.info("GPUs %s released by %s", released, owner)
        return released


# The one allocator of this hub process.
ALLOCATOR = GPUAllocator()
