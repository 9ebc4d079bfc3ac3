"""gpuhub.core.bookings: the admin's rules, a POST body's checks and the room a booking needs."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest

from gpuhub.core.bookings import (
    Booking,
    BookingRules,
    Caller,
    Refused,
    TypeFacts,
    check_room,
    parse_body,
    peak,
)
from gpuhub.core.policy import PolicyConfigError

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0
RULES = BookingRules.from_config(
    {"groups": {"staff": {"max_gpus": 2, "max_hours": 8, "days_ahead": 14}}, "warn_before": 60}
)
TYPES = {"sim": TypeFacts("Simulated GPU", 2)}
USERS = {"ann": {"staff"}, "bob": set(), "root": set()}


def at(hours: float) -> str:
    return datetime.fromtimestamp(NOW + hours * HOUR, UTC).isoformat()


def parse(body: Any, caller: str = "ann", admin: bool = False) -> Booking:
    assert RULES is not None

    def groups_of(user: str) -> Collection[str] | None:
        return USERS.get(user)

    return parse_body(
        body,
        caller=Caller(caller, frozenset(USERS[caller]), admin),
        rules=RULES,
        types=TYPES,
        now=NOW,
        groups_of=groups_of,
        group_exists=lambda g: g in ("staff", "class"),
        new_id="b1",
    )


def body(**fields: Any) -> dict[str, Any]:
    return {"gpu_type": "sim", "gpus": 1, "start": at(1), "end": at(3), **fields}


def test_the_contracts_shape_is_taken_and_mistakes_are_named() -> None:
    rules = BookingRules.from_config(
        {
            "groups": {"staff": {"max_gpus": 4, "max_hours": 8, "days_ahead": 14}},
            "admins_book_for_groups": True,
            "warn_before": 900,
        }
    )
    assert rules is not None and rules.warn_before == 900 and rules.groups["staff"].max_gpus == 4
    assert BookingRules.from_config({}) is None
    with pytest.raises(PolicyConfigError, match=r"unknown keys \['warn'\]"):
        BookingRules.from_config({"warn": 1})
    with pytest.raises(PolicyConfigError, match=r"\['max_gpus'\] must be a whole number"):
        BookingRules.from_config(
            {"groups": {"s": {"max_gpus": 0, "max_hours": 1, "days_ahead": 1}}}
        )
    with pytest.raises(PolicyConfigError, match="missing"):
        BookingRules.from_config({"groups": {"s": {"max_gpus": 1}}})


def test_a_good_body_is_a_booking_for_its_sender() -> None:
    booking = parse(body(reason="  paper   deadline "))
    assert (booking.for_user, booking.for_group, booking.booked_by) == ("ann", "", "ann")
    assert (booking.gpus, booking.end - booking.start, booking.reason) == (
        1,
        2 * HOUR,
        "paper deadline",
    )
    assert booking.for_json(names=False).keys() == {
        "id",
        "gpu_type",
        "gpu_type_name",
        "gpus",
        "start",
        "end",
    }
    assert booking.for_json(names=True)["for"] == {"user": "ann"}
    assert Booking.from_state(booking.to_state()) == booking


@pytest.mark.parametrize(
    ("fields", "status", "said"),
    [
        ({"colour": "red"}, 400, 'Unknown field "colour"'),
        (
            {"gpu_type": "a100"},
            400,
            'gpu_type must be one of this hub\'s GPU types ("sim"), not "a100".',
        ),
        ({"gpus": 0}, 400, "gpus must be a whole number of 1 or more, not 0."),
        ({"gpus": 1.5}, 400, "not 1.5."),
        ({"gpus": True}, 400, "not true."),
        ({"start": "2026-12-01T10:00:00"}, 400, "start must be an ISO-8601 time with its zone"),
        ({"start": "tomorrow"}, 400, 'not "tomorrow".'),
        ({"end": at(0.5)}, 400, "end must come after start"),
        ({"start": at(-1), "end": at(1)}, 400, "start must not lie in the past"),
        ({"end": at(10)}, 400, "A booking may last at most 8 hours under your group's rule"),
        ({"start": at(24 * 15), "end": at(24 * 15 + 1)}, 400, "within 14 days"),
        ({"gpus": 3}, 400, "gpus must be at most 2 under your group's booking rule; given 3."),
        ({"reason": "x" * 501}, 400, "reason must be at most 500 characters; this one has 501."),
        ({"for": {"user": "bob"}}, 403, 'You may book only for yourself, not for "bob".'),
        ({"for": {"group": "staff"}}, 403, "Only fleet admins may book for a group"),
        ({"for": "staff"}, 400, 'for must be {"user": <your name>}'),
    ],
)
def test_every_refusal_is_one_sentence_naming_the_field(
    fields: dict[str, Any], status: int, said: str
) -> None:
    with pytest.raises(Refused) as refused:
        parse(body(**fields))
    assert refused.value.status == status
    assert said in refused.value.sentence, refused.value.sentence
    assert refused.value.sentence.endswith(".")


def test_a_user_in_no_group_with_a_rule_may_not_book() -> None:
    with pytest.raises(Refused, match="You are in no group that may book GPUs") as refused:
        parse(body(), caller="bob")
    assert refused.value.status == 403


def test_fleet_admins_book_for_a_group_beyond_a_members_rule() -> None:
    booking = parse(body(gpus=2, end=at(12), **{"for": {"group": "class"}}), "root", admin=True)
    assert (booking.for_group, booking.for_user, booking.booked_by) == ("class", "", "root")
    with pytest.raises(Refused, match='the group "nope", and there is none'):
        parse(body(**{"for": {"group": "nope"}}), "root", admin=True)
    with pytest.raises(Refused, match="gpus must be at most 2: this hub has 2 Simulated GPUs"):
        parse(body(gpus=3, **{"for": {"group": "class"}}), "root", admin=True)


def booked(bid: str, start: float, end: float, gpus: int = 1, user: str = "bob") -> Booking:
    return Booking(
        bid,
        "sim",
        gpus,
        NOW + start * HOUR,
        NOW + end * HOUR,
        for_user=user,
        booked_by=user,
        type_name="Simulated GPU",
    )


def test_no_instant_is_over_booked_and_the_409_names_what_is_in_the_way() -> None:
    others = [booked("x", 0, 2), booked("y", 1.5, 4)]
    assert peak(others, NOW, NOW + 5 * HOUR)[0] == 2
    new = booked("n", 1, 3, user="ann")
    with pytest.raises(Refused) as refused:
        check_room(new, others, TYPES["sim"], None, may_see=lambda b: False)
    said = refused.value.sentence
    assert refused.value.status == 409
    assert said.startswith(
        "Only 0 of 2 Simulated GPUs can still be booked then: 1 Simulated GPU booked from 1 Dec 2026, 09:00 UTC"
    )
    assert "bob" not in said  # ann may not see whose
    with pytest.raises(Refused, match="booked for bob from"):
        check_room(new, others, TYPES["sim"], None, may_see=lambda b: True)
    # Touching windows do not overlap: 3-4 fits beside 0-2 and 1.5-4? no; 4-5 does.
    check_room(booked("n", 4, 5), others, TYPES["sim"], None, may_see=lambda b: False)


def test_a_booking_never_gives_more_than_the_quota() -> None:
    mine = [booked("m", 0, 2, user="ann")]
    with pytest.raises(Refused, match="more than their quota of 1 GPUs at once") as refused:
        check_room(booked("n", 1, 3, user="ann"), mine, TYPES["sim"], Fraction(1), lambda b: True)
    assert refused.value.status == 409
    check_room(booked("n", 2, 3, user="ann"), mine, TYPES["sim"], Fraction(1), lambda b: True)
