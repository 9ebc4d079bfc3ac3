"""GPU-hour budgets: the admin's ``gpu_hours``, its periods and the words people read.

Pure: no I/O, no clock of its own (every function takes ``now``), so the hub, its pages and
the tests share one reading of the setting (docs/architecture.md, "GPU-hour budgets")::

    c.GPUSpawner.gpu_hours = {
        "default": {"hours": 20, "per": "week"},                 # each user not in a group below
        "groups": {"staff": {"hours": 500, "per": "month", "shared": True},   # one pool
                   "students": {"hours": 5, "per": "day"}},                  # each member
        "period_start": "monday 00:00",   # when periods begin (see below)
        "timezone": "Europe/Berlin",      # IANA name; periods follow its daylight saving
        "at_limit": "refuse",             # or "idle_only"
        "grace": 600,                     # seconds running work may go on past the limit
    }

``period_start`` is one of ``"HH:MM"``, ``"<weekday> HH:MM"`` (``"monday 00:00"``, ``"mon
06:00"``) or ``"<day of month 1-28> HH:MM"`` (``"1 00:00"``). A day begins at its time; a
week on its weekday (Monday when none is given); a month on its day (the 1st when none is
given). A budget may carry its own ``period_start`` and ``timezone``. The default is
``"monday 00:00"`` in ``UTC``.

One budget applies to a user: that of their group in ``groups`` (the most hours per day
when several apply), else ``default``; none when neither applies. A group budget is each
member's own unless ``"shared": True``, where the members draw on one pool.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuhub.core.policy import PolicyConfigError
from gpuhub.core.words import MONTHS

PERIODS = ("day", "week", "month")
AT_LIMIT = ("refuse", "idle_only")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Mean days in a period: to compare budgets of different periods ("the most hours per day").
_DAYS = {"day": 1.0, "week": 7.0, "month": 30.436875}
WARN_AT = 0.8  # "warning" from 80 % used
HOUR = 3600.0

_START = re.compile(r"^\s*(?:(?P<first>[A-Za-z]+|\d{1,2})\s+)?(?P<h>\d{1,2}):(?P<m>\d{2})\s*$")
_KEYS = {"default", "groups", "period_start", "timezone", "at_limit", "grace"}
_BUDGET_KEYS = {"hours", "per", "shared", "period_start", "timezone"}


class BudgetConfigError(PolicyConfigError):
    """``gpu_hours`` is invalid; the message is one sentence: what, expected, given."""


@dataclass(frozen=True)
class PeriodStart:
    """When periods begin, as written: time of day, and a weekday or day of month if given."""

    hour: int = 0
    minute: int = 0
    weekday: int | None = None  # 0 = Monday; used by weekly budgets
    day: int | None = None  # 1..28; used by monthly budgets

    @classmethod
    def parse(cls, value: Any, where: str) -> PeriodStart:
        text = value if isinstance(value, str) else None
        match = _START.match(text) if text is not None else None
        if match is None:
            raise BudgetConfigError(
                f'{where} must be "HH:MM", "<weekday> HH:MM" or "<day of month> HH:MM" '
                f'(such as "monday 00:00" or "1 06:00"), not {value!r}.'
            )
        hour, minute = int(match["h"]), int(match["m"])
        if hour > 23 or minute > 59:
            raise BudgetConfigError(f"{where} must name a time from 00:00 to 23:59, not {value!r}.")
        first = (match["first"] or "").lower()
        weekday = day = None
        if first.isdigit():
            day = int(first)
            if not 1 <= day <= 28:
                raise BudgetConfigError(
                    f"{where} must name a day of the month from 1 to 28 (every month has "
                    f"it), not {value!r}."
                )
        elif first:
            found = [
                i for i, name in enumerate(WEEKDAYS) if len(first) >= 3 and name.startswith(first)
            ]
            if len(found) != 1:
                raise BudgetConfigError(
                    f"{where} must begin with a weekday (monday to sunday) or a day of the "
                    f"month, not {value!r}."
                )
            weekday = found[0]
        return cls(hour, minute, weekday, day)

    def words(self, per: str) -> str:
        """ "Monday 00:00", "day 1 00:00", "00:00": when a ``per`` period begins."""
        clock = f"{self.hour:02d}:{self.minute:02d}"
        if per == "week":
            return f"{WEEKDAYS[self.weekday or 0].capitalize()} {clock}"
        if per == "month":
            return f"day {self.day or 1} {clock}"
        return clock


@dataclass(frozen=True)
class Budget:
    """One budget: ``hours`` per ``per`` for everyone by default, or for a group."""

    scope: str  # "default" or "group"
    name: str  # the group's name; "" for the default
    hours: float
    per: str
    shared: bool
    start: PeriodStart
    timezone: str

    @property
    def seconds(self) -> float:
        return self.hours * HOUR

    @property
    def per_day(self) -> float:
        return self.hours / _DAYS[self.per]

    def period(self, now: float) -> tuple[float, float]:
        """(start, end) of the period holding ``now``, as epoch seconds. Periods begin at a
        wall-clock time in the budget's zone, so a week across a change of daylight saving
        is 167 or 169 hours long, and each still begins at the stated time."""
        zone = ZoneInfo(self.timezone)
        local = datetime.fromtimestamp(now, zone)
        start = self._begin(local.year, local.month, local.day, zone)
        if self.per == "week":
            back = (local.weekday() - (self.start.weekday or 0)) % 7
            day = local.date() - timedelta(days=back)
            start = self._begin(day.year, day.month, day.day, zone)
            if start.timestamp() > now:
                day -= timedelta(days=7)
                start = self._begin(day.year, day.month, day.day, zone)
            end_day = day + timedelta(days=7)
            end = self._begin(end_day.year, end_day.month, end_day.day, zone)
        elif self.per == "month":
            year, month = local.year, local.month
            start = self._begin(year, month, self.start.day or 1, zone)
            if start.timestamp() > now:
                year, month = (year, month - 1) if month > 1 else (year - 1, 12)
                start = self._begin(year, month, self.start.day or 1, zone)
            ny, nm = (year, month + 1) if month < 12 else (year + 1, 1)
            end = self._begin(ny, nm, self.start.day or 1, zone)
        else:
            day = local.date()
            if start.timestamp() > now:
                day -= timedelta(days=1)
                start = self._begin(day.year, day.month, day.day, zone)
            end_day = day + timedelta(days=1)
            end = self._begin(end_day.year, end_day.month, end_day.day, zone)
        return start.timestamp(), end.timestamp()

    def _begin(self, year: int, month: int, day: int, zone: ZoneInfo) -> datetime:
        # A wall time in a spring-forward gap (02:30 where 02:00-03:00 is skipped) reads with
        # fold=0 as the offset before the change: the instant the clocks jump, near enough.
        return datetime(year, month, day, self.start.hour, self.start.minute, tzinfo=zone)

    def period_key(self, now: float) -> str:
        """The usage store's key of the period holding ``now``: "week@1795302000"."""
        return f"{self.per}@{int(self.period(now)[0])}"

    def resets_words(self, now: float) -> str:
        """ "Monday 00:00 Europe/Berlin", "1 Dec 00:00 Europe/Berlin", for a day's budget
        "tomorrow 00:00 Europe/Berlin" (or "today 06:00 …"): when this period ends, in the
        budget's zone. A day's period always ends within a day: its weekday would read as
        a week away."""
        zone = ZoneInfo(self.timezone)
        end = datetime.fromtimestamp(self.period(now)[1], zone)
        clock = f"{end:%H:%M} {self.timezone}"
        if self.per == "month":
            return f"{end.day} {MONTHS[end.month - 1]} {clock}"
        if self.per == "day":
            today = datetime.fromtimestamp(now, zone).date()
            return f"{'today' if end.date() == today else 'tomorrow'} {clock}"
        return f"{WEEKDAYS[end.weekday()].capitalize()} {clock}"

    def resets_at(self, now: float) -> str:
        """The end of this period as ISO 8601 with the zone's offset then."""
        return datetime.fromtimestamp(self.period(now)[1], ZoneInfo(self.timezone)).isoformat()

    @property
    def label(self) -> str:
        """ "the staff group's shared budget", "your budget": which budget, for a sentence."""
        if self.scope == "group" and self.shared:
            return f"the {self.name} group's shared budget"
        if self.scope == "group":
            return f"the {self.name} group's budget for each member"
        return "the default budget"


