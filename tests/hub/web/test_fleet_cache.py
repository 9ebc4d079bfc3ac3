"""The fleet page's cache (gpuhub.hub.web.fleet.FleetCache), in-process: built once per monitor tick in
a thread from an immutable snapshot, never awaited by a request once a build exists, and
rows of a server stopped since the last build hidden at once."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from gpuhub.core.budgets import BudgetConfig
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, server_key
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.monitor.usage import UsageStore
from gpuhub.hub.monitor.utilization import GPUSample, UtilizationSource, holding_key
from gpuhub.hub.web import fleet
from gpuhub.hub.web.fleet import FleetCache, snapshot
from tests.support.hub.templates import hub_templates

USERS = ("ann", "bob", "cat")


class Load(UtilizationSource):
    def __init__(self) -> None:
        super().__init__()
        self.value = 0.5

    async def sample(self, holdings: Sequence[Holding]) -> dict[Any, list[GPUSample]]:
        return {
            holding_key(h): [GPUSample(str(d), self.value, 1 << 30) for d in h.devices]
            for h in holdings
        }


def make_monitor() -> tuple[GPUMonitor, Load]:
    book = GPUAllocator()
    for i, user in enumerate(USERS):
        book.claim(server_key(user, ""), [i], Holder(user, "server", "", "A100", time.time()))

    async def capacity() -> tuple[dict[str, GPUCapacity], str]:
        return {"a100": GPUCapacity(free=1, total=4, largest_free=None)}, ""

    spawner = SimpleNamespace(
        user=SimpleNamespace(settings={}),
        gpu_capacity=capacity,
        gpu_policy=SimpleNamespace(
            gpu_types={"a100": SimpleNamespace(display_name="A100", resource_name="nvidia.com/gpu")}
        ),
    )
    source = Load()
    return GPUMonitor(spawner, Ledger(book), source, None, UsageStore(None), 30.0), source


def users(built: fleet.Built) -> set[str]:
    return {key[0] for key, _ in built.rows}


def test_a_request_never_waits_for_a_build_and_stopped_rows_go_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    building = threading.Event()
    release = threading.Event()
    real_build = fleet.build

    def slow_build(*args: Any) -> fleet.Built:
        building.set()
        assert release.wait(10)
        return real_build(*args)

    async def scenario() -> None:
        monitor, source = make_monitor()
        await monitor.tick(time.time())
        cache = FleetCache(monitor, hub_templates(), "/hub/", lambda: {"ann": ["students"]})
        first = await cache.current()  # the first view waits for the first build
        assert first.version == monitor.version and users(first) == set(USERS)
        view, parts = cache.page(first, "ann", see_all=False)
        assert [r.user for r in view.rows] == ["ann"] and 'data-user="bob"' not in parts[
            "rows_html"
        ]
        view, parts = cache.page(first, "root", see_all=True)
        assert parts["rows_html"].count("gpuhub-holder") == 3 and view.groups[0][:2] == (
            "students",
            1,
        )

        monkeypatch.setattr(fleet, "build", slow_build)
        source.value = 0.9
        await monitor.tick(time.time() + 30)  # starts a build in a thread
        assert await asyncio.to_thread(building.wait, 10)
        started = time.perf_counter()
        served = await cache.current()
        assert time.perf_counter() - started < 0.05 and served is first  # not the running build
        # A server stopped meanwhile (as GPUMonitor.stop_server does) leaves the page at once.
        monitor.tracks.pop(("bob", "server", ""))
        monitor._changed(removed=("bob", "server", ""))
        view, parts = cache.page(served, "root", see_all=True)
        assert 'data-user="bob"' not in parts["rows_html"] and "bob" not in {
            r.user for r in view.rows
        }
        release.set()
        assert cache._task is not None
        await cache._task
        latest = await cache.current()
        assert latest.version == monitor.version and users(latest) == {"ann", "cat"}
        assert "90 %" in cache.page(latest, "ann", see_all=False)[1]["rows_html"]
        assert monitor.removed == {}  # seen by a build: nothing left to hide

    asyncio.run(scenario())


def test_a_snapshot_does_not_change_when_the_monitor_moves_on() -> None:
    async def scenario() -> None:
        monitor, source = make_monitor()
        now = time.time()
        await monitor.tick(now)
        await monitor.tick(now + 30)
        snap = snapshot(monitor, {})
        before = [(t.history, t.samples) for t in snap.tracks]
        source.value = 0.1
        await monitor.tick(now + 60)
        assert [(t.history, t.samples) for t in snap.tracks] == before
        assert len(monitor.tracks[("ann", "server", "")].history) == 3

    asyncio.run(scenario())


def test_a_groups_gpu_hours_are_its_members_exact_sum_rounded_with_the_unit() -> None:
    """Members with 0.14 GPU-hours each: the group says 0.28 GPU-h (the sum of the exact
    figures, rounded once), not 0.3 beside two rows of 0.1, and every figure says its unit."""

    async def scenario() -> None:
        monitor, _ = make_monitor()
        now = time.time()
        for user in ("ann", "bob"):
            monitor.store.add(user, "A100", 0.14 * 3600, now)
        await monitor.tick(now)
        cache = FleetCache(
            monitor, hub_templates(), "/hub/", lambda: {u: ["students"] for u in USERS}
        )
        view, parts = cache.page(await cache.current(), "root", see_all=True)
        (group,) = view.groups
        assert group[0] == "students" and abs(group[2] - 0.28) < 1e-9
        for user in ("ann", "bob"):
            assert f'<td>{user}</td><td class="text-end">0.14 GPU-h</td>' in parts["hours_html"]
        html = hub_templates().from_string(
            '{% from "gpuhub_fleet_hours.html" import gpu_hours %}{{ gpu_hours(value) }}'
        )
        assert await html.render_async(value=group[2]) == "0.28 GPU-h"

    asyncio.run(scenario())


def test_after_a_stop_the_page_waits_for_a_build_with_held_and_free_as_of_now() -> None:
    """An admin's stop rebuilds the page from what the ledger and the book say now (held and
    free by type, the rows), so the page they come back to is not a tick behind."""

    async def scenario() -> None:
        monitor, _ = make_monitor()
        free = {"value": 1}

        async def capacity() -> tuple[dict[str, GPUCapacity], str]:
            return {"a100": GPUCapacity(free=free["value"], total=4, largest_free=None)}, ""

        monitor.spawner.gpu_capacity = capacity
        await monitor.tick(time.time())
        cache = FleetCache(monitor, hub_templates(), "/hub/", lambda: {})
        before = await cache.current()
        assert before.view.types == [("A100", 3, 1, 4, 0)]
        book = monitor.ledger.source
        book.release(server_key("bob", ""))  # as stop_server's user.stop leaves the book
        free["value"] = 2
        monitor.tracks.pop(("bob", "server", ""))
        await monitor._refresh_now()
        monitor._changed(removed=("bob", "server", ""))
        after = await cache.up_to_date()
        assert after.version == monitor.version
        assert after.view.types == [("A100", 2, 2, 4, 0)]
        assert "bob" not in {r.user for r in after.view.rows}

    asyncio.run(scenario())


def test_budget_rows_are_rendered_once_per_build_and_a_viewer_sees_only_their_own() -> None:
    """With gpu_hours set, every budget's row is HTML in the build (as the holders' rows are):
    an admin's request joins nothing new, a user's picks their own line, never a pool's or
    another user's."""

    async def scenario() -> None:
        monitor, _ = make_monitor()
        groups = {"ann": ["lab"], "bob": ["lab"], "cat": []}
        hub_users = {
            u: SimpleNamespace(name=u, groups=[SimpleNamespace(name=g, users=[]) for g in gs])
            for u, gs in groups.items()
        }
        config = BudgetConfig.from_config(
            {
                "default": {"hours": 10, "per": "week"},
                "groups": {"lab": {"hours": 100, "per": "week", "shared": True}},
            }
        )
        monitor.spawner.user.settings["users"] = hub_users
        monitor.spawner.gpu_budget_config = lambda: config
        now = time.time()
        await monitor.tick(now)
        await monitor.tick(now + 60)  # a minute of one GPU each, charged to each budget
        cache = FleetCache(monitor, hub_templates(), "/hub/", lambda: groups)
        built = await cache.current()
        lines = re.findall(r'data-scope="(\w+)" data-name="(\w+)"', built.budgets_html)
        assert lines == [("group", "lab"), ("user", "ann"), ("user", "bob"), ("user", "cat")]
        view, parts = cache.page(built, "root", see_all=True)
        assert parts["budgets_html"] is built.budgets_html and len(view.budgets) == 4
        view, parts = cache.page(built, "ann", see_all=False)
        assert [(b.scope, b.name) for b in view.budgets] == [("user", "ann")]
        assert re.findall(r'data-name="(\w+)"', parts["budgets_html"]) == ["ann"]
        assert "<td>the lab group&#39;s shared budget</td>" in parts["budgets_html"]
        assert cache.page(built, "dan", see_all=False)[1]["budgets_html"] == ""

    asyncio.run(scenario())
