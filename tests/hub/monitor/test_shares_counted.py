"""A share of a GPU on the fleet page, in GPU-hours and in /hub/metrics (issue 24, item 4):
it counts as its fraction of a GPU and shows its memory, in-process from a workstation's
device book (the hub-level checks are in tests/hub/ledger/test_device_book_shares.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from gpuhub.core.holdings import Holding
from gpuhub.core.sharing import Sharing
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, server_key
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.monitor.metrics import GPUCollector
from gpuhub.hub.monitor.usage import UsageStore
from gpuhub.hub.monitor.utilization import GPUSample, UtilizationSource, holding_key
from gpuhub.hub.web.fleet import FleetCache
from tests.support.hub.templates import hub_templates

GB = 10**9
DEVICE = 16 * GB


class Busy(UtilizationSource):
    async def sample(self, holdings: Sequence[Holding]) -> dict[Any, list[GPUSample]]:
        return {
            holding_key(h): [GPUSample(str(d), 0.9, 1 << 30) for d in h.devices] for h in holdings
        }


def shared_monitor() -> GPUMonitor:
    """ann holds 8 GB and bob 4 GB of GPU 0 of a T4 type shared by memory (16 GB per GPU);
    GPU 1 is unused, so 20 GB of 32 GB are free."""
    book = GPUAllocator()
    for user, memory in (("ann", 8 * GB), ("bob", 4 * GB)):
        holder = Holder(user, "server", "", "t4", time.time(), gpu_memory=memory)
        holder.device_memory = DEVICE
        book.claim(server_key(user, ""), [0], holder)

    async def capacity() -> tuple[dict[str, GPUCapacity], str]:
        room = DEVICE - 12 * GB
        return {
            "t4": GPUCapacity(
                free=2,
                total=2,
                devices=2,
                memory_free=room + DEVICE,
                memory_total=2 * DEVICE,
                largest_share=DEVICE,
                per_device=((0, room, DEVICE), (1, DEVICE, DEVICE)),
            )
        }, ""

    t4 = SimpleNamespace(
        display_name="T4",
        resource_name="nvidia.com/gpu",
        sharing=Sharing.from_config("t4.sharing", {"memory": "16G", "min": "1G"}),
    )
    spawner = SimpleNamespace(
        user=SimpleNamespace(settings={}),
        gpu_capacity=capacity,
        gpu_policy=SimpleNamespace(gpu_types={"t4": t4}),
    )
    return GPUMonitor(spawner, Ledger(book), Busy(), None, UsageStore(None), 30.0)


def test_fleet_page_counts_shares_as_fractions_and_shows_their_memory() -> None:
    async def scenario() -> None:
        monitor = shared_monitor()
        await monitor.tick(time.time())
        cache = FleetCache(
            monitor, hub_templates(), "/hub/", lambda: {"ann": ["class"], "bob": ["class"]}
        )
        view, parts = cache.page(await cache.current(), "root", see_all=True)
        by_user = {row.user: row for row in view.rows}
        assert by_user["ann"].gpus_text == "8 GB of GPU 0 (T4), 0.5 GPU"
        assert by_user["bob"].gpus_text == "4 GB of GPU 0 (T4), 0.25 GPU"
        assert "<td>8 GB of GPU 0 (T4), 0.5 GPU</td>" in parts["rows_html"]
        # Held 0.75 of a GPU; free: 20 GB of 16 GB GPUs is 1.25 GPUs (one number per fact);
        # nobody waits.
        assert view.types == [("T4", 0.75, 1.25, 2, 0)]
        assert view.memory == {"T4": "20 GB of 32 GB GPU memory free"}
        assert view.groups[0][:2] == ("class", 0.75)

    asyncio.run(scenario())


def test_gpu_hours_and_metrics_count_a_share_as_its_fraction() -> None:
    async def scenario() -> None:
        monitor = shared_monitor()
        now = time.time()
        await monitor.tick(now)
        await monitor.tick(now + 30)  # 30 s: ann 0.5 GPU, bob 0.25 GPU
        totals = monitor.store.totals
        assert abs(totals[("ann", "T4")] - 15.0) < 1e-6
        assert abs(totals[("bob", "T4")] - 7.5) < 1e-6

        metrics = {m.name: m for m in GPUCollector(monitor).collect()}
        held = {s.labels["user"]: s.value for s in metrics["gpuhub_gpus_held"].samples}
        assert held == {"ann": 0.5, "bob": 0.25}
        gpus = {s.labels["state"]: s.value for s in metrics["gpuhub_gpus"].samples}
        assert gpus == {"free": 1.25, "held": 0.75}
        memory = {s.labels["state"]: s.value for s in metrics["gpuhub_gpu_memory_bytes"].samples}
        assert memory == {"free": 20 * GB, "held": 12 * GB}
        shares = {
            s.labels["user"]: s.value for s in metrics["gpuhub_gpu_memory_held_bytes"].samples
        }
        assert shares == {"ann": 8 * GB, "bob": 4 * GB}

    asyncio.run(scenario())