@dataclass(frozen=True)
class BudgetConfig:
    """The admin's ``gpu_hours``, checked (:meth:`from_config`)."""

    default: Budget | None = None
    groups: Mapping[str, Budget] = field(default_factory=dict)
    at_limit: str = "refuse"
    grace: float = 600.0

    def budget_for(self, groups: Iterable[str]) -> Budget | None:
        """The budget of ``groups``: their group's (most hours per day if several), else the
        default; None when no budget applies."""
        found = [self.groups[g] for g in sorted(set(groups)) if g in self.groups]
        if found:
            return max(found, key=lambda b: (b.per_day, b.shared))
        return self.default

    def budgets(self) -> list[Budget]:
        """Every budget, default first (the fleet page and the metrics list them)."""
        return ([self.default] if self.default else []) + [
            self.groups[g] for g in sorted(self.groups)
        ]

    @classmethod
    def from_config(cls, value: Any, name: str = "gpu_hours") -> BudgetConfig | None:
        """Validate the admin's setting; None (or {}) means no budgets at all."""
        if value is None or (isinstance(value, Mapping) and not value):
            return None
        if not isinstance(value, Mapping):
            raise BudgetConfigError(
                f'{name} must be a dict such as {{"default": {{"hours": 20, "per": "week"}}}}, '
                f"not {_given(value)}."
            )
        extra = sorted(str(k) for k in set(value) - _KEYS)
        if extra:
            raise BudgetConfigError(
                f"{name} has unknown keys {', '.join(extra)}; expected {', '.join(sorted(_KEYS))}."
            )
        zone = _zone(value.get("timezone", "UTC"), f"{name}['timezone']")
        start = PeriodStart.parse(
            value.get("period_start", "monday 00:00"), f"{name}['period_start']"
        )
        at_limit = value.get("at_limit", "refuse")
        if at_limit not in AT_LIMIT:
            raise BudgetConfigError(
                f'{name}[\'at_limit\'] must be "refuse" or "idle_only", not {_given(at_limit)}.'
            )
        grace = value.get("grace", 600)
        if not _number(grace) or grace < 0:
            raise BudgetConfigError(
                f"{name}['grace'] must be a number of seconds (0 or more), not {_given(grace)}."
            )
        default = value.get("default")
        budget = None
        if default is not None:
            budget = _budget(default, f"{name}['default']", "default", "", start, zone)
        groups = value.get("groups") or {}
        if not isinstance(groups, Mapping):
            raise BudgetConfigError(
                f"{name}['groups'] must map group names to budgets, not {_given(groups)}."
            )
        parsed = {}
        for group, entry in groups.items():
            if not isinstance(group, str) or not group:
                raise BudgetConfigError(
                    f"{name}['groups'] must be keyed by group names, not {_given(group)}."
                )
            where = f"{name}['groups'][{group!r}]"
            parsed[group] = _budget(entry, where, "group", group, start, zone)
        return cls(budget, parsed, str(at_limit), float(grace))


