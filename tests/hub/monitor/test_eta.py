"""The estimator's maths on injected clocks (gpuhub.hub.monitor.eta) and its learned state file.

What a waiter is told must follow from the facts: a hard end bounds ``latest`` and never
less; a reclaim clock pulls ``likely`` and ``by`` in but is never called certain; a hold
that has lasted long is not treated as a fresh one; learning moves a user's curve, and their
group's, and survives a restart while a damaged file is set aside.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpuhub.hub.monitor.eta import (
    Held,
    Line,
    Waiter,
    clock,
    estimate,
)
from gpuhub.hub.monitor.eta_feed import EtaFeed, durations_path
from gpuhub.hub.monitor.hold_durations import PRIOR_MEDIAN, Curve, Durations

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600.0


def prior() -> Curve:
    return Durations().curve("u", [], "A6000")


def test_the_prior_is_a_sensible_first_guess_and_survival_conditions_on_age() -> None:
    curve = prior()
    assert curve.learned == 0
    assert curve.quantile(0.5) == pytest.approx(PRIOR_MEDIAN, rel=0.02)
    assert curve.quantile(0.8) > 2 * curve.quantile(0.5)
    # A hold 3 hours old has more to go than the median fresh one's remaining 2 hours
    # minus 3: a heavy tail means the old ones are the long ones.
    assert curve.median_left(3 * HOUR) > HOUR
    assert curve.median_left(3 * HOUR) != pytest.approx(curve.quantile(0.5) - 3 * HOUR)
    # Quantiles and the CDF agree.
    for p in (0.1, 0.5, 0.8, 0.95):
        assert curve.at(curve.quantile(p)) == pytest.approx(p, abs=1e-6)


def test_learning_moves_the_user_first_then_their_group_and_type() -> None:
    durations = Durations()
    for _ in range(40):
        durations.learn("ann", ["lab"], "A6000", 600)
    ann = durations.curve("ann", ["lab"], "A6000")
    peer = durations.curve("ben", ["lab"], "A6000")
    stranger = durations.curve("cy", ["other"], "A6000")
    other_type = durations.curve("ann", ["lab"], "T4")
    assert ann.learned == 40
    assert ann.quantile(0.5) == pytest.approx(600, rel=0.15)
    assert ann.quantile(0.5) < peer.quantile(0.5) <= stranger.quantile(0.5) < PRIOR_MEDIAN
    assert other_type.quantile(0.5) == pytest.approx(PRIOR_MEDIAN, rel=0.02)


def test_holds_still_running_count_as_long_ones_not_as_unseen() -> None:
    """Learning only from ended holds learns the long ones last: running holds count as
    holds longer than their age (right-censoring), and move the curve later."""
    durations = Durations()
    for _ in range(20):
        durations.learn("ann", ["lab"], "A6000", 600)
    ended_only = durations.curve("ann", ["lab"], "A6000").quantile(0.5)
    durations.renew([("ann", ["lab"], "A6000", 5 * HOUR)] * 40)
    with_running = durations.curve("ann", ["lab"], "A6000")
    assert with_running.quantile(0.5) > 5 * HOUR > ended_only
    assert with_running.learned == 20  # the words count the holds that ended


def test_a_budget_grace_bounds_latest_and_the_estimate_never_goes_past_it() -> None:
    held = Held(1, NOW - HOUR, prior(), hard_end=NOW + 600, hard_why="budget")
    line = Line("A6000", 1, (held,), (Waiter("bob", 1, NOW, prior()),), slack=60)
    found, _ = estimate(line, NOW)
    bob = found["bob"]
    assert bob.latest is not None and NOW + 600 < bob.latest <= NOW + 700
    assert bob.likely <= bob.by <= bob.latest
    assert any("GPU-hours" in s for s in bob.because)
    assert bob.as_json()["latest"].endswith("Z")


def test_an_idle_holder_pulls_the_estimate_in_but_is_never_certain() -> None:
    held = Held(1, NOW - 5 * HOUR, prior(), soft_end=NOW + 30)
    line = Line("A6000", 1, (held,), (Waiter("bob", 1, NOW, prior()),))
    bob = estimate(line, NOW)[0]["bob"]
    assert NOW + 30 <= bob.likely <= bob.by <= NOW + 60
    assert bob.latest is None
    assert any("idle" in s for s in bob.because)
    assert any("No later time is certain" in s for s in bob.because)


def test_the_line_is_served_in_order_and_someone_free_starts_now() -> None:
    busy = Held(1, NOW - 600, prior())
    line = Line(
        "A6000",
        2,
        (busy,),
        (Waiter("first", 1, NOW - 60, prior()), Waiter("second", 1, NOW, prior())),
    )
    found, newcomer = estimate(line, NOW, prior())
    assert found["first"].likely == NOW  # one GPU is free
    assert found["first"].latest == pytest.approx(NOW, abs=60)
    assert found["second"].likely >= found["first"].likely
    assert newcomer is not None and newcomer.likely >= found["second"].likely
    assert "2nd in line" in found["second"].because[0]


def test_a_fair_line_gives_no_latest_and_nothing_hard_gives_none() -> None:
    held = Held(1, NOW, prior(), hard_end=NOW + 60, hard_why="budget")
    fair = Line("A6000", 1, (held,), (Waiter("bob", 1, NOW, prior()),), fair=True)
    assert estimate(fair, NOW)[0]["bob"].latest is None
    plain = Line("A6000", 1, (Held(1, NOW, prior()),), (Waiter("bob", 1, NOW, prior()),))
    assert estimate(plain, NOW)[0]["bob"].latest is None


def test_the_same_facts_give_the_same_answer() -> None:
    line = Line(
        "A6000",
        4,
        tuple(Held(1, NOW - i * 900, prior()) for i in range(4)),
        tuple(Waiter(i, 1 + i % 2, NOW, prior()) for i in range(20)),
    )
    assert estimate(line, NOW)[0] == estimate(line, NOW)[0]


def test_words_use_the_hubs_one_way_to_write_a_moment() -> None:
    assert clock(NOW + 1800, NOW) == "08:30 UTC"
    assert clock(NOW + 86400, NOW) == "16 Jan 2027, 08:00 UTC"
    held = Held(1, NOW, prior(), hard_end=NOW + 1800, hard_why="budget")
    bob = estimate(Line("A6000", 1, (held,), (Waiter("bob", 1, NOW, prior()),)), NOW)[0]["bob"]
    said = bob.sentence(NOW)
    assert said.startswith("Likely to start around ") and "no later than 08:3" in said


def test_learned_durations_survive_a_restart_and_a_damaged_file_is_set_aside(
    tmp_path: Path,
) -> None:
    path = durations_path(tmp_path / "usage.json")
    assert path is not None and path.name == "usage-hold-durations.json"
    feed = EtaFeed(path)
    feed.durations.learn("ann", ["lab"], "A6000", 900)
    feed._dirty = True
    feed.save()
    again = EtaFeed(path)
    assert again.durations.curve("ann", ["lab"], "A6000").learned == 1
    path.write_text(json.dumps({"version": 1, "bins": [1, 2], "counts": {}}))
    fresh = EtaFeed(path)
    assert fresh.durations.counts == {}
    assert not path.exists() and list(tmp_path.glob("usage-hold-durations.json.damaged-*"))


def test_bad_counts_are_named() -> None:
    good = Durations()
    good.learn("a", [], "T", 60)
    data = good.as_json()
    data["counts"]["type\x1fT"] = [-1]
    _, problems = Durations.from_json(data)
    assert problems and "numbers of 0 or more" in problems[0]
    assert math.isfinite(Durations.from_json(good.as_json())[0].curve("a", [], "T").quantile(0.5))


def test_a_hold_idle_reclaim_cut_short_is_learned_as_a_longer_one() -> None:
    ended, cut = Durations(), Durations()
    for _ in range(30):
        ended.learn("ann", ["lab"], "A6000", HOUR)
        cut.learn("ann", ["lab"], "A6000", HOUR, cut_short=True)
    ended.renew()
    cut.renew()
    # Ended by its owner: an hour is how long ann's holds last. Cut short by reclaim: they
    # would have lasted longer, so no busy hold of hers is expected to end at an hour.
    assert ended.curve("ann", ["lab"], "A6000").quantile(0.5) == pytest.approx(HOUR, rel=0.15)
    assert cut.curve("ann", ["lab"], "A6000").quantile(0.5) > 1.5 * HOUR
    assert cut.curve("ann", ["lab"], "A6000").at(HOUR) < 0.05
    assert sum(cut.counts["user\x1fann\x1fA6000"]) == pytest.approx(30.0)
