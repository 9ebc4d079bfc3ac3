"""GPU bookings: the model, the admin's rules, and the checks of a new booking (no I/O).

A *booking* sets ``gpus`` GPUs of one type aside for a user, or for a group (a class), from
``start`` to ``end`` (docs/architecture.md, "Bookings"). The admin's rules (the trait
``bookings``)::

    c.GPUSpawner.bookings = {
        "groups": {"staff": {"max_gpus": 4, "max_hours": 8, "days_ahead": 14}},
        "admins_book_for_groups": True,
        "warn_before": 900,
    }

A user books for themselves within the rule of a group they are in (the most generous of
their groups' rules, figure by figure) and within their GPU quota; a fleet admin books for
any user (within that user's rules) or, with ``admins_book_for_groups``, for a group. Every
refusal is one sentence naming what is wrong, what was expected and what was given
(:class:`Refused`, with its HTTP status). Here only what can be decided from the body, the
rules and the bookings already made; who the caller is comes in as a :class:`Caller`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from gpuhub.core import words
from gpuhub.core.options import as_given, json_number
from gpuhub.core.policy import PolicyConfigError

NAME = "bookings"
RULE_KEYS = ("max_gpus", "max_hours", "days_ahead")
KEYS = ("groups", "admins_book_for_groups", "warn_before")
FIELDS = ("gpu_type", "gpus", "start", "end", "for", "reason")
MAX_REASON = 500
PAST_SLACK = 60.0  # seconds a start may lie in the past (clocks, the time to send it)
# A fleet admin's booking for a group has no group rule; it still ends within this horizon.
ADMIN_DAYS_AHEAD = 400
DAY = 86400.0


class Refused(Exception):
    """A booking that cannot be made: the HTTP status and one sentence for the caller."""

    def __init__(self, status: int, sentence: str) -> None:
        super().__init__(sentence)
        self.status, self.sentence = status, sentence


@dataclass(frozen=True)
class GroupRule:
    """What a member of a group may book: GPUs at once, hours long, days ahead."""

    max_gpus: int
    max_hours: float
    days_ahead: float

    def most_generous(self, other: GroupRule) -> GroupRule:
        return GroupRule(
            max(self.max_gpus, other.max_gpus),
            max(self.max_hours, other.max_hours),
            max(self.days_ahead, other.days_ahead),
        )


@dataclass(frozen=True)
class BookingRules:
    """The admin's validated ``bookings``."""

    groups: Mapping[str, GroupRule] = field(default_factory=dict)
    admins_book_for_groups: bool = True
    warn_before: float = 900.0

    @classmethod
    def from_config(cls, value: Any, name: str = NAME) -> BookingRules | None:
        """Check the admin's dict once; None (or an empty dict) means nobody books."""
        if value is None or (isinstance(value, Mapping) and not value):
            return None
        if not isinstance(value, Mapping):
            raise PolicyConfigError(
                f"{name} must be a dict like {{'groups': {{'staff': {{'max_gpus': 4, "
                f"'max_hours': 8, 'days_ahead': 14}}}}, 'warn_before': 900}}, not "
                f"{as_given(value)}"
            )
        extra = sorted(str(k) for k in set(value) - set(KEYS))
        if extra:
            raise PolicyConfigError(f"{name} has unknown keys {extra}; known keys are {KEYS}")
        groups = value.get("groups", {})
        if not isinstance(groups, Mapping):
            raise PolicyConfigError(
                f"{name}['groups'] must map group names to rules, not {as_given(groups)}"
            )
        rules = {
            str(group): _rule(f"{name}['groups'][{group!r}]", rule)
            for group, rule in groups.items()
        }
        admins = value.get("admins_book_for_groups", True)
        if not isinstance(admins, bool):
            raise PolicyConfigError(
                f"{name}['admins_book_for_groups'] must be true or false, not {as_given(admins)}"
            )
        warn = json_number(value.get("warn_before", 900))
        if warn is None or warn < 0:
            raise PolicyConfigError(
                f"{name}['warn_before'] must be seconds (0 or more), not "
                f"{as_given(value.get('warn_before'))}"
            )
        return cls(rules, admins, warn)

    def rule_for(self, groups: Iterable[str]) -> GroupRule | None:
        """The rule of a user in ``groups``: the most generous of their groups' (None: no
        group of theirs may book)."""
        found = [self.groups[g] for g in groups if g in self.groups]
        if not found:
            return None
        rule = found[0]
        for other in found[1:]:
            rule = rule.most_generous(other)
        return rule


