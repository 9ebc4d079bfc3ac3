"""GPU-hour budget usage: charged once from what the monitor measured, kept across restarts
and damaged files, never charged twice when the wall clock jumps (injected clocks)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuhub.core.budgets import BudgetConfig
from gpuhub.hub.ledger.budget_usage import BudgetUsage, ExtraHours, account_of, state_for
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, server_key
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.monitor.usage import UsageStore
from gpuhub.hub.monitor.utilization import NoUtilization

CONFIG = BudgetConfig.from_config(
    {
        "default": {"hours": 1, "per": "week"},
        "groups": {"staff": {"hours": 2, "per": "day", "shared": True}},
        "timezone": "Europe/Berlin",
        "grace": 60,
    }
)
NOW = 1_795_000_000.0  # a Thursday, mid-week in Berlin


def test_charge_own_and_shared_accounts_and_grants(tmp_path: Path) -> None:
    assert CONFIG is not None
    usage = BudgetUsage(tmp_path / "b.json")
    week, staff = CONFIG.default, CONFIG.groups["staff"]
    assert week is not None
    usage.charge("ann", 2880.0, NOW, week)  # 0.8 h of 1 h
    usage.charge("bob", 3600.0, NOW, staff)
    usage.charge("cy", 3600.0, NOW, staff)
    ann = state_for("ann", [], CONFIG, usage, NOW)
    assert ann is not None and ann.state == "warning" and ann.used_hours == pytest.approx(0.8)
    pool = state_for("bob", ["staff"], CONFIG, usage, NOW)
    assert pool is not None and pool.account[:2] == ("group", "staff") and pool.over
    assert pool.as_json()["used_hours"] == 2.0 and pool.as_json()["left_hours"] == 0.0
    # An admin's extra hour: the pool is within budget again, and says why.
    usage.grant(pool.account, ExtraHours(1.0, "deadline", "root", NOW))
    pool = state_for("bob", ["staff"], CONFIG, usage, NOW)
    assert pool is not None and not pool.over and pool.as_json()["extra_hours"] == 1.0
    assert pool.as_json()["grants"][0]["reason"] == "deadline"
    assert pool.text.startswith("2 of 3 GPU-hours used today; resets ")
    assert state_for("dee", ["staff", "other"], None, usage, NOW) is None


def test_usage_survives_a_restart_and_a_damaged_file_is_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert CONFIG is not None and CONFIG.default is not None
    path = tmp_path / "gpuhub-budgets.json"
    usage = BudgetUsage(path, half_life=3600)
    usage.charge("ann", 900.0, NOW, CONFIG.default)
    usage.tell(account_of("ann", CONFIG.default, NOW), 80)
    assert usage.switched_on(NOW) == NOW and usage.switched_on(NOW + 60) == NOW
    usage.save(NOW)
    again = BudgetUsage(path, half_life=3600)
    assert again.used(account_of("ann", CONFIG.default, NOW)) == 900.0
    assert again.since == NOW  # budgets were switched on once, not at each start
    assert not again.tell(account_of("ann", CONFIG.default, NOW), 80)  # told once per period
    assert again.decayed_seconds("ann", NOW + 3600) == pytest.approx(450.0)
    assert again.decayed_seconds("ann", NOW - 100) == 900.0  # a clock set back: no growth
    # Damaged: one bad row among good ones. The good ones are kept, the file set aside.
    data = json.loads(path.read_text())
    data["accounts"].append(["user", "bob", "week@1", "lots"])
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.ERROR, logger="gpuhub.hub.ledger.budget_usage"):
        kept = BudgetUsage(path)
    assert kept.used(account_of("ann", CONFIG.default, NOW)) == 900.0
    [aside] = tmp_path.glob("gpuhub-budgets.json.damaged-*")
    [line] = [r.getMessage() for r in caplog.records]
    assert str(aside) in line and str(path) in line
    path.write_text("{not json")
    assert BudgetUsage(path).accounts == {}
    assert len(list(tmp_path.glob("gpuhub-budgets.json.damaged-*"))) == 2


def monitor(usage: BudgetUsage) -> GPUMonitor:
    """ann holds 2 GPUs of a workstation's book; her budget is the default (1 h a week)."""
    book = GPUAllocator()
    book.claim(server_key("ann", ""), [0, 1], Holder("ann", "server", "", "sim", NOW - 60))
    ann = SimpleNamespace(name="ann", groups=[], spawners={})

    async def capacity() -> tuple[dict[str, Any], str]:
        return {}, ""

    spawner = SimpleNamespace(
        user=SimpleNamespace(settings={"users": {"ann": ann}}),
        gpu_capacity=capacity,
        gpu_policy=SimpleNamespace(gpu_types={}),
        gpu_budget_config=lambda: CONFIG,
    )
    return GPUMonitor(spawner, Ledger(book), NoUtilization(), None, UsageStore(None), 30.0, usage)


