"""Running work past a used-up GPU-hour budget: stopped after the grace ("refuse"), or only
once someone within budget waits for its GPUs ("idle_only"); decisions on injected clocks."""

from __future__ import annotations

from gpuhub.core.budgets import BudgetConfig
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.budget_usage import BudgetUsage, ExtraHours, state_for
from gpuhub.hub.monitor.budget_watch import BudgetWatch

CONFIG = BudgetConfig.from_config({"default": {"hours": 1, "per": "week"}, "grace": 60})
NOW = 1_795_000_000.0


def test_grace_then_stop_and_idle_only_waits_for_someone_within_budget() -> None:
    assert CONFIG is not None
    usage = BudgetUsage(None)
    usage.charge("ann", 3600.0, NOW, CONFIG.default)
    states = {u: state_for(u, [], CONFIG, usage, NOW) for u in ("ann", "bob")}
    states = {u: s for u, s in states.items() if s is not None}
    held = [Holding("ann", "server", "", 1, "sim")]
    waiting = [Holding("bob", "server", "", 1, "sim", waiting="line")]
    refuse = BudgetWatch(60, "refuse")
    assert refuse.observe(states, held, [], 0.0) == []
    assert refuse.observe(states, held, [], 59.0) == []
    assert refuse.observe(states, held, [], 60.0) == held
    idle_only = BudgetWatch(60, "idle_only")
    assert idle_only.observe(states, held, [], 0.0) == []
    assert idle_only.observe(states, held, [], 100.0) == []  # nobody waits: it goes on
    assert idle_only.observe(states, held, waiting, 101.0) == held
    # A grant lifts it: the grace starts again next time.
    usage.grant(states["ann"].account, ExtraHours(1, "x", "root", NOW))
    fresh = {"ann": state_for("ann", [], CONFIG, usage, NOW)}
    assert refuse.observe(fresh, held, [], 200.0) == [] and not refuse.over_since  # type: ignore[arg-type]