def _budget(value: Any, where: str, scope: str, name: str, start: PeriodStart, zone: str) -> Budget:
    if not isinstance(value, Mapping):
        raise BudgetConfigError(
            f'{where} must be a dict such as {{"hours": 20, "per": "week"}}, not {_given(value)}.'
        )
    extra = sorted(str(k) for k in set(value) - _BUDGET_KEYS)
    if extra:
        raise BudgetConfigError(
            f"{where} has unknown keys {', '.join(extra)}; expected "
            f"{', '.join(sorted(_BUDGET_KEYS))}."
        )
    hours: Any = value.get("hours")
    if not _number(hours) or hours < 0 or hours > 10**7:
        raise BudgetConfigError(
            f"{where}['hours'] must be a number of GPU-hours (0 or more, 0.5 for half an hour), "
            f"not {_given(hours)}."
        )
    per = value.get("per")
    if per not in PERIODS:
        raise BudgetConfigError(
            f'{where}[\'per\'] must be "day", "week" or "month", not {_given(per)}.'
        )
    shared = value.get("shared", False)
    if not isinstance(shared, bool):
        raise BudgetConfigError(f"{where}['shared'] must be True or False, not {_given(shared)}.")
    if shared and scope != "group":
        raise BudgetConfigError(f"{where}['shared'] is for group budgets only, not the default.")
    if "period_start" in value:
        start = PeriodStart.parse(value["period_start"], f"{where}['period_start']")
    if "timezone" in value:
        zone = _zone(value["timezone"], f"{where}['timezone']")
    return Budget(scope, name, float(hours), str(per), shared, start, zone)


