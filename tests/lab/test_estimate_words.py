"""A waiting holding's estimated start in the lab's words: the same sentence the spawn page
says (gpuhub.hub.monitor.eta.Estimate.sentence), written by the lab server from the hub's
JSON (gpuhub.core.words.start_estimate, gpuhub_lab.holdings.with_estimates)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuhub.core import words
from gpuhub.hub.monitor.eta import Estimate
from gpuhub_lab.holdings import with_estimates

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("likely", "by", "latest"),
    [
        (NOW + 2.5 * 3600, NOW + 3 * 3600 + 600, NOW + 4 * 3600),  # all today
        (NOW + 1800, NOW + 3600, None),  # nothing bounds it
        (NOW + 11 * 3600, NOW + 13 * 3600, NOW + 30 * 3600),  # by and latest tomorrow
        (NOW - 60, NOW, None),  # within moments
    ],
)
def test_the_lab_says_what_the_spawn_page_says(
    likely: float, by: float, latest: float | None
) -> None:
    estimate = Estimate(likely, by, latest, ("You are 1st in line.",))
    said = words.start_estimate(estimate.as_json(), NOW)
    assert said == estimate.sentence(NOW)


def test_the_sentence_reads_as_the_hub_writes_it() -> None:
    estimate = Estimate(NOW + 2.5 * 3600, NOW + 3 * 3600 + 600, NOW + 30 * 3600, ())
    assert words.start_estimate(estimate.as_json(), NOW) == (
        "Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC, and no later than "
        "30 Nov 2026, 18:00 UTC."
    )


@pytest.mark.parametrize(
    "estimate",
    [
        None,
        "soon",
        {},
        {"likely": "2026-11-29T14:30:00Z"},
        {"likely": 5, "by": "2026-11-29T15:00:00Z"},
        {"likely": "2026-11-29T14:30:00", "by": "2026-11-29T15:00:00"},  # no zone
        {"likely": "tomorrow", "by": "2026-11-29T15:00:00Z"},
    ],
)
def test_no_sentence_for_what_is_not_an_estimate(estimate: object) -> None:
    assert words.start_estimate(estimate, NOW) is None


def test_each_waiting_holding_gets_its_words_and_held_ones_none() -> None:
    waiting = {
        "kind": "job",
        "name": "train-1",
        "waiting": "waiting in line",
        "estimate": Estimate(NOW + 1800, NOW + 3600, None, ("x",)).as_json(),
    }
    held = {"kind": "server", "name": "", "waiting": None, "estimate": None}
    said = with_estimates([waiting, held], NOW)
    assert said[0]["estimate_text"] == (
        "Likely to start around 12:30 UTC, 4 times in 5 by 13:00 UTC."
    )
    assert said[0]["estimate"] == waiting["estimate"] and said[0]["name"] == "train-1"
    assert said[1]["estimate_text"] is None
    assert "estimate_text" not in waiting  # the hub's answer is not changed in place
