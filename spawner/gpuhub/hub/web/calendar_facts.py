"""The calendar's facts (:mod:`gpuhub.hub.web.calendar`): per GPU type, what is held and
until when, what waits and from when, and what is booked, gathered from the GPU monitor and
the book of bookings without I/O (docs/architecture.md, "When, not only where")."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any

from gpuhub.core.bookings import Booking
from gpuhub.hub.ledger.booking_book import BookingBook
from gpuhub.hub.monitor.booking_watch import plan
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor

HOUR = 3600.0


@dataclass(frozen=True)
class Period:
    """One way to look ahead: ``slots`` bars of ``seconds`` each, from the current one."""

    key: str  # "day", "week"
    title: str
    slots: int
    seconds: float
    label_every: int  # an axis label on every n-th bar


PERIODS = (
    Period("day", "Next 24 hours", 24, HOUR, 3),
    Period("week", "Next 7 days", 28, 6 * HOUR, 4),
)


@dataclass(frozen=True)
class Item:
    """One line of the calendar: GPUs of a type, from ``start`` to ``end``."""

    kind: str  # "held", "waiting", "booked"
    gpu_type: str  # display name
    gpus: float
    start: float
    end: float
    end_known: bool  # a stop or a booking's end; False: a likely end
    user: str = ""  # the holder, or whom a booking is for
    group: str = ""  # a group's booking: its group
    what: str = ""  # "server 'default'"; a booking's reason
    why: str = ""  # what stops a holding at ``end``: "idle", "budget", "share"
    booked_by: str = ""

    @functools.cached_property
    def _hash(self) -> int:
        fields = (self.kind, self.gpu_type, self.gpus, self.start, self.end, self.end_known)
        return hash((*fields, self.user, self.group, self.what, self.why, self.booked_by))

    def __hash__(self) -> int:
        """Worked out once: items key the lines kept from one gathering to the next."""
        return self._hash


@dataclass(frozen=True)
class TypeFacts:
    name: str
    total: float
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Facts:
    """Everything the calendar shows, gathered at ``now`` (immutable: shared by requests)."""

    now: float
    types: tuple[TypeFacts, ...]
    # The book's rules and GPU types (key -> display name, GPUs) for the Book form.
    bookable: tuple[tuple[str, str, int], ...] = ()
    booking_on: bool = False
    rules: Any = None  # gpuhub.core.bookings.BookingRules
    key: tuple[Any, ...] = ()
    # Each (period, type)'s strip and table, rendered once: the same for every viewer.
    shared: dict[tuple[str, str], str] = field(default_factory=dict)


STOP_WORDS = {
    "idle": "stopped then for idleness",
    "budget": "stopped then: its GPU-hour budget ends",
    "share": "stopped then: over its share of GPU memory",
    "booking": "stopped then for a booking",
}


def _stops(
    monitor: GPUMonitor, book: BookingBook, now: float
) -> dict[tuple[str, str, str], tuple[float, str]]:
    """Every holding's known stop (when, why), as :meth:`GPUMonitor.stops` has them for one
    user, for all holders in one pass over the holdings; and work warned for a booking
    (:func:`gpuhub.hub.monitor.booking_watch.plan`), stopped at its start."""
    found: dict[tuple[str, str, str], tuple[float, str]] = {}

    def add(key: tuple[str, str, str], when: float, why: str) -> None:
        if key not in found or when < found[key][0]:
            found[key] = (when, why)

    clocks = monitor.clocks.clocks if monitor.clocks is not None else {}
    watch = monitor.budget_watch
    mono = time.monotonic()
    graces: dict[str, float | None] = {}
    for key, track in monitor.tracks.items():
        clock = clocks.get(track.launch()) if clocks else None
        if clock is not None and clock.deadline is not None and not clock.reclaimed:
            add(key, clock.deadline, "idle")
        if watch is not None and watch.at_limit == "refuse":
            if key[0] not in graces:
                graces[key[0]] = watch.deadline(key[0], mono, now)
            grace = graces[key[0]]
            if grace is not None:
                add(key, grace, "budget")
    if monitor.shares is not None:
        for key in monitor.shares.over:
            if key in monitor.tracks:
                add(key, monitor.shares.deadline(key), "share")
    if book.bookings:  # work warned for a booking stops at its start
        held = [track.holding for track in monitor.tracks.values()]
        free = {name: int(figures[0]) for name, figures in monitor.capacity.items()}
        lead = book.lead()
        for booking, h in plan(book.bookings.values(), held, free, now, lead, book.is_for):
            add((h.user, h.kind, h.name), booking.start, "booking")
    return found


# Each holding's item as last gathered, with what it was made from and when: a tick changes
# few holdings, so most items are taken again as they were (and their lines with them).
_HELD: dict[tuple[str, str, str], tuple[tuple[Any, ...], float, Item]] = {}


def gather(monitor: GPUMonitor, book: BookingBook, now: float) -> Facts:
    """The calendar's facts from the monitor's holdings and the book (no I/O)."""
    durations = monitor.eta.durations
    stops = _stops(monitor, book, now)
    by_type: dict[str, list[Item]] = {}
    held: dict[tuple[str, str, str], tuple[tuple[Any, ...], float, Item]] = {}
    for key, track in monitor.tracks.items():
        h = track.holding
        stop = stops.get(key)
        same = (h.since, h.gpus, h.share, h.gpu_type, h.what, stop)
        memo = _HELD.get(key)
        # A holding as it was, its end still to come: the same item (its likely end is
        # worked out again every LIKELY_STEP, the rest only when something changes).
        steady = memo is not None and memo[0] == same and memo[2].end > now
        if memo is not None and steady and (stop is not None or now - memo[1] < LIKELY_STEP):
            held[key] = memo
            by_type.setdefault(memo[2].gpu_type, []).append(memo[2])
            continue
        name = h.gpu_type or "GPU"
        since = h.since if h.since is not None else now
        if stop is not None:
            end, known, why = max(stop[0], now), True, stop[1]
        else:
            left = durations.curve(h.user, (), name).median_left(max(now - since, 0.0))
            end, known, why = _likely(now + left), False, ""
        item = Item("held", name, float(h.amount), since, end, known, h.user, what=h.label, why=why)
        held[key] = (same, now, item)
        by_type.setdefault(name, []).append(item)
    _HELD.clear()
    _HELD.update(held)
    estimates = monitor.eta.estimates
    fresh: dict[str, float] = {}  # a type's median fresh hold, worked out once per type
    for key, h in monitor.waiting.items():
        name = h.gpu_type or "GPU"
        found = estimates.get(key)
        start = _likely(max(found.likely, now) if found is not None else now)
        hold = fresh.get(name)
        if hold is None:
            hold = fresh[name] = durations.curve("", (), name).median_left(0.0)
        by_type.setdefault(name, []).append(
            Item(
                "waiting",
                name,
                float(h.amount),
                start,
                _likely(start + hold),
                False,
                h.user,
                what=h.label,
            )
        )
    names = dict(monitor.type_names)
    for booking in _bookings(book, now):
        name = booking.type_name or names.get(booking.gpu_type, booking.gpu_type)
        by_type.setdefault(name, []).append(
            Item(
                "booked",
                name,
                float(booking.gpus),
                booking.start,
                booking.end,
                True,
                booking.for_user,
                booking.for_group,
                booking.reason,
                booked_by=booking.booked_by,
            )
        )
    totals = {name: float(total) for name, (_, total) in monitor.capacity.items()}
    types = tuple(
        TypeFacts(name, totals.get(name, 0.0), tuple(sorted(items, key=_order)))
        for name in sorted({*totals, *by_type})
        for items in (by_type.get(name, []),)
    )
    bookable: list[tuple[str, str, int]] = []
    try:
        gpu_types = monitor.spawner.gpu_policy.gpu_types
    except Exception:  # an admin's mistake is reported where the form renders
        gpu_types = {}
    for type_key, gpu_type in gpu_types.items():
        total = int(totals.get(gpu_type.display_name, 0))
        if total >= 1:
            bookable.append((type_key, gpu_type.display_name, total))
    return Facts(now, types, tuple(bookable), book.rules is not None, book.rules)


LIKELY_STEP = 300.0  # likely moments are said to 5 minutes: estimates, and steady lines


def _likely(when: float) -> float:
    """A likely moment, rounded up to :data:`LIKELY_STEP`: what it says is an estimate, and a
    line that says the same from one gathering to the next is written once (:data:`_LINES`)."""
    return math.ceil(when / LIKELY_STEP) * LIKELY_STEP


def _order(item: Item) -> tuple[float, int, str, str]:
    return (item.start, ("held", "waiting", "booked").index(item.kind), item.user, item.what)


def _bookings(book: BookingBook, now: float) -> list[Booking]:
    """The bookings not yet ended (read only: the book prunes and saves on its own)."""
    return [b for b in list(book.bookings.values()) if b.end > now]