def _rule(name: str, value: Any) -> GroupRule:
    if not isinstance(value, Mapping):
        raise PolicyConfigError(
            f"{name} must be a dict like {{'max_gpus': 4, 'max_hours': 8, 'days_ahead': 14}}, "
            f"not {as_given(value)}"
        )
    extra = sorted(str(k) for k in set(value) - set(RULE_KEYS))
    missing = [k for k in RULE_KEYS if k not in value]
    if extra or missing:
        raise PolicyConfigError(
            f"{name} must have exactly the keys {RULE_KEYS}; "
            + (f"unknown {extra}" if extra else f"missing {missing}")
        )
    gpus = value["max_gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise PolicyConfigError(
            f"{name}['max_gpus'] must be a whole number of 1 or more, not {as_given(gpus)}"
        )
    figures = {}
    for key in ("max_hours", "days_ahead"):
        number = json_number(value[key])
        if number is None or number <= 0:
            raise PolicyConfigError(
                f"{name}[{key!r}] must be a number above 0, not {as_given(value[key])}"
            )
        figures[key] = number
    return GroupRule(gpus, figures["max_hours"], figures["days_ahead"])


@dataclass(frozen=True)
class Booking:
    """GPUs of one type set aside from ``start`` to ``end`` (epoch seconds) for a user or a
    group (exactly one of ``for_user``, ``for_group``)."""

    id: str
    gpu_type: str  # the type's key
    gpus: int
    start: float
    end: float
    for_user: str = ""
    for_group: str = ""
    booked_by: str = ""
    reason: str = ""
    created: float = 0.0
    type_name: str = ""  # the type's display name, as holdings and notices name it

    @property
    def whose(self) -> str:
        """ "group staff", "alice": whom it is for, in words."""
        return f"group {self.for_group}" if self.for_group else self.for_user

    def overlaps(self, start: float, end: float) -> bool:
        return self.start < end and start < self.end

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def window(self) -> str:
        """ "from 3 Dec 2026, 10:00 UTC to 3 Dec 2026, 12:00 UTC"."""
        return f"from {words.moment_utc(self.start)} to {words.moment_utc(self.end)}"

    def for_json(self, names: bool) -> dict[str, Any]:
        """As the bookings endpoint answers; ``names``: whom it is for, who booked it and why
        (only for those who may read them)."""
        out: dict[str, Any] = {
            "id": self.id,
            "gpu_type": self.gpu_type,
            "gpu_type_name": self.type_name,
            "gpus": self.gpus,
            "start": iso(self.start),
            "end": iso(self.end),
        }
        if names:
            out["for"] = {"group": self.for_group} if self.for_group else {"user": self.for_user}
            out.update(booked_by=self.booked_by, reason=self.reason, created=iso(self.created))
        return out

    def to_state(self) -> dict[str, Any]:
        """As the book's file keeps it."""
        return {
            "id": self.id,
            "gpu_type": self.gpu_type,
            "type_name": self.type_name,
            "gpus": self.gpus,
            "start": self.start,
            "end": self.end,
            "for_user": self.for_user,
            "for_group": self.for_group,
            "booked_by": self.booked_by,
            "reason": self.reason,
            "created": self.created,
        }

    @classmethod
    def from_state(cls, entry: Any) -> Booking:
        """One entry of the book's file, every field checked (``ValueError`` saying which)."""
        if not isinstance(entry, Mapping):
            raise ValueError("a booking must be an object")
        texts = ("id", "gpu_type", "type_name", "for_user", "for_group", "booked_by", "reason")
        if not all(isinstance(entry.get(k, ""), str) for k in texts) or not entry.get("id"):
            raise ValueError("a booking's id, gpu_type and names must be strings")
        gpus = entry.get("gpus")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise ValueError("a booking's gpus must be a whole number above 0")
        times = [json_number(entry.get(k)) for k in ("start", "end", "created")]
        if any(t is None for t in times) or times[1] <= times[0]:  # type: ignore[operator]
            raise ValueError("a booking's start, end and created must be times, end after start")
        if bool(entry.get("for_user")) == bool(entry.get("for_group")):
            raise ValueError("a booking is for one user or one group")
        start, end, created = (float(t) for t in times)  # type: ignore[arg-type]
        return cls(
            entry["id"],
            entry["gpu_type"],
            gpus,
            start,
            end,
            entry.get("for_user", ""),
            entry.get("for_group", ""),
            entry.get("booked_by", ""),
            entry.get("reason", ""),
            created,
            entry.get("type_name", ""),
        )


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Caller:
    """Who asks for a booking, as far as the rules care."""

    name: str
    groups: frozenset[str]
    fleet_admin: bool = False


