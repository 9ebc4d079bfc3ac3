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
    # A booking that starts after the hard start takes nothing away.
    later = Line(
        "A6000",
        1,
        (held,),
        (Waiter("bob", 1, NOW, curve),),
        slack=60,
        booked=((NOW + 5 * HOUR, NOW + 6 * HOUR, 1),),
    )
    assert estimate(later, NOW)[0]["bob"].latest is not None


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
