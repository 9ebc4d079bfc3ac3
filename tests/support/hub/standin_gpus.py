"""A utilization source the tests control: ``gpu-utilization.json`` in the hub's directory.

The file maps device indices to utilization (0..1), e.g. ``{"0": 0.0, "1": 0.7}``; a device
missing from it is unknown (never idle). The hub reads it on each monitor tick, as it would
read NVML, so a test makes a GPU idle or busy by rewriting one file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

from gpuhub.core.holdings import Holding
from gpuhub.hub.monitor.utilization import GPUSample, UtilizationSource, samples_by_device

FILE = "gpu-utilization.json"


class FileUtilization(UtilizationSource):
    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        by_device = await asyncio.to_thread(read, Path(FILE))
        return samples_by_device(holdings, by_device)


def read(path: Path) -> dict[int, tuple[float, int | None]]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {int(k): (float(v), 1 << 30) for k, v in data.items()}


def write(workdir: Path, utilization: dict[int, float]) -> None:
    """Set the stand-in GPUs' utilization (atomically: the hub may read at any moment)."""
    tmp = workdir / (FILE + ".tmp")
    tmp.write_text(json.dumps({str(k): v for k, v in utilization.items()}))
    tmp.replace(workdir / FILE)
