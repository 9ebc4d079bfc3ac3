"""Wait in line for GPUs on one workstation: per GPU type, first come, first served or fair.

Every spawn that asks for GPUs comes here first (:meth:`GPULine.take_now`); the line
hands its head to the device book (:mod:`gpuhub.hub.ledger.device_book`) when enough is free, and
nothing reaches the book around it: a request that finds GPUs free while others of its type
wait joins the line behind them (docs/architecture.md, "The line comes before the book").
When it cannot be served at once, ``LocalGPUSpawner`` accepts the spawn and its ``start()``
waits here (``LocalGPUSpawner.gpu_queue_timeout``). Each GPU type has one line; only the
head of a line is served, so a big request is never overtaken by small ones. The line is
served whenever GPUs may have come back (a server stopped, a job hold ended, checked every
second), so a GPU is still never handed out twice.

The order (:class:`gpuhub.core.line_order.LineOrder`, the admin's ``line_order``): first come,
first served, or fair, lowest :func:`gpuhub.core.line_order.fair_key` first: the user's decayed
past GPU usage (``usage_of``, GPU-seconds) plus when the request joined, ties by arrival. A
fair line is ordered again whenever it is read or served, so usage that changes while people
wait (someone keeps using GPUs elsewhere) moves them; each second waited counts as a
GPU-second less used, so nobody is passed for ever. Either way only the head is served and a
request that finds GPUs free while others wait still joins the line.

The line is also the local ledger's source of holdings (:mod:`gpuhub.hub.ledger.ledger`): a spawn
waiting in line counts against its user's quota, so waiting cannot be used to get around it,
but it holds nothing (``Holding.waiting``): the fleet page, the metrics and GPU-hours show it
as waiting.
gpuhub's own wait is always a *line*; a *queue* is Kueue's (:mod:`gpuhub.k8s.kueue`).

Bookings (:mod:`gpuhub.hub.ledger.booking_book`): the free GPUs a booking still needs (its
GPUs less those its user or group hold now) are set aside from others' requests
(:meth:`GPULine.set_aside`) from ``warn_before`` ahead of its start to its end, and before that
from every request not known to be gone by then: free booked GPUs are lent only to work that
ends in time (``Ticket.until``) or to ``idle_only`` work, which the booking's start stops. The
decision is made here, where the line hands its head to the book. A request of whom a running
booking is for, with GPUs still owed, passes the line: it is served as soon as enough are
free, ahead of those who joined before it (docs/architecture.md, "Bookings").
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from gpuhub.core import words
from gpuhub.core.bookings import Booking
from gpuhub.core.holdings import Holding
from gpuhub.core.line_order import LineOrder, fair_key, hours
from gpuhub.hub.ledger.booking_book import BOOKINGS, BookingBook
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, HolderKey, NotEnoughGPUs

SERVE_EVERY = 1.0  # seconds between looks at the book while anyone waits


@dataclass(eq=False)
class Ticket:
    """One spawn waiting for ``gpus`` GPUs of type ``type_key`` among ``candidates``."""

    key: HolderKey  # the server, as the device book keys it
    holder: Holder
    type_key: str
    type_name: str
    gpus: int
    candidates: list[int]
    since: float = field(default_factory=time.time)
    granted: asyncio.Future[list[int]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    awaited: bool = False  # the spawn's start() waits for it (not only accepted yet)
    groups: frozenset[str] | None = None  # its user's groups (None: looked up), for bookings
    # When its work is known to be gone (epoch seconds): free booked GPUs are lent only to
    # work gone before the booking needs them. math.inf: not known (a server); 0: whenever a
    # booking needs them (``idle_only`` work, stopped at the booking's start).
    until: float = math.inf


def no_usage(_user: str) -> float:
    """Usage when none is known: everyone 0, so a fair line is first come, first served."""
    return 0.0


class GPULine:
    """The lines of one workstation (one per GPU type), over its device book.

    ``order``: how each line is ordered; ``usage_of(user)``: the user's decayed GPU-seconds
    now (read by a fair line only). Both may be set again at any time (:meth:`configure`).
    """

    def __init__(
        self,
        book: GPUAllocator,
        order: LineOrder | None = None,
        usage_of: Callable[[str], float] = no_usage,
        bookings: BookingBook | None = None,
    ) -> None:
        self.book = book
        self.bookings = bookings if bookings is not None else BOOKINGS
        self.order = order or LineOrder()
        self.usage_of = usage_of
        # Each type's tickets in the order they joined; the order they are served in is
        # :meth:`ordered` (the same list for a first come, first served line).
        self.lines: dict[str, list[Ticket]] = {}
        self._server: asyncio.Task[None] | None = None

    def configure(self, order: LineOrder, usage_of: Callable[[str], float]) -> None:
        """The admin's order and where usage comes from (set by the spawner that uses it)."""
        self.order, self.usage_of = order, usage_of

    # -- the ledger's source ------------------------------------------------------------------
    def holdings(self, user: str | None = None) -> list[Holding]:
        """What users hold, plus what their spawns waiting in line will take (``waiting``:
        they count against the quota, but nothing is given to them yet)."""
        held = self.book.holdings(user)
        for line in self.lines.values():
            for ticket in line:
                if user is None or ticket.holder.user == user:
                    name, holder = ticket.holder.name, ticket.holder
                    held.append(
                        Holding(
                            holder.user,
                            "server",
                            name,
                            ticket.gpus,
                            ticket.type_name,
                            since=ticket.since,
                            waiting="line",  # counts against the quota; never held
                            # A share waiting counts as its fraction, as once it is served.
                            share=(
                                Fraction(holder.gpu_memory, holder.device_memory)
                                if holder.shared
                                else None
                            ),
                            memory=holder.gpu_memory if holder.shared else 0,
                        )
                    )
        return held

    # -- the lines ------------------------------------------------------------------------------
    def take_now(
        self,
        key: HolderKey,
        gpus: int,
        type_key: str,
        candidates: list[int],
        holder: Holder,
        groups: frozenset[str] | None = None,
        until: float = math.inf,
    ) -> list[int] | None:
        """The devices, if this request is served at once: nobody of its type waits (or a
        running booking for its user still owes GPUs: it passes the line) and enough are
        free that are not set aside for others' bookings (``until``: see
        :attr:`Ticket.until`). None: it must wait in line (:meth:`join`)."""
        aside, first = self.set_aside(type_key, candidates, holder.user, groups, until=until)
        if self.lines.get(type_key) and not first:
            room = self._held_back(type_key) if self.bookings.bookings else None
            if room is None:
                return None  # the line comes before the book: it joins those already waiting
            # It may take only what bookings hold back from the head and lend to it: it
            # leaves the head's share and what is booked for others from its view.
            aside += room
        try:
            return self._allocate(key, gpus, candidates, holder, aside)
        except NotEnoughGPUs:
            return None

    def set_aside(
        self,
        type_key: str,
        candidates: list[int],
        user: str,
        groups: frozenset[str] | None = None,
        now: float | None = None,
        until: float = math.inf,
    ) -> tuple[int, bool]:
        """``(aside, first)``: how many of the type's GPUs bookings for others still need
        (``user`` may not take them for work gone by ``until``: the most those bookings need
        at once, from now to then), and whether a running booking for ``user`` still owes
        GPUs (its requests pass the line). A booking owes its GPUs less those whom it is for
        hold now."""
        now = time.time() if now is None else now
        bookings = self.bookings.in_the_way(type_key, now, until)
        if not bookings:
            return 0, False
        mine = set(candidates)
        held: dict[str, int] = {}
        for holding in self.book.holdings():
            count = sum(1 for d in holding.devices if d in mine)
            if count:
                held[holding.user] = held.get(holding.user, 0) + count
        first, lead = False, self.bookings.lead()
        windows: list[tuple[float, float, int]] = []  # others' (from, to, owed)
        for booking in bookings:
            used = sum(n for u, n in held.items() if self.bookings.is_for(booking, u))
            owed = max(booking.gpus - used, 0)
            if self.bookings.is_for(booking, user, groups):
                first = first or (owed > 0 and booking.active(now))
            elif owed:
                windows.append((max(booking.start - lead, now), booking.end, owed))
        # The most owed at any one instant: bookings one after another share their GPUs.
        aside = max((sum(n for s, e, n in windows if s <= t < e) for t, _, _ in windows), default=0)
        return aside, first

    def in_the_way(self, ticket: Ticket, now: float | None = None) -> list[Booking]:
        """Others' bookings of the ticket's type not running yet whose GPUs its work would
        still hold when they are needed, soonest first (the words of its wait)."""
        now = time.time() if now is None else now
        lead = self.bookings.lead()
        return sorted(
            (
                b
                for b in self.bookings.in_the_way(ticket.type_key, now, ticket.until)
                if b.start - lead > now
                and not self.bookings.is_for(b, ticket.holder.user, ticket.groups)
            ),
            key=lambda b: (b.start, b.id),
        )

    def booked_words(self, ticket: Ticket) -> str:
        """ "; 1 free GPU is booked for others": why a waiting request is not served although
        GPUs are free (a clause of the spawn page's line message; "" when none is)."""
        now = time.time()
        aside, _ = self.set_aside(
            ticket.type_key, ticket.candidates, ticket.holder.user, ticket.groups, now, ticket.until
        )
        free = len(self.book.free(ticket.candidates))
        held_back = min(aside, free)
        if not held_back:
            return ""
        verb = "is" if held_back == 1 else "are"
        later = self.in_the_way(ticket, now)
        if later and not self.bookings.setting_aside(ticket.type_key, now):
            booking, pronoun = later[0], "it" if held_back == 1 else "them"
            return (
                f"; {held_back} free {words.gpu_noun(ticket.type_name, held_back)} {verb} "
                f"booked from {words.clock(booking.start, now)} to "
                f"{words.clock(booking.end, now)}, and this {ticket.holder.kind} would still "
                f"hold {pronoun} then"
            )
        return f"; {held_back} free {words.gpu_noun('', held_back)} {verb} booked for others"

    def _allocate(
        self, key: HolderKey, gpus: int, candidates: list[int], holder: Holder, aside: int
    ) -> list[int]:
        """The book's allocation, leaving ``aside`` free GPUs to others' bookings."""
        if aside and not holder.shared:
            free = len(self.book.free([d for d in candidates if d not in self.book.held_by(key)]))
            if gpus > free - aside:
                raise NotEnoughGPUs(gpus, max(free - aside, 0), len(candidates))
        return self.book.allocate(key, gpus, candidates, holder)

    def join(self, ticket: Ticket) -> None:
        self.lines.setdefault(ticket.type_key, []).append(ticket)
        self.serve()
        if not ticket.granted.done() and (self._server is None or self._server.done()):
            self._server = asyncio.ensure_future(self._serve_while_waiting())

    def ordered(self, type_key: str) -> list[Ticket]:
        """The tickets of a type in the order they will be served: as they joined, or in a
        fair line by :func:`~gpuhub.core.line_order.fair_key` (usage read once per user)."""
        line = self.lines.get(type_key, [])
        if not self.order.fair or len(line) < 2:
            return list(line)
        usage = self.usages(line)
        # sorted() is stable: equal keys keep the order they joined in.
        return sorted(line, key=lambda t: fair_key(usage[t.holder.user], t.since))

    def usages(self, tickets: list[Ticket]) -> dict[str, float]:
        """Each of their users' decayed GPU-seconds now (a failing source counts as 0:
        the line still serves, first come, first served)."""
        usage: dict[str, float] = {}
        for ticket in tickets:
            user = ticket.holder.user
            if user not in usage:
                try:
                    usage[user] = max(float(self.usage_of(user)), 0.0)
                except Exception:
                    usage[user] = 0.0
        return usage

    def passed_by(self, ticket: Ticket) -> list[Ticket]:
        """The tickets ahead of ``ticket`` that joined after it (a fair line's doing)."""
        order = self.ordered(ticket.type_key)
        if ticket not in order:
            return []
        return [t for t in order[: order.index(ticket)] if t.since > ticket.since]

    def why_passed(self, ticket: Ticket, *, names: bool = False) -> str:
        """Why requests that came after ``ticket`` go first, in a sentence for its user; ""
        when none do. ``names``: say who they are and what they used (an admin reads it);
        otherwise only how many, as nobody else's name is the user's to read.

        'The line favours who used least: you used 31.5 GPU-hours recently (half-life 7
        days); 1 person who used less came after you and goes first.'"""
        passed = self.passed_by(ticket)
        if not passed:
            return ""
        usage = self.usages([ticket, *passed])
        mine = (
            f"The line favours who used least: you used {hours(usage[ticket.holder.user])} "
            f"GPU-hours recently ({self.order.words()})"
        )
        users = list(dict.fromkeys(t.holder.user for t in passed))
        goes = "goes" if len(users) == 1 else "go"
        if names:
            listed = [f"{user} {hours(usage[user])}" for user in users]
            who = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
            return f"{mine}, {who}, who came after you and {goes} first."
        people = words.plural(len(users), "person", "people")
        return f"{mine}; {people} who used less came after you and {goes} first."

    def leave(self, ticket: Ticket) -> None:
        """A waiting spawn was stopped, failed or timed out: out of the line."""
        line = self.lines.get(ticket.type_key, [])
        if ticket in line:
            line.remove(ticket)
        if not ticket.granted.done():
            ticket.granted.cancel()
        self.serve()

    def position(self, ticket: Ticket) -> int:
        """1 for the head of the line; 0 once out of it."""
        line = self.ordered(ticket.type_key)
        return line.index(ticket) + 1 if ticket in line else 0

    def waiting(self, type_key: str) -> int:
        return len(self.lines.get(type_key, []))

    def serve(self) -> None:
        """Give GPUs first to those a running booking still owes them (past the line), then
        to the heads of the lines, in order, while there are enough."""
        for type_key, line in self.lines.items():
            if self.bookings.bookings:
                for ticket in self.ordered(type_key):
                    aside, first = self.set_aside(
                        type_key,
                        ticket.candidates,
                        ticket.holder.user,
                        ticket.groups,
                        until=ticket.until,
                    )
                    if first:
                        self._grant(line, ticket, aside)
            while line:
                head = self.ordered(type_key)[0]
                aside = (
                    self.set_aside(
                        type_key, head.candidates, head.holder.user, head.groups, until=head.until
                    )[0]
                    if self.bookings.bookings
                    else 0
                )
                if not self._grant(line, head, aside):
                    break
            if line and self.bookings.bookings:
                self._serve_behind(type_key, line)

    def _held_back(self, type_key: str) -> int | None:
        """The free GPUs the head of the line may take, when bookings for others hold some
        back from it (None: nothing is held back from it). Those held back may go to
        requests behind it that bookings lend them to: taking them never delays the head,
        which may not have them before the booking's end anyway."""
        line = self.lines.get(type_key)
        if not line:
            return None
        head = self.ordered(type_key)[0]
        aside = self.set_aside(
            type_key, head.candidates, head.holder.user, head.groups, until=head.until
        )[0]
        if not aside or head.holder.shared:
            return None
        return max(len(self.book.free(head.candidates)) - aside, 0)

    def _serve_behind(self, type_key: str, line: list[Ticket]) -> None:
        """Serve, behind a head held back by bookings, those the held-back GPUs are lent to
        (the booking's own users, work gone in time), leaving the head what it may take."""
        for ticket in self.ordered(type_key)[1:]:
            room = self._held_back(type_key)
            if room is None:
                return
            aside = self.set_aside(
                type_key, ticket.candidates, ticket.holder.user, ticket.groups, until=ticket.until
            )[0]
            self._grant(line, ticket, aside + room)

    def _grant(self, line: list[Ticket], ticket: Ticket, aside: int) -> bool:
        """Serve ``ticket`` if enough are free; whether it was."""
        try:
            devices = self._allocate(
                ticket.key, ticket.gpus, ticket.candidates, ticket.holder, aside
            )
        except NotEnoughGPUs:
            return False
        line.remove(ticket)
        ticket.granted.set_result(devices)
        return True

    async def _serve_while_waiting(self) -> None:
        while any(self.lines.values()):
            await asyncio.sleep(SERVE_EVERY)
            with contextlib.suppress(Exception):  # a bad look at the book: try again
                self.serve()
