"""The reclaim rule's validation and the idle clock's decisions, on a clock the test sets."""

from __future__ import annotations

import time

import pytest

from gpuhub.core.policy import PolicyConfigError
from gpuhub.hub.monitor.reclaim import Action, IdleClocks, ReclaimRule
from gpuhub.hub.monitor.usage import Notice, UsageStore

RULE = {"after": 100, "utilization_below": 0.05, "warn": 20, "max_postpones": 1}
KEY = ("ann", "", "1.000")


def test_unset_or_empty_means_off() -> None:
    assert ReclaimRule.from_config(None) is None
    assert ReclaimRule.from_config({}) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2h", "must be a dict"),
        ({**RULE, "afterr": 1}, "unknown keys ['afterr']"),
        ({**RULE, "after": 0}, "gpu_idle_reclaim.after must be a number of seconds"),
        ({**RULE, "warn": "900"}, "gpu_idle_reclaim.warn must be a number of seconds"),
        ({**RULE, "utilization_below": 5}, "utilization_below must be a fraction"),
        ({**RULE, "exempt_groups": "staff"}, "exempt_groups must be a list"),
        ({**RULE, "max_postpones": -1}, "max_postpones must be a whole number"),
        ({**RULE, "max_postpones": True}, "max_postpones must be a whole number"),
    ],
)
def test_admin_mistakes_are_named(value: object, words: str) -> None:
    with pytest.raises(PolicyConfigError, match=None) as info:
        ReclaimRule.from_config(value)
    assert words in str(info.value)


def clocks() -> IdleClocks:
    rule = ReclaimRule.from_config({**RULE, "exempt_groups": ["staff"]})
    assert rule is not None and rule.exempt(["x", "staff"]) and not rule.exempt(["x"])
    return IdleClocks(rule)


def test_idle_is_warned_after_after_and_stopped_after_warn() -> None:
    c = clocks()
    assert c.observe(KEY, True, 0) is Action.NONE
    assert c.observe(KEY, True, 99) is Action.NONE
    assert c.observe(KEY, True, 100) is Action.WARN
    assert c.clocks[KEY].as_json(c.rule, 110)["seconds_left"] == 10
    assert c.observe(KEY, True, 119) is Action.NONE
    assert c.observe(KEY, True, 120) is Action.STOP
    assert c.observe(KEY, True, 121) is Action.NONE  # stopped once


def test_any_busy_sample_resets_the_clock_and_lifts_a_warning() -> None:
    c = clocks()
    c.observe(KEY, True, 0)
    assert c.observe(KEY, False, 90) is Action.NONE
    assert c.observe(KEY, True, 91) is Action.NONE
    assert c.observe(KEY, True, 190) is Action.NONE  # 99 s idle since the busy sample
    assert c.observe(KEY, True, 191) is Action.WARN
    assert c.observe(KEY, False, 200) is Action.LIFT
    assert c.clocks[KEY].as_json(c.rule, 200)["warned"] is False


def test_keep_postpones_at_most_max_postpones_times() -> None:
    c = clocks()
    c.observe(KEY, True, 0)
    assert c.observe(KEY, True, 100) is Action.WARN
    assert c.postpone(KEY, 105) is None
    assert c.observe(KEY, True, 200) is Action.NONE  # the clock restarted at 105
    assert c.observe(KEY, True, 205) is Action.WARN
    refused = c.postpone(KEY, 206)
    assert refused is not None and "1 times, the most this hub allows" in refused
    assert c.observe(KEY, True, 225) is Action.STOP


def test_an_unknown_server_cannot_be_kept() -> None:
    assert "holds no GPUs" in (clocks().postpone(KEY, 0) or "")


def test_usage_store_survives_a_restart(tmp_path) -> None:
    path = tmp_path / "usage.json"
    now = time.time() // 3600 * 3600
    store = UsageStore(path)
    store.add("ann", "A100", 7200, now=now - 86_400 * 2)
    store.add("ann", "A100", 3600, now=now)
    store.add("old", "A100", 3600, now=now - 86_400 * 9)  # older than 8 days: dropped
    store.notify("ann", Notice("", now, "idle", 1, "A100"))
    store.count_reclaim("A100")
    store.count_reclaim("A100")
    again = UsageStore(path)
    assert again.reclaims == {"A100": 2}
    assert again.totals == {("ann", "A100"): 10800, ("old", "A100"): 3600}
    assert again.gpu_hours(since=now - 60) == {"ann": 1.0}
    assert again.gpu_hours(since=now - 86_400 * 7) == {"ann": 3.0}
    assert [n.reason for n in again.notices_for("ann")] == ["idle"]
    again.clear_notice("ann", "")
    assert UsageStore(path).notices_for("ann") == []


def test_a_cancelled_jobs_notice_is_kept_a_day(tmp_path) -> None:
    path = tmp_path / "usage.json"
    now = time.time()
    store = UsageStore(path)
    store.notify("ann", Notice("", now, "node 3 down", 1, "A100", "root", "job", ("nb-1a2b3c",)))
    store.notify("ann", Notice("", now, "idle", 1, "A100"))  # her server: another notice
    again = UsageStore(path)
    assert [n.kind for n in again.notices_for("ann")] == ["job", "server"]
    assert again.notices_for("ann")[0].jobs == ("nb-1a2b3c",)
    assert [n.kind for n in again.notices_for("ann", now + 86_400 + 1)] == ["server"]
    again._dirty = True
    again.save(now + 86_400 + 1)  # a day later the job's notice is gone for good
    assert [n.kind for n in UsageStore(path).notices_for("ann", now)] == ["server"]


def test_a_dismissed_notice_stays_dismissed_across_restarts(tmp_path) -> None:
    """Closed by its user, a notice is shown no more (hub pages, the lab), after a restart
    too; the jobs backend still reads it (a cancelled job says by whom and why)."""
    path = tmp_path / "usage.json"
    now = time.time()
    store = UsageStore(path)
    store.notify("ann", Notice("", now, "node 3 down", 1, "A100", "root"))
    store.notify("ann", Notice("train", now, "node 3 down", 1, "A100", "root", "job", ("t-1",)))
    assert store.dismiss("ann", "job/train") and not store.dismiss("ann", "nope")
    again = UsageStore(path)
    assert [n.kind for n in again.notices_for("ann", shown=True)] == ["server"]
    assert [n.dismissed for n in again.notices_for("ann")] == [False, True]
    assert again.dismiss("ann", "server/")  # the default server's notice
    assert UsageStore(path).notices_for("ann", shown=True) == []