@dataclass(frozen=True)
class TypeFacts:
    """One GPU type as bookings see it: its name and how many GPUs of it exist."""

    display_name: str
    total: int


def parse_body(
    body: Any,
    *,
    caller: Caller,
    rules: BookingRules,
    types: Mapping[str, TypeFacts],
    now: float,
    groups_of: Callable[[str], Collection[str] | None],
    group_exists: Callable[[str], bool],
    new_id: str,
) -> Booking:
    """A POST body as a :class:`Booking`, or :class:`Refused` with one sentence (400 for bad
    input, 403 for what the caller may not book). ``groups_of(user)``: their groups, None for
    no such user. Capacity, quota and other bookings are :func:`check_room`'s."""
    if not isinstance(body, Mapping):
        raise Refused(
            400,
            'Send a JSON object like {"gpu_type": "a100", "gpus": 1, "start": '
            '"2026-12-03T10:00:00+00:00", "end": "2026-12-03T12:00:00+00:00"}, not '
            f"{as_given(body)}.",
        )
    unknown = sorted(str(k) for k in body if k not in FIELDS)
    if unknown:
        raise Refused(
            400, f"Unknown field {as_given(unknown[0])}; a booking takes {', '.join(FIELDS)}."
        )
    gpu_type = body.get("gpu_type")
    if not isinstance(gpu_type, str) or gpu_type not in types:
        known = ", ".join(as_given(k) for k in types) or "none"
        raise Refused(
            400,
            f"gpu_type must be one of this hub's GPU types ({known}), not {as_given(gpu_type)}.",
        )
    facts = types[gpu_type]
    gpus = body.get("gpus")
    number = json_number(gpus)
    if number is None or number != int(number) or number < 1:
        raise Refused(400, f"gpus must be a whole number of 1 or more, not {as_given(gpus)}.")
    start = _moment(body, "start")
    end = _moment(body, "end")
    if end <= start:
        raise Refused(
            400,
            f"end must come after start; given start {as_given(body['start'])} and end "
            f"{as_given(body['end'])}.",
        )
    if start < now - PAST_SLACK:
        raise Refused(
            400,
            f"start must not lie in the past; given {as_given(body['start'])}, and it is "
            f"{words.moment_utc(now)} now.",
        )
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise Refused(400, f"reason must be text, not {as_given(reason)}.")
    reason = " ".join(reason.split())
    if len(reason) > MAX_REASON:
        raise Refused(
            400, f"reason must be at most {MAX_REASON} characters; this one has {len(reason)}."
        )
    for_user, for_group = _whom(body.get("for"), caller, rules, groups_of, group_exists)
    whole = int(number)
    if for_group:
        if end > now + ADMIN_DAYS_AHEAD * DAY:
            raise Refused(
                400, f"end must be within {ADMIN_DAYS_AHEAD} days; given {as_given(body['end'])}."
            )
    else:
        groups = caller.groups if for_user == caller.name else groups_of(for_user) or ()
        rule = rules.rule_for(groups)
        if rule is None:
            you = "You are" if for_user == caller.name else f"{for_user} is"
            raise Refused(
                403,
                f"{you} in no group that may book GPUs (groups with a booking rule: "
                f"{', '.join(sorted(rules.groups)) or 'none'}).",
            )
        _within(rule, whole, start, end, now, body)
    if whole > facts.total:
        raise Refused(
            400,
            f"gpus must be at most {facts.total}: this hub has "
            f"{words.gpus(facts.total, facts.display_name)}; given {as_given(gpus)}.",
        )
    return Booking(
        new_id,
        gpu_type,
        whole,
        start,
        end,
        for_user,
        for_group,
        caller.name,
        reason,
        now,
        facts.display_name,
    )


def _moment(body: Mapping[str, Any], key: str) -> float:
    value = body.get(key)
    example = "2026-12-03T10:00:00+00:00"
    if not isinstance(value, str):
        raise Refused(
            400,
            f"{key} must be an ISO-8601 time with its zone, such as {example}, not "
            f"{as_given(value)}.",
        )
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise Refused(
            400,
            f"{key} must be an ISO-8601 time with its zone, such as {example}, not "
            f"{as_given(value)}.",
        )
    epoch = when.timestamp()
    if not math.isfinite(epoch):
        raise Refused(400, f"{key} must be a time, not {as_given(value)}.")
    return epoch


