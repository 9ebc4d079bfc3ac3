"""What is free of a GPU type right now, as the form, the spawn page and the metrics read it."""

from __future__ import annotations

from dataclasses import dataclass

from gpuhub.core.quantity import human_memory


@dataclass(frozen=True)
class DeviceFree:
    """One device of a type claimed through DRA and what it has free now (from its slice
    and the claims allocated it: :mod:`gpuhub.hub.ledger.dra_capacity`)."""

    name: str  # "GPU 3", "MIG 1g.10gb #0 of GPU 0"
    node: str
    free: bool  # no claim holds any of it
    memory_free: int | None  # bytes a share could have now; None: no memory capacity
    memory_total: int | None
    # Who holds it: "ana: server 'default'" for gpuhub's servers and jobs, else the pod.
    holders: tuple[str, ...] = ()

    @property
    def free_text(self) -> str:
        """ "free", "24 GB of 80 GB free", "all 80 GB in use", "in use"."""
        if self.free:
            return "free"
        if self.memory_free and self.memory_total is not None:
            return f"{human_memory(self.memory_free)} of {human_memory(self.memory_total)} free"
        if self.memory_total is not None and self.holders and self.memory_free == 0:
            return f"all {human_memory(self.memory_total)} in use"
        return "in use"

    @property
    def where(self) -> str:
        """ "GPU 3 of a100-7"."""
        return f"{self.name} of {self.node}" if self.node else self.name


@dataclass(frozen=True)
class GPUCapacity:
    """Live figures for one GPU type, from the cluster (GPUSpawner) or the allocator (local)."""

    free: int
    total: int
    # Most GPUs of this type free on any single node: the biggest request that fits now.
    largest_free: int | None = None
    waiting: int = 0  # spawns waiting in line for this type (local queue)
    # None free: "likely free around 14:30 UTC", the monitor's estimate for one more
    # request (gpuhub.hub.monitor.eta); "" where there is none.
    likely_free: str = ""
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
    # A type claimed through DRA: each of its devices, most free first.
    dra_devices: tuple[DeviceFree, ...] = ()

    @property
    def used_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 * (self.total - self.free) / self.total, 1)

    @property
    def free_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 - self.used_pct, 1)

    def largest_device(self, *, now: bool) -> DeviceFree | None:
        """The DRA device with the most memory free now (``now``), or the most in all."""
        known = [d for d in self.dra_devices if d.memory_total is not None]
        if not known:
            return None
        if now:
            return max(known, key=lambda d: d.memory_free or 0)
        return max(known, key=lambda d: d.memory_total or 0)

    def unheld_share(self, type_name: str, memory: int) -> str | None:
        """Why no device of a DRA type can hold a share of ``memory`` bytes now, with the
        largest that could ("No A100 can hold 90 GB now; the largest free share is 24 GB on
        GPU 3 of a100-7"); None where one can (or the devices say no memory)."""
        largest = self.largest_device(now=True)
        if largest is None or (largest.memory_free or 0) >= memory:
            return None
        wanted = f"No {type_name} can hold {human_memory(memory)} now"
        if not largest.memory_free:
            return f"{wanted}; every one of its GPUs is fully in use"
        return (
            f"{wanted}; the largest free share is {human_memory(largest.memory_free)} "
            f"on {largest.where}"
        )