def _zone(value: Any, where: str) -> str:
    try:
        if not isinstance(value, str) or not value:
            raise ValueError
        ZoneInfo(value)
    except (ValueError, ZoneInfoNotFoundError, OSError):
        raise BudgetConfigError(
            f'{where} must be an IANA time zone such as "Europe/Berlin" or "UTC", not '
            f"{_given(value)}."
        ) from None
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _given(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- what a budget's state reads like --------------------------------------------------------
def hours_words(hours: float) -> str:
    """ "14.2", "20", "0.0083": GPU-hours as people read them; small budgets keep two
    significant digits so that a budget of minutes does not read "0.0 of 0.0"."""
    if hours <= 0:
        return "0"
    if hours >= 10:
        text = f"{hours:.1f}"
    elif hours >= 0.1:
        text = f"{hours:.2f}"
    else:
        text = f"{hours:.2g}"
        if "e" in text:
            text = f"{hours:.6f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def lasts_words(hours: float) -> str:
    """ "about 36 seconds", "about 12 minutes", "about 3.5 hours", "about 4 days": how long
    ``hours`` of a budget last, in the unit a person would say (not "0.01 hours"). Rounds
    half up, as the spawn form's script does (spawn_form.html's ``lasts``)."""
    seconds = max(0.0, hours * HOUR)
    if seconds < 90:
        value: float = max(1, math.floor(seconds + 0.5))
        unit = "second"
    elif seconds < HOUR:
        value, unit = math.floor(seconds / 60 + 0.5), "minute"
    elif seconds < 48 * HOUR:
        value = seconds / HOUR
        value = math.floor(value * 10 + 0.5) / 10 if value < 10 else math.floor(value + 0.5)
        unit = "hour"
    else:
        value, unit = math.floor(seconds / 86400 + 0.5), "day"
    text = f"{value:g}"
    return f"about {text} {unit}{'' if text == '1' else 's'}"


def state_of(used: float, allowed: float) -> str:
    """ "ok", "warning" (from 80 % used) or "over" (all used): seconds or hours alike."""
    if used >= allowed:
        return "over"
    if used >= WARN_AT * allowed:
        return "warning"
    return "ok"


def this_period(per: str) -> str:
    """ "today", "this week", "this month": a budget's period as a sentence says it."""
    return "today" if per == "day" else f"this {per}"


def budget_text(used_hours: float, allowed_hours: float, per: str, resets: str) -> str:
    """ "14.2 of 20 GPU-hours used this week; resets Monday 00:00 Europe/Berlin"."""
    unit = "GPU-hour" if hours_words(allowed_hours) == "1" else "GPU-hours"
    return (
        f"{hours_words(used_hours)} of {hours_words(allowed_hours)} {unit} used "
        f"{this_period(per)}; resets {resets}"
    )


def over_sentence(
    budget: Budget, used_hours: float, allowed_hours: float, now: float, at_limit: str = "refuse"
) -> str:
    """The 403 sentence: which budget, what is used, when it resets."""
    until = (
        "this hub starts no new GPU servers or jobs for you"
        if at_limit == "refuse"
        else "GPU servers and jobs start for you only on GPUs that would otherwise stay idle, "
        "and these would not (none are free, or others wait for them)"
    )
    return (
        f"You have used {hours_words(used_hours)} of the {hours_words(allowed_hours)} GPU-hours "
        f"{budget.label} gives you {this_period(budget.per)}; it resets "
        f"{budget.resets_words(now)}, "
        f"and until then {until} (CPU-only servers still start)."
    )