def _whom(
    value: Any,
    caller: Caller,
    rules: BookingRules,
    groups_of: Callable[[str], Collection[str] | None],
    group_exists: Callable[[str], bool],
) -> tuple[str, str]:
    """``(user, group)``, one of them empty: whom the booking is for."""
    if value is None:
        return caller.name, ""
    shape = 'for must be {"user": <your name>} or, for fleet admins, {"group": <name>}'
    if not isinstance(value, Mapping) or len(value) != 1 or not set(value) <= {"user", "group"}:
        raise Refused(400, f"{shape}, not {as_given(value)}.")
    ((kind, name),) = value.items()
    if not isinstance(name, str) or not name:
        raise Refused(400, f"{shape}, not {as_given(value)}.")
    if kind == "user":
        if name == caller.name:
            return name, ""
        if not caller.fleet_admin:
            raise Refused(403, f"You may book only for yourself, not for {as_given(name)}.")
        if groups_of(name) is None:
            raise Refused(400, f"for names the user {as_given(name)}, and there is none.")
        return name, ""
    if not caller.fleet_admin or not rules.admins_book_for_groups:
        who = "fleet admins" if rules.admins_book_for_groups else "nobody on this hub"
        raise Refused(
            403, f"Only {who} may book for a group; you asked for group {as_given(name)}."
        )
    if not group_exists(name):
        raise Refused(400, f"for names the group {as_given(name)}, and there is none.")
    return "", name


def _within(
    rule: GroupRule, gpus: int, start: float, end: float, now: float, body: Mapping[str, Any]
) -> None:
    if gpus > rule.max_gpus:
        raise Refused(
            400,
            f"gpus must be at most {rule.max_gpus} under your group's booking rule; given "
            f"{as_given(body.get('gpus'))}.",
        )
    hours = (end - start) / 3600
    if hours > rule.max_hours + 1e-9:
        raise Refused(
            400,
            f"A booking may last at most {rule.max_hours:g} hours under your group's rule; "
            f"from start to end is {hours:.4g} hours.",
        )
    if start > now + rule.days_ahead * DAY:
        raise Refused(
            400,
            f"start must be within {rule.days_ahead:g} days from now under your group's rule; "
            f"given {as_given(body.get('start'))}.",
        )


def peak(bookings: Iterable[Booking], start: float, end: float) -> tuple[int, list[Booking]]:
    """The most GPUs ``bookings`` set aside at one instant between ``start`` and ``end``, and
    the bookings that make it."""
    within = [b for b in bookings if b.overlaps(start, end)]
    best: tuple[int, list[Booking]] = (0, [])
    for instant in {start, *(b.start for b in within if b.start > start)}:
        at = [b for b in within if b.start <= instant < b.end]
        total = sum(b.gpus for b in at)
        if total > best[0]:
            best = (total, at)
    return best


def check_room(
    booking: Booking,
    existing: Iterable[Booking],
    facts: TypeFacts,
    quota: Fraction | None,
    may_see: Callable[[Booking], bool],
) -> None:
    """:class:`Refused` (409) when ``booking`` would set aside more GPUs of its type than
    exist at some instant, or give its user more than their ``quota`` with their other
    bookings; the sentence names what is in the way (whose, only where ``may_see``)."""
    existing = list(existing)
    same_type = [b for b in existing if b.gpu_type == booking.gpu_type]
    booked, others = peak(same_type, booking.start, booking.end)
    if booked + booking.gpus > facts.total:
        left = max(facts.total - booked, 0)
        raise Refused(
            409,
            f"Only {left} of {words.gpus(facts.total, facts.display_name)} can still be booked "
            f"then: {_listed(others, may_see)}; ask for {left or 'another time'}"
            f"{' or fewer GPUs' if left else ''}.",
        )
    if booking.for_user and quota is not None:
        own = [b for b in existing if b.for_user == booking.for_user]
        held, mine = peak(own, booking.start, booking.end)
        if held + booking.gpus > quota:
            limit = f"{float(quota):g}"
            raise Refused(
                409,
                f"A booking of {booking.gpus} would give {booking.for_user} more than their quota "
                f"of {limit} GPUs at once"
                + (f", with {_listed(mine, may_see)}" if mine else "")
                + ".",
            )


def _listed(bookings: list[Booking], may_see: Callable[[Booking], bool]) -> str:
    said = []
    for b in sorted(bookings, key=lambda b: b.start):
        whose = f" for {b.whose}" if may_see(b) else ""
        said.append(f"{words.gpus(b.gpus, b.type_name)} booked{whose} {b.window()}")
    return "; ".join(said)
