"""gpuhub.hub.ledger.booking_book and the line's part in bookings, on a real device book.

The book's file survives a new book (a hub restart) and a damaged one is set aside; the
line sets a running booking's GPUs aside from others and lets whom it is for pass it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest

from gpuhub.core.bookings import Booking, BookingRules
from gpuhub.hub.ledger.booking_book import BookingBook
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, server_key
from gpuhub.hub.ledger.line import GPULine, Ticket

HOUR = 3600.0


def booking(bid: str, start: float, end: float, gpus: int = 1, **whom: str) -> Booking:
    return Booking(
        bid, "sim", gpus, start, end, booked_by="root", type_name="Simulated GPU", **whom
    )


def test_the_book_survives_a_new_book_and_forgets_what_ended(tmp_path: Path) -> None:
    path = tmp_path / "bookings.json"
    now = time.time()
    first = BookingBook()
    first.open(path)
    first.add(booking("keep", now + HOUR, now + 2 * HOUR, for_group="staff"))
    first.add(booking("gone", now - 2 * HOUR, now - 1, for_user="ann"))
    again = BookingBook()
    again.open(path)
    assert [b.id for b in again.all()] == ["keep"]
    assert again.bookings["keep"] == first.bookings["keep"]
    assert [b["id"] for b in json.loads(path.read_text())["bookings"]] == ["keep"]
    assert again.remove("keep") is not None and again.remove("keep") is None
    assert BookingBook().all() == [] and json.loads(path.read_text())["bookings"] == []


def test_a_damaged_file_is_set_aside_and_named_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bookings.json"
    good = booking("ok", time.time() + HOUR, time.time() + 2 * HOUR, for_user="ann").to_state()
    path.write_text(json.dumps({"version": 1, "bookings": [good, {"id": "x", "gpus": "two"}]}))
    book = BookingBook()
    with caplog.at_level(logging.ERROR):
        book.open(path)
    assert list(book.bookings) == ["ok"]  # what could be read is kept
    kept = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert len(kept) == 1
    assert f"the bookings file {path} is damaged (booking 2:" in caplog.text
    assert str(kept[0]) in caplog.text
    assert json.loads(path.read_text())["bookings"][0]["id"] == "ok"  # written again


def holder(user: str) -> Holder:
    return Holder(user, "server", "", "Simulated GPU")


def test_a_running_booking_sets_its_gpus_aside_and_its_users_pass_the_line() -> None:
    async def run() -> None:
        book = GPUAllocator()
        bookings = BookingBook()
        bookings.rules = BookingRules(warn_before=60)
        bookings.groups_of = lambda user: ("class",) if user.startswith("student") else ()
        line = GPULine(book, bookings=bookings)
        devices = [0, 1]
        assert line.take_now(server_key("ann", ""), 1, "sim", devices, holder("ann")) == [0]
        assert line.take_now(server_key("bob", ""), 1, "sim", devices, holder("bob")) == [1]
        # carol waits for a GPU; then the class books one from now.
        carol = Ticket(server_key("carol", ""), holder("carol"), "sim", "Simulated GPU", 1, devices)
        line.join(carol)
        now = time.time()
        bookings.add(booking("b", now - 1, now + HOUR, for_group="class"))
        assert line.set_aside("sim", devices, "carol") == (1, False)
        assert line.set_aside("sim", devices, "student1") == (0, True)
        # bob's GPU comes back: carol, first in line, may not take the booked GPU.
        book.release(server_key("bob", ""))
        line.serve()
        assert not carol.granted.done()
        assert line.booked_words(carol) == "; 1 free GPU is booked for others"
        # A student asks after carol and gets it at once, past the line.
        got = line.take_now(
            server_key("student1", ""), 1, "sim", devices, holder("student1"), frozenset({"class"})
        )
        assert got == [1]
        # The booking is used: a second student waits like anyone else, behind carol.
        assert line.set_aside("sim", devices, "student2") == (0, False)
        assert (
            line.take_now(server_key("student2", ""), 1, "sim", devices, holder("student2")) is None
        )
        book.release(server_key("ann", ""))
        line.serve()
        assert carol.granted.result() == [0]

    asyncio.run(run())


def test_gpus_booked_soon_are_lent_no_more() -> None:
    async def run() -> None:
        book = GPUAllocator()
        bookings = BookingBook()
        bookings.rules = BookingRules(warn_before=600)
        line = GPULine(book, bookings=bookings)
        now = time.time()
        bookings.add(booking("soon", now + 300, now + HOUR, gpus=2, for_user="ann"))
        bookings.add(booking("later", now + 2 * HOUR, now + 3 * HOUR, gpus=2, for_user="ann"))
        # Within warn_before of its start: bob gets none of the two; ann would.
        assert line.take_now(server_key("bob", ""), 1, "sim", [0, 1], holder("bob")) is None
        assert line.set_aside("sim", [0, 1], "ann") == (0, False)  # not running yet
        bookings.remove("soon")
        # "later" needs both GPUs from two hours on: bob's server, which would still hold one
        # then, gets none; his work gone in an hour, or idle_only work (until 0), gets one.
        assert line.take_now(server_key("bob", ""), 1, "sim", [0, 1], holder("bob")) is None
        gone = now + HOUR
        assert line.take_now(server_key("bob", ""), 1, "sim", [0, 1], holder("bob"), None, gone)
        assert line.take_now(server_key("eve", ""), 1, "sim", [0, 1], holder("eve"), None, 0.0)

    asyncio.run(run())


def test_free_booked_gpus_are_lent_only_to_work_gone_in_time() -> None:
    async def run() -> None:
        book = GPUAllocator()
        bookings = BookingBook()
        bookings.rules = BookingRules(warn_before=60)
        bookings.groups_of = lambda user: ("class",) if user == "dave" else ()
        line = GPULine(book, bookings=bookings)
        now = time.time()
        # One GPU, booked for the class from an hour on: eve's server waits, with words.
        bookings.add(booking("c", now + HOUR, now + 2 * HOUR, for_group="class"))
        eve = Ticket(server_key("eve", ""), holder("eve"), "sim", "Simulated GPU", 1, [0])
        line.join(eve)
        assert not eve.granted.done()
        said = line.booked_words(eve)
        assert said.startswith("; 1 free Simulated GPU is booked from "), said
        assert said.endswith(", and this server would still hold it then"), said
        assert [b.id for b in line.in_the_way(eve)] == ["c"]
        # Bookings one after another share their GPUs: two of one GPU each set one aside.
        bookings.add(booking("d", now + 3 * HOUR, now + 4 * HOUR, for_group="class"))
        assert line.set_aside("sim", [0, 1], "eve") == (1, False)
        assert line.set_aside("sim", [0, 1], "eve", until=now + 2.5 * HOUR) == (1, False)
        assert line.set_aside("sim", [0, 1], "eve", until=now + HOUR / 2) == (0, False)
        # Work gone in time passes eve, whom the booked GPU is held back from anyway; so
        # does the class's own request: the booking's GPUs are theirs.
        assert line.set_aside("sim", [0], "dave") == (0, False)
        quick = Ticket(
            server_key("bob", ""), holder("bob"), "sim", "Simulated GPU", 1, [0], until=now + 60
        )
        line.join(quick)
        assert quick.granted.result() == [0] and not eve.granted.done()
        book.release(server_key("bob", ""))
        dave = holder("dave")
        assert line.take_now(server_key("dave", ""), 1, "sim", [0], dave, frozenset({"class"}))
        assert not eve.granted.done()
        line.leave(eve)

    asyncio.run(run())


def test_behind_a_held_back_head_only_what_is_lent_is_taken() -> None:
    async def run() -> None:
        book = GPUAllocator()
        bookings = BookingBook()
        bookings.rules = BookingRules(warn_before=60)
        bookings.groups_of = lambda user: ("class",) if user == "dave" else ()
        line = GPULine(book, bookings=bookings)
        now = time.time()
        devices = [0, 1, 2]
        bookings.add(booking("c", now + HOUR, now + 2 * HOUR, for_group="class"))
        # carol wants all three; one is booked later, so she waits for the booking's end.
        carol = Ticket(server_key("carol", ""), holder("carol"), "sim", "Simulated GPU", 3, devices)
        line.join(carol)
        assert not carol.granted.done() and line._held_back("sim") == 2
        # bob's server may not take the booked GPU, nor those carol may have: none for him.
        assert line.take_now(server_key("bob", ""), 1, "sim", devices, holder("bob")) is None
        # dave's request takes the booked one, and only that.
        dave = holder("dave")
        assert line.take_now(server_key("dave", ""), 1, "sim", devices, dave) is not None
        assert line.take_now(server_key("dave", "x"), 1, "sim", devices, dave) is None
        line.leave(carol)

    asyncio.run(run())
