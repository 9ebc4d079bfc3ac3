"""/hub/metrics writes GPU-seconds without float noise: a sum of ticks
reads 216.0, not 216.000000000002 (the trial saw 216.00000000000003)."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from gpuhub.hub.ledger.device_book import GPUAllocator
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.monitor.metrics import GPUCollector, seconds_figure
from gpuhub.hub.monitor.usage import UsageStore
from gpuhub.hub.monitor.utilization import UtilizationSource


class NoLoad(UtilizationSource):
    async def sample(self, holdings: object) -> dict[object, list[object]]:  # type: ignore[override]
        return {}


def test_gpu_seconds_are_written_to_the_millisecond_and_never_go_back() -> None:
    async def capacity() -> tuple[dict[str, GPUCapacity], str]:
        return {}, ""

    spawner = SimpleNamespace(
        user=SimpleNamespace(settings={}), gpu_capacity=capacity, gpu_policy=None
    )
    store = UsageStore(None)
    now = time.time()
    for _ in range(540):  # 216 s of one GPU in ticks of 0.4 s, as a monitor adds them
        store.add("bob", "A100", 0.4, now)
    assert store.totals[("bob", "A100")] != 216.0  # the noise is real
    monitor = GPUMonitor(spawner, Ledger(GPUAllocator()), NoLoad(), None, store, 30.0)
    registry = CollectorRegistry()
    registry.register(GPUCollector(monitor))
    text = generate_latest(registry).decode()
    (value,) = re.findall(
        r'^gpuhub_gpu_seconds_total\{gpu_type="A100",user="bob"\} (\S+)$', text, re.M
    )
    assert value == "216.0", text
    # Rounding never makes a growing counter go back.
    figures = [seconds_figure(s) for s in (215.9994, 215.9995, 215.99951, 216.0004, 216.0005)]
    assert figures == sorted(figures)
