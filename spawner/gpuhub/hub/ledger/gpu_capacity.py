"""What is free of a GPU type right now, as the form, the spawn page and the metrics read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUCapacity:
    """Live figures for one GPU type, from the cluster (GPUSpawner) or the allocator (local)."""

    free: int
    total: int
    # Most GPUs of this type free on any single node: the biggest request that fits now.
    largest_free: int | None = None
    waiting: int = 0  # spawns waiting in line for this type (local queue)
    # A shared type (gpuhub.core.sharing): ``free``/``total`` count units (a time-sliced type's
    # replicas, a HAMi type's slots; a workstation's devices with room); these say the rest,
    # None where the cluster does not say it.
    devices: int | None = None  # GPUs shared
    memory_free: int | None = None  # bytes, shared by memory
    memory_total: int | None = None
    largest_share: int | None = None  # the most memory one request could get now
    # Workstation: (device index, bytes free, bytes in all) of each GPU shared by memory.
    per_device: tuple[tuple[int, int, int], ...] = ()
    spread_unknown: bool = False  # Kubernetes: which GPU of a node has the memory is unknown

    @property
    def used_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 * (self.total - self.free) / self.total, 1)

    @property
    def free_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 - self.used_pct, 1)
