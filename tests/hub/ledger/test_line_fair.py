"""A fair line on the workstation: who used least goes first, nobody starves, the words say why.

The line runs on the real device book; usage and the clock are injected (each ticket's
``since``, and ``usage_of`` reading a dict the test changes), so the order is checked exactly.
"""

from __future__ import annotations

import pytest

from gpuhub.core.line_order import (
    DEFAULT_HALF_LIFE,
    FAIR,
    FIFO,
    LineOrder,
    hours,
    span,
)
from gpuhub.core.policy import PolicyConfigError
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, server_key
from gpuhub.hub.ledger.line import GPULine, Ticket

HOUR = 3600.0
T0 = 1_800_000_000.0  # the injected clock's start (epoch seconds)


def ticket(user: str, since: float, gpus: int = 1, name: str = "") -> Ticket:
    return Ticket(
        server_key(user, name),
        Holder(user, "server", name, "RTX A6000"),
        "a6000",
        "RTX A6000",
        gpus,
        [0],
        since=since,
    )


def users(line: GPULine) -> list[str]:
    return [t.holder.user for t in line.ordered("a6000")]


async def test_fair_line_serves_who_used_least_and_says_why() -> None:
    book = GPUAllocator()
    usage = {"heavy": 31.5 * HOUR, "light": 2.1 * HOUR, "new": 0.0}
    line = GPULine(book, LineOrder(FAIR, DEFAULT_HALF_LIFE), usage.__getitem__)
    # Someone holds the only GPU, so everyone waits.
    book.allocate(server_key("holder", ""), 1, [0], Holder("holder", "server", ""))
    heavy, light = ticket("heavy", T0), ticket("light", T0 + 60)
    line.join(heavy)
    line.join(light)
    # light came a minute later but used 29.4 GPU-hours less: light goes first.
    assert users(line) == ["light", "heavy"]
    assert (line.position(light), line.position(heavy)) == (1, 2)
    assert line.passed_by(heavy) == [light] and line.passed_by(light) == []
    assert line.why_passed(heavy) == (
        "The line favours who used least: you used 31.5 GPU-hours recently (half-life 7 "
        "days); 1 person who used less came after you and goes first."
    )
    assert "light" not in line.why_passed(heavy)  # nobody else's name for a user
    assert line.why_passed(heavy, names=True) == (
        "The line favours who used least: you used 31.5 GPU-hours recently (half-life 7 "
        "days), light 2.1, who came after you and goes first."
    )
    assert line.why_passed(light) == ""  # nobody passed light
    # The GPU comes back: the head of the fair order gets it, heavy waits on.
    book.release(server_key("holder", ""))
    line.serve()
    assert light.granted.done() and light.granted.result() == [0]
    assert not heavy.granted.done() and users(line) == ["heavy"]
    line.leave(heavy)


async def test_order_follows_usage_that_changes_while_people_wait() -> None:
    book = GPUAllocator()
    usage = {"ann": 1 * HOUR, "ben": 2 * HOUR}
    line = GPULine(book, LineOrder(FAIR), lambda user: usage[user])
    book.allocate(server_key("holder", ""), 1, [0], Holder("holder", "server", ""))
    ben, ann = ticket("ben", T0), ticket("ann", T0 + 10)
    line.join(ben)
    line.join(ann)
    assert users(line) == ["ann", "ben"]
    # ann keeps using GPUs elsewhere while she waits: ben moves ahead.
    usage["ann"] = 3 * HOUR
    assert users(line) == ["ben", "ann"] and line.position(ben) == 1
    assert line.why_passed(ben) == ""
    for t in (ben, ann):
        line.leave(t)


async def test_nobody_starves_waiting_counts_as_usage_less() -> None:
    """A request is passed by later ones only while its user's lead in usage lasts: each
    second waited counts as a GPU-second less used, and nobody's usage is below 0."""
    book = GPUAllocator()
    usage = {"heavy": 1 * HOUR, "new1": 0.0, "new2": 0.0}
    line = GPULine(book, LineOrder(FAIR), usage.__getitem__)
    book.allocate(server_key("holder", ""), 1, [0], Holder("holder", "server", ""))
    heavy = ticket("heavy", T0)
    line.join(heavy)
    # Someone who never used a GPU, half an hour later: goes first (1 h used > 30 min waited).
    early = ticket("new1", T0 + HOUR / 2)
    line.join(early)
    assert users(line) == ["new1", "heavy"]
    # Another, an hour after heavy joined: heavy has waited as long as its lead: heavy first
    # (a tie goes to who came first), and so for anyone who comes later still.
    late = ticket("new2", T0 + HOUR)
    line.join(late)
    assert users(line) == ["new1", "heavy", "new2"]
    assert line.passed_by(heavy) == [early]
    for t in (heavy, early, late):
        line.leave(t)


