"""gpu_hours as the admin writes it: mistakes in one sentence, periods across daylight saving."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from gpuhub.core.budgets import (
    BudgetConfig,
    BudgetConfigError,
    budget_text,
    hours_words,
    lasts_words,
    state_of,
    this_period,
)
from gpuhub.core.words import duration

BERLIN = ZoneInfo("Europe/Berlin")
CONFIG = {
    "default": {"hours": 20, "per": "week"},
    "groups": {
        "staff": {"hours": 500, "per": "month", "shared": True},
        "students": {"hours": 0.5, "per": "day"},
    },
    "period_start": "monday 00:00",
    "timezone": "Europe/Berlin",
    "at_limit": "idle_only",
    "grace": 60,
}


def at(*args: int) -> float:
    return datetime(*args, tzinfo=BERLIN).timestamp()


def local(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, BERLIN)


def test_config_read() -> None:
    config = BudgetConfig.from_config(CONFIG)
    assert config is not None
    assert config.at_limit == "idle_only" and config.grace == 60
    assert config.budget_for([]) is config.default
    assert config.budget_for(["staff"]).shared  # type: ignore[union-attr]
    # 500 per month (16.4 a day) is more than 0.5 a day: the most generous budget applies.
    assert config.budget_for(["students", "staff"]).name == "staff"  # type: ignore[union-attr]
    assert config.budget_for(["students"]).hours == 0.5  # type: ignore[union-attr]
    assert BudgetConfig.from_config(None) is None and BudgetConfig.from_config({}) is None
    only_groups = BudgetConfig.from_config({"groups": {"x": {"hours": 1, "per": "day"}}})
    assert only_groups is not None and only_groups.budget_for(["y"]) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([1], "gpu_hours must be a dict"),
        ({"weekly": 1}, "gpu_hours has unknown keys weekly; expected at_limit"),
        ({"default": {"hours": "ten", "per": "week"}}, "['default']['hours'] must be a number"),
        ({"default": {"hours": -1, "per": "week"}}, "must be a number of GPU-hours"),
        ({"default": {"hours": 1, "per": "fortnight"}}, 'must be "day", "week" or "month", not'),
        ({"default": {"hours": 1, "per": "week", "shared": True}}, "for group budgets only"),
        ({"groups": {"a": {"hours": 1, "per": "day", "shared": "yes"}}}, "must be True or False"),
        ({"groups": {"a": {"hours": 1}}}, "['groups']['a']['per'] must be"),
        ({"groups": [1]}, "['groups'] must map group names to budgets"),
        ({"timezone": "Mars/Olympus"}, "must be an IANA time zone"),
        ({"period_start": "monday"}, 'must be "HH:MM", "<weekday> HH:MM"'),
        ({"period_start": "25:00"}, "must name a time from 00:00 to 23:59"),
        ({"period_start": "31 00:00"}, "day of the month from 1 to 28"),
        ({"period_start": "funday 00:00"}, "must begin with a weekday"),
        ({"at_limit": "warn"}, 'must be "refuse" or "idle_only", not'),
        ({"grace": "10m"}, "['grace'] must be a number of seconds"),
    ],
)
def test_mistakes_are_one_sentence(value: object, words: str) -> None:
    with pytest.raises(BudgetConfigError) as raised:
        BudgetConfig.from_config(value)
    message = str(raised.value)
    assert words in message
    assert message.count(". ") == 0 and message.endswith(".")


def test_week_across_daylight_saving_in_berlin() -> None:
    budget = BudgetConfig.from_config(CONFIG).default  # type: ignore[union-attr]
    assert budget is not None
    # Clocks go back on Sunday 25 Oct 2026: the week of Monday 19 Oct has 169 hours.
    start, end = budget.period(at(2026, 10, 25, 12, 0))
    assert local(start) == datetime(2026, 10, 19, 0, 0, tzinfo=BERLIN)
    assert local(end).replace(tzinfo=None) == datetime(2026, 10, 26, 0, 0)
    assert end - start == 169 * 3600
    # The next week begins at midnight by the wall clock again, and has 168 hours.
    start2, end2 = budget.period(at(2026, 10, 26, 0, 0))
    assert start2 == end and end2 - start2 == 168 * 3600
    # A moment before Monday 00:00 belongs to the week before.
    assert budget.period(end - 1)[0] == start
    assert budget.resets_words(at(2026, 10, 25, 12, 0)) == "Monday 00:00 Europe/Berlin"
    assert budget.resets_at(at(2026, 10, 25, 12, 0)) == "2026-10-26T00:00:00+01:00"
    # Spring forward (29 Mar 2026): 167 hours.
    start, end = budget.period(at(2026, 3, 25, 12, 0))
    assert end - start == 167 * 3600


def test_month_and_day_periods() -> None:
    config = BudgetConfig.from_config(
        {
            **CONFIG,
            "groups": {
                "staff": {"hours": 500, "per": "month", "shared": True, "period_start": "15 06:00"},
                "students": {
                    "hours": 0.5,
                    "per": "day",
                    "timezone": "UTC",
                    "period_start": "18:30",
                },
            },
        }
    )
    assert config is not None
    staff, students = config.groups["staff"], config.groups["students"]
    start, end = staff.period(at(2026, 12, 20, 0, 0))
    assert (local(start).month, local(start).day, local(start).hour) == (12, 15, 6)
    assert (local(end).year, local(end).month, local(end).day) == (2027, 1, 15)
    start, _ = staff.period(at(2026, 12, 15, 5, 59))  # before 06:00 on the 15th: last month
    assert (local(start).month, local(start).day) == (11, 15)
    assert staff.resets_words(at(2026, 12, 20, 0, 0)) == "15 Jan 06:00 Europe/Berlin"
    # The default month begins on the 1st (the weekday of period_start is for weeks).
    monthly = BudgetConfig.from_config({"default": {"hours": 1, "per": "month"}})
    assert monthly is not None and monthly.default is not None
    start, end = monthly.default.period(datetime(2027, 2, 10, tzinfo=ZoneInfo("UTC")).timestamp())
    assert end - start == 28 * 86400
    utc = ZoneInfo("UTC")
    start, end = students.period(datetime(2026, 6, 1, 18, 29, tzinfo=utc).timestamp())
    assert datetime.fromtimestamp(start, utc) == datetime(2026, 5, 31, 18, 30, tzinfo=utc)
    assert end - start == 86400
    assert staff.period_key(at(2026, 12, 20, 0, 0)) == f"month@{int(at(2026, 12, 15, 6, 0))}"
    # A day's budget resets within the day: "tomorrow" (or "today"), never a weekday that
    # reads as a week away.
    at_utc = datetime(2026, 6, 1, 12, 0, tzinfo=utc).timestamp()  # a Monday
    assert students.resets_words(at_utc) == "today 18:30 UTC"
    assert students.resets_words(at_utc + 7 * 3600) == "tomorrow 18:30 UTC"
    daily = BudgetConfig.from_config({"default": {"hours": 1, "per": "day"}})
    assert daily is not None and daily.default is not None
    assert daily.default.resets_words(at_utc) == "tomorrow 00:00 UTC"
    assert daily.default.resets_words(at_utc - 12 * 3600) == "tomorrow 00:00 UTC"


def test_words() -> None:
    assert (
        budget_text(14.2, 20, "week", "Monday 00:00 Europe/Berlin")
        == "14.2 of 20 GPU-hours used this week; resets Monday 00:00 Europe/Berlin"
    )
    assert budget_text(0, 1, "day", "tomorrow 00:00 UTC") == (
        "0 of 1 GPU-hour used today; resets tomorrow 00:00 UTC"
    )
    assert this_period("day") == "today" and this_period("month") == "this month"
    # How long what is left lasts, in a unit a person says (the form: "about 0.01 hours").
    assert lasts_words(0.01) == "about 36 seconds" and lasts_words(0.4) == "about 24 minutes"
    assert lasts_words(1) == "about 1 hour" and lasts_words(3.46) == "about 3.5 hours"
    assert lasts_words(12.6) == "about 13 hours" and lasts_words(200) == "about 8 days"
    assert hours_words(0.01) == "0.01" and hours_words(0.00833) == "0.0083"
    assert hours_words(0) == "0" and hours_words(1.5) == "1.5" and hours_words(123.45) == "123.5"
    # A grace of one second reads as such in the 100 % notice.
    assert duration(1) == "1 second" and duration(1.5) == "1.5 seconds"
    assert state_of(0, 10) == "ok" and state_of(8, 10) == "warning" and state_of(10, 10) == "over"