def test_wall_clock_jumps_neither_charge_twice_nor_forgive() -> None:
    """Charged: what the monotonic clock measured between ticks, each interval once. The wall
    clock only says which period the seconds belong to."""
    assert CONFIG is not None and CONFIG.default is not None
    usage = BudgetUsage(None)
    mon = monitor(usage)
    account = account_of("ann", CONFIG.default, NOW)

    async def ticks() -> None:
        await mon.tick(NOW, 1000.0)  # the first tick of a run charges nothing
        assert usage.used(account) == 0.0
        await mon.tick(NOW + 30, 1030.0)
        assert usage.used(account) == 60.0  # 2 GPUs x 30 s
        await mon.tick(NOW - 3600, 1060.0)  # wall clock set back an hour
        assert usage.used(account) == 120.0
        await mon.tick(NOW + 7200, 1090.0)  # and forward two hours: still 30 s measured
        assert usage.used(account) == 180.0
        await mon.tick(NOW + 7230, 5000.0)  # a stalled hub: at most 3 intervals
        assert usage.used(account) == 180.0 + 2 * 90.0

    asyncio.run(ticks())
    assert mon.store.totals[("ann", "sim")] == 360.0  # the fleet's GPU-seconds: the same
    # A new hub process (a restart after a day down): its first tick charges nothing.
    again = monitor(usage)
    asyncio.run(again.tick(NOW + 86400, 10.0))
    assert usage.used(account) == 360.0


def test_budget_sentences_read_right() -> None:
    """What users read of their budgets: the refusal, the notices, the form's sentence, swept
    by the same checker as every other message (tests/hub/test_message_sweep.py)."""
    from gpuhub.core.policy import Policy
    from gpuhub.hub.form import _budget_sentence, render_form
    from tests.support.messages import loose_stop, problems, visible_text

    assert CONFIG is not None and CONFIG.default is not None
    said = []
    for at_limit in ("refuse", "idle_only"):
        config = BudgetConfig(CONFIG.default, CONFIG.groups, at_limit, 60)
        usage = BudgetUsage(None)
        for user, groups, seconds in (("ann", [], 3000.0), ("bob", ["staff"], 8000.0)):
            usage.charge(user, seconds, NOW, config.budget_for(groups))
            state = state_for(user, groups, config, usage, NOW)
            assert state is not None
            said += [state.refusal(), state.notice(80, 60), state.notice(100, 0), state.text]
            said.append(_budget_sentence(state.as_json()))
            page = render_form(
                Policy.from_config(gpu_types={"a": {"display_name": "A100"}}),
                [],
                budget=state.as_json(),
            )
            shown = visible_text(page)
            assert any(m.startswith(state.text) for m in shown), shown
            said += shown
    bad = {m: problems(m) for m in said if problems(m) or loose_stop(m)}
    assert not bad, bad
    assert any("Your budget is used up" in m for m in said)
