"""Bookings in the estimate (gpuhub.hub.monitor.eta): a source of its reasons, and a wait
whose GPUs may go to a booking's users first is never given a ``latest`` it could pass."""

from __future__ import annotations

from gpuhub.hub.monitor.eta import Held, Line, Waiter, by_booking, estimate
from gpuhub.hub.monitor.hold_durations import Durations

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600.0


def test_a_booking_before_the_hard_end_takes_latest_away_and_says_why() -> None:
    curve = Durations().curve("u", [], "A6000")
    held = Held(1, NOW - HOUR, curve, hard_end=NOW + 600, hard_why="budget")
    plain = Line("A6000", 1, (held,), (Waiter("bob", 1, NOW, curve),), slack=60)
    assert estimate(plain, NOW)[0]["bob"].latest is not None
    booked = Line(
        "A6000",
        1,
        (held,),
        (Waiter("bob", 1, NOW, curve),),
        slack=60,
        booked=((NOW + 300, NOW + 2 * HOUR, 1),),
    )
    bob = estimate(booked, NOW)[0]["bob"]
    assert bob.latest is None
    assert "1 A6000 GPU is booked from 08:05 UTC to 10:00 UTC" in " ".join(bob.because)
    assert bob.because[-1] == (
        "No later time is certain: booked GPUs go to the booking's users first."
    )
    # A booking that starts after the hard start takes nothing away from a wait whose hold
    # ends before it (its budget leaves it an hour): the booked GPU is lent to it.
    later = Line(
        "A6000",
        1,
        (held,),
        (Waiter("bob", 1, NOW, curve, hard_hold=HOUR),),
        slack=60,
        booked=((NOW + 5 * HOUR, NOW + 6 * HOUR, 1),),
    )
    assert estimate(later, NOW)[0]["bob"].latest is not None


def test_a_wait_with_no_set_end_is_lent_no_booked_gpu_and_waits_for_the_booking_end() -> None:
    curve = Durations().curve("u", [], "A6000")
    # The only GPU is free now and booked from 09:00 to 10:00: a server would still hold it
    # then, so it starts after the booking's end, and nothing makes that certain.
    line = Line(
        "A6000", 1, (), (Waiter("bob", 1, NOW, curve),), booked=((NOW + HOUR, NOW + 2 * HOUR, 1),)
    )
    bob = estimate(line, NOW)[0]["bob"]
    assert bob.likely >= NOW + 2 * HOUR and bob.by >= bob.likely
    assert bob.latest is None
    said = " ".join(bob.because)
    assert "1 A6000 GPU is booked from 09:00 UTC to 10:00 UTC" in said
    assert "lent only to work that will be gone by 09:00 UTC" in said
    assert "until 10:00 UTC" in said
    # A wait whose hold ends in time starts now, with a latest; and a second GPU, free, is
    # anyone's.
    short = Line(
        "A6000",
        1,
        (),
        (Waiter("eve", 1, NOW, curve, hard_hold=HOUR / 2),),
        booked=((NOW + HOUR, NOW + 2 * HOUR, 1),),
    )
    eve = estimate(short, NOW)[0]["eve"]
    assert eve.likely == NOW and eve.latest is not None and eve.latest <= NOW + 120
    two = Line(
        "A6000", 2, (), (Waiter("bob", 1, NOW, curve),), booked=((NOW + HOUR, NOW + 2 * HOUR, 1),)
    )
    assert estimate(two, NOW)[0]["bob"].likely == NOW


def test_a_wait_its_own_booking_covers_starts_by_the_booking_at_the_latest() -> None:
    curve = Durations().curve("u", [], "A6000")
    line = Line("A6000", 1, (Held(1, NOW - HOUR, curve),), (Waiter("ann", 1, NOW, curve),))
    found = estimate(line, NOW)[0]["ann"]
    assert found.latest is None  # nothing that holds the GPU has to end
    ann = by_booking(found, NOW + HOUR, NOW + 3 * HOUR, NOW, 60)
    assert ann.latest == NOW + HOUR + 60
    assert ann.likely <= ann.by <= ann.latest
    assert ann.because[-1] == (
        "By 09:01 UTC at the latest: your booking from 09:00 UTC to 11:00 UTC gives you these GPUs."
    )
    assert not any(s.startswith("No later time") for s in ann.because)
    # A hard fact that comes sooner stays.
    assert by_booking(ann, NOW + 2 * HOUR, NOW + 3 * HOUR, NOW, 60) == ann