async def test_ties_and_first_come_first_served() -> None:
    book = GPUAllocator()
    book.allocate(server_key("holder", ""), 1, [0], Holder("holder", "server", ""))
    usage = {"a": 5 * HOUR, "b": 0.0, "c": 0.0}
    fifo = GPULine(book, LineOrder(FIFO), usage.__getitem__)
    a, b = ticket("a", T0), ticket("b", T0 + 1)
    fifo.join(a)
    fifo.join(b)
    # first come, first served ignores usage, and says nothing about it
    assert users(fifo) == ["a", "b"] and fifo.why_passed(a) == ""
    for t in (a, b):
        fifo.leave(t)
    # Equal usage: who came first goes first.
    fair = GPULine(book, LineOrder(FAIR), usage.__getitem__)
    c, b = ticket("c", T0), ticket("b", T0 + 5)
    fair.join(c)
    fair.join(b)
    assert users(fair) == ["c", "b"]
    # A source that fails counts as no usage: the line still serves, in arrival order.
    fair.configure(LineOrder(FAIR), lambda user: 1 / 0)
    assert users(fair) == ["c", "b"]
    for t in (c, b):
        fair.leave(t)


async def test_a_bigger_head_is_not_overtaken_by_smaller_requests() -> None:
    """The line comes before the book in a fair line too: only the head is served, and a
    request that finds GPUs free while others wait joins the line."""
    book = GPUAllocator()
    usage = {"big": 0.0, "small": 9 * HOUR, "late": 8 * HOUR}
    line = GPULine(book, LineOrder(FAIR), usage.__getitem__)
    book.allocate(server_key("holder", ""), 1, [0, 1], Holder("holder", "server", ""))
    big = Ticket(server_key("big", ""), Holder("big", "server", ""), "t", "T", 2, [0, 1], since=T0)
    line.join(big)
    # One GPU is free, but big (the head) needs two: small waits behind big.
    small = Holder("small", "server", "")
    assert line.take_now(server_key("small", ""), 1, "t", [0, 1], small) is None
    s = Ticket(server_key("small", ""), small, "t", "T", 1, [0, 1], since=T0 + 1)
    line.join(s)
    assert [t.holder.user for t in line.ordered("t")] == ["big", "small"]
    assert not s.granted.done() and book.free([0, 1]) == [1]
    book.release(server_key("holder", ""))
    line.serve()
    assert big.granted.done() and not s.granted.done()
    line.leave(s)


def test_settings_are_checked_in_one_sentence_each() -> None:
    assert LineOrder.from_config("fair", 3600) == LineOrder(FAIR, 3600.0)
    assert LineOrder.from_config("fifo", DEFAULT_HALF_LIFE).fair is False
    with pytest.raises(PolicyConfigError) as bad:
        LineOrder.from_config("fastest", 3600, "GPUSpawner")
    assert str(bad.value) == (
        'GPUSpawner.line_order must be "fifo" (first come, first served) or "fair" (who used '
        "least goes first), not 'fastest'."
    )
    for value in (0, -5, "7d", True, float("inf"), None):
        with pytest.raises(PolicyConfigError) as bad:
            LineOrder.from_config("fair", value)
        assert str(bad.value) == (
            "LocalGPUSpawner.usage_half_life must be a number of seconds above 0 (604800 for "
            f"a week), not {value!r}."
        )


def test_usage_in_words() -> None:
    assert [hours(s) for s in (31.5 * HOUR, 2.1 * HOUR, 30.0, 0.0)] == [
        "31.5",
        "2.1",
        "0.0083",
        "0",
    ]
    assert [span(s) for s in (604800, 43200, 5400, 45)] == [
        "7 days",
        "12 hours",
        "90 minutes",
        "45 seconds",
    ]
