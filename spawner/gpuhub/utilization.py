"""Where the hub learns how busy each held GPU is (for reclaim, metrics and the fleet page).

A source is named by the spawners' ``gpu_utilization_source`` trait, so a deployment (or a
test, or the demo's simulated GPUs) plugs in its own: subclass :class:`UtilizationSource`
and implement :meth:`~UtilizationSource.sample`. The hub calls it once per monitor tick for
every GPU holding; it must not block the event loop (run blocking reads in a thread).

A GPU missing from the answer is *unknown*, and unknown never counts as idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .ledger import Holding

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GPUSample:
    """One GPU of one holding at one moment."""

    gpu: str  # device index locally, "<pod>/<gpu>" on Kubernetes: a label for people
    utilization: float  # 0..1
    memory_used: int | None = None  # bytes


def holding_key(holding: Holding) -> tuple[str, str, str]:
    return (holding.user, holding.kind, holding.name)


class UtilizationSource:
    """Base class of utilization sources (the ``gpu_utilization_source`` trait)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        """Samples per holding (keyed by :func:`holding_key`); omit what cannot be read."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the source opened (HTTP sessions)."""


class NoUtilization(UtilizationSource):
    """Nothing is known: reclaim stays off (Kubernetes without ``prometheus_url``)."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        return {}


class NVMLUtilization(UtilizationSource):
    """The hub machine's own GPUs, by device index, through NVML (local mode)."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        wanted = sorted({d for h in holdings for d in h.devices})
        if not wanted:
            return {}
        by_device = await asyncio.to_thread(_nvml_read, wanted)
        return samples_by_device(holdings, by_device)


def samples_by_device(
    holdings: Sequence[Holding], by_device: dict[int, tuple[float, int | None]]
) -> dict[tuple[str, str, str], list[GPUSample]]:
    """Per-device readings ``{index: (utilization, memory_used)}`` spread over holdings; a
    holding with any device unread is left out (unknown)."""
    out: dict[tuple[str, str, str], list[GPUSample]] = {}
    for holding in holdings:
        if not holding.devices or any(d not in by_device for d in holding.devices):
            continue
        out[holding_key(holding)] = [
            GPUSample(str(d), by_device[d][0], by_device[d][1]) for d in holding.devices
        ]
    return out


def _nvml_read(indices: Sequence[int]) -> dict[int, tuple[float, int | None]]:
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}
    readings: dict[int, tuple[float, int | None]] = {}
    try:
        for index in indices:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                readings[index] = (float(rates.gpu) / 100.0, int(memory.used))
            except pynvml.NVMLError as exc:
                log.debug("gpuhub: cannot read GPU %s: %s", index, exc)
        return readings
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
