"""Who stands in a booking's way (gpuhub.hub.monitor.booking_watch.plan), without a hub: what
a booking owes is paid from free GPUs first, then from the newest holders nobody's near
booking is for; nothing before ``warn_before`` ahead of the start."""

from __future__ import annotations

from gpuhub.core.bookings import Booking
from gpuhub.core.holdings import Holding
from gpuhub.hub.monitor.booking_watch import plan, reason, warning

NOW = 1_800_000_000.0
SIM = "Simulated GPU"


def held(user: str, since: float, gpus: int = 1) -> Holding:
    return Holding(user, "server", "", gpus, SIM, since=NOW - since)


def booked(start: float, gpus: int = 1, **whom: str) -> Booking:
    return Booking("b-1", "sim", gpus, NOW + start, NOW + start + 3600, type_name=SIM, **whom)


def is_for(booking: Booking, user: str) -> bool:
    return user == booking.for_user or (booking.for_group == "class" and user.startswith("s"))


def test_free_gpus_pay_first_then_the_newest_holder_not_booked_for() -> None:
    holders = [held("bob", 600), held("carol", 60), held("student", 30)]
    group = booked(0, 2, for_group="class")
    # One owed (the student holds one), nothing free: carol, the newest not of the class.
    assert [h.user for _, h in plan([group], holders, {SIM: 0}, NOW, 60, is_for)] == ["carol"]
    # One free: nobody stands in the way.
    assert plan([group], holders, {SIM: 1}, NOW, 60, is_for) == []
    # Two owed, nothing free: carol, then bob.
    found = plan([booked(0, 2, for_user="ann")], holders[:2], {SIM: 0}, NOW, 60, is_for)
    assert [h.user for _, h in found] == ["carol", "bob"]


def test_idle_only_work_is_stopped_first_then_the_newest() -> None:
    holders = [held("bob", 600), held("carol", 60)]
    ann = booked(0, 1, for_user="ann")
    assert [h.user for _, h in plan([ann], holders, {SIM: 0}, NOW, 60, is_for)] == ["carol"]
    # bob is over an idle_only budget: his borrowed GPU goes back first, though older.
    found = plan([ann], holders, {SIM: 0}, NOW, 60, is_for, lambda user: user == "bob")
    assert [h.user for _, h in found] == ["bob"]


def test_only_within_warn_before_of_the_start_and_until_its_end() -> None:
    holders = [held("bob", 600)]
    assert plan([booked(120, for_user="ann")], holders, {SIM: 0}, NOW, 60, is_for) == []
    assert len(plan([booked(30, for_user="ann")], holders, {SIM: 0}, NOW, 60, is_for)) == 1
    assert plan([booked(-3600, for_user="ann")], holders, {SIM: 0}, NOW, 60, is_for) == []


def test_the_notices_name_the_booking_and_when() -> None:
    booking, holding = booked(600, for_user="ann"), held("bob", 600)
    said = warning(booking, holding, NOW)
    assert "(booking b-1)" in said and "in about 10 min" in said and "ann" not in said
    assert reason(booking, holding).startswith("its 1 Simulated GPU is booked from ")
