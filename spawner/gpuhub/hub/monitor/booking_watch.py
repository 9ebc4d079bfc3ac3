"""Work on booked GPUs: warned ``warn_before`` seconds before a booking starts, stopped at its
start like an idle reclaim, the booking named in both notices (docs/architecture.md,
"Bookings").

:func:`plan` decides, without I/O, which holdings stand in a booking's way: a booking owes
its GPUs less those whom it is for hold already; free GPUs pay that first, and what is still
short is taken from holders that no running or coming booking of the type is for, the
newest first (they lose the least work). :func:`watch`, called by the monitor each tick and
when a booking is made, warns them ahead of the start (a notice of kind ``"booking"``, gone
by itself when they no longer stand in the way) and stops them from the start on
(servers as :meth:`~gpuhub.hub.monitor.gpu_monitor.GPUMonitor.stop_server` does, job holds as
its ``cancel_job``), with ``by = "booking"``. The line (:mod:`gpuhub.hub.ledger.line`) then
hands the freed GPUs to the booking's users first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from gpuhub.core import words
from gpuhub.core.bookings import Booking
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.booking_book import BOOKINGS, BookingBook
from gpuhub.hub.monitor import booking_queues
from gpuhub.hub.monitor.usage import Notice, UsageStore


class GPUMonitor(Protocol):
    """What the watch reads and calls of :class:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor`
    (which calls the watch, so the watch does not import it)."""

    @property
    def tracks(self) -> Mapping[Any, Any]: ...  # holding key -> Track, with its ``holding``

    @property
    def capacity(self) -> Mapping[str, tuple[float, float]]: ...  # type name -> (free, total)

    @property
    def store(self) -> UsageStore: ...

    @property
    def _tasks(self) -> set[asyncio.Future[Any]]: ...

    def _groups(self, name: str) -> list[str]: ...

    def _user(self, name: str) -> Any: ...

    def budget_state(
        self, user: str, groups: list[str] | None = None, now: float | None = None
    ) -> Any: ...  # a BudgetState, or None where no budget applies

    async def stop_server(self, user: Any, server: str, reason: str, *, by: str) -> bool: ...

    async def cancel_job(self, user: str, name: str, reason: str, *, by: str) -> list[str]: ...


log = logging.getLogger(__name__)

BOOKING = "booking"  # a notice's ``by`` (stopped for a booking) and a warning's ``kind``
# (user, server or job name) -> the booking it was warned for, in this hub process
_WARNED: dict[tuple[str, str], str] = {}
# (user, kind, name) of what was warned -> when its booking starts, when it will be stopped
_DUE: dict[tuple[str, str, str], float] = {}


def due(user: str) -> dict[tuple[str, str, str], float]:
    """``user``'s holdings warned to make way for a booking: when each will be stopped (the
    booking's start, epoch seconds), for the holdings answer's ``stops_at``."""
    return {key: when for key, when in _DUE.items() if key[0] == user}


def plan(
    bookings: Iterable[Booking],
    held: Iterable[Holding],
    free: Mapping[str, int],
    now: float,
    lead: float,
    is_for: Callable[[Booking, str], bool],
    borrows: Callable[[str], bool] = lambda user: False,
) -> list[tuple[Booking, Holding]]:
    """The holdings in the way of bookings running now or starting within ``lead`` seconds,
    each with the booking it is in the way of. ``free``: free GPUs by type display name.
    ``borrows(user)``: whether the user's work runs ``idle_only`` (over an ``idle_only``
    GPU-hour budget), which is stopped first; then the newest."""
    near = sorted(
        (b for b in bookings if b.start - lead <= now < b.end), key=lambda b: (b.start, b.id)
    )
    held = [h for h in held if h.held and h.gpus]
    left = dict(free)
    chosen: list[tuple[Booking, Holding]] = []
    taken: set[tuple[str, str, str]] = set()
    for booking in near:
        of_type = [h for h in held if h.gpu_type == booking.type_name]
        owed = booking.gpus - sum(h.gpus for h in of_type if is_for(booking, h.user))
        if owed <= 0:
            continue
        use = min(left.get(booking.type_name, 0), owed)
        left[booking.type_name] = left.get(booking.type_name, 0) - use
        short = owed - use
        booked_for = [b for b in near if b.type_name == booking.type_name]
        others = [
            h
            for h in of_type
            if (h.user, h.kind, h.name) not in taken
            and not any(is_for(b, h.user) for b in booked_for)
        ]
        for holding in sorted(others, key=lambda h: (not borrows(h.user), -(h.since or 0.0))):
            if short <= 0:
                break
            taken.add((holding.user, holding.kind, holding.name))
            chosen.append((booking, holding))
            short -= holding.gpus
    return chosen


def _what(holding: Holding) -> str:
    return f"server {holding.name!r}" if holding.kind == "server" else holding.label


def reason(booking: Booking, holding: Holding) -> str:
    """Why it is stopped, for the notice: "its 1 Simulated GPU is booked from ... (booking
    b-1a2b)"."""
    return (
        f"{'its' if holding.kind == 'server' else 'their'} "
        f"{words.gpus(holding.gpus, holding.gpu_type)} "
        f"{'is' if holding.gpus == 1 else 'are'} booked {booking.window()} "
        f"(booking {booking.id})"
    )


def warning(booking: Booking, holding: Holding, now: float) -> str:
    minutes = max(0, round((booking.start - now) / 60))
    return (
        f"Your {_what(holding)} holds {words.gpus(holding.gpus, holding.gpu_type)} booked "
        f"{booking.window()} (booking {booking.id}); it will be stopped on "
        f"{words.moment_utc(booking.start)} (in about {minutes} min). Save your work before then."
    )


async def watch(
    monitor: GPUMonitor, now: float | None = None, book: BookingBook = BOOKINGS
) -> None:
    """Warn and stop what stands in bookings' way (see the module docstring); a failure is
    logged, never stops the monitor's tick. On a hub whose GPU servers wait in Kueue, Kueue
    keeps the bookings instead: their quota is moved into queues of their own
    (:mod:`gpuhub.hub.monitor.booking_queues`) and Kueue preempts what borrows it, so gpuhub
    neither warns nor stops work there itself."""
    now = time.time() if now is None else now
    spawner = getattr(monitor, "spawner", None)
    if booking_queues.is_kueue_hub(spawner):
        book.prune(now)
        bookings = list(book.bookings.values())
        await booking_queues.watch(spawner, bookings, now, book.rules is not None)
        return
    try:
        _watch(monitor, now, book)
    except Exception:
        log.exception("gpuhub: could not look at what stands in bookings' way")


def _borrows(monitor: GPUMonitor, now: float) -> Callable[[str], bool]:
    """Whether a user's work runs ``idle_only``: over a GPU-hour budget whose ``at_limit``
    is ``idle_only`` (its GPUs are lent, reclaimed first; docs/architecture.md, "Bookings")."""
    watch = getattr(monitor, "budget_watch", None)
    if watch is None or watch.at_limit != "idle_only":
        return lambda user: False
    found: dict[str, bool] = {}

    def borrows(user: str) -> bool:
        if user not in found:
            try:
                state = monitor.budget_state(user, now=now)
            except Exception:
                state = None
            found[user] = bool(state is not None and state.over)
        return found[user]

    return borrows


def _watch(monitor: GPUMonitor, now: float, book: BookingBook) -> None:
    book.prune(now)
    held = [track.holding for track in monitor.tracks.values()]
    free = {name: int(figures[0]) for name, figures in monitor.capacity.items()}
    found = plan(
        book.bookings.values(),
        held,
        free,
        now,
        book.lead(),
        _is_for(monitor, book),
        _borrows(monitor, now),
    )
    warned_now: set[tuple[str, str]] = set()
    for booking, holding in found:
        if now >= booking.start:
            _later(monitor, _stop(monitor, booking, holding))
            continue
        warned_now.add((holding.user, holding.name))
        _DUE[(holding.user, holding.kind, holding.name)] = booking.start
        if _WARNED.get((holding.user, holding.name)) != booking.id:
            _WARNED[(holding.user, holding.name)] = booking.id
            log.warning(
                "gpuhub: %s's %s holds GPUs of booking %s; warned, stopped at %s",
                holding.user,
                holding.label,
                booking.id,
                words.moment_utc(booking.start),
            )
            monitor.store.notify(
                holding.user,
                Notice(
                    holding.name,
                    now,
                    warning(booking, holding, now),
                    holding.gpus,
                    holding.gpu_type or "GPU",
                    by=BOOKING,
                    kind=BOOKING,
                ),
            )
    for key in [k for k in _WARNED if k not in warned_now]:
        del _WARNED[key]  # no longer in the way (or stopped): its warning goes
        monitor.store.clear_notice(key[0], key[1], BOOKING)
    for due_key in [k for k in _DUE if (k[0], k[2]) not in warned_now]:
        del _DUE[due_key]


def _is_for(monitor: GPUMonitor, book: BookingBook) -> Callable[[Booking, str], bool]:
    """Whether a booking is for a user, with the hub's groups read once per user per look."""
    groups: dict[str, list[str]] = {}

    def is_for(booking: Booking, user: str) -> bool:
        if booking.for_user:
            return booking.for_user == user
        if user not in groups:
            groups[user] = monitor._groups(user)
        return book.is_for(booking, user, groups[user])

    return is_for


def _later(monitor: GPUMonitor, work: Any) -> None:
    task = asyncio.ensure_future(work)
    monitor._tasks.add(task)
    task.add_done_callback(monitor._tasks.discard)


async def _stop(monitor: GPUMonitor, booking: Booking, holding: Holding) -> None:
    """Stop a server, or end a job hold, in a booking's way; its warning goes."""
    from gpuhub.hub.monitor.cancel import CancelRefused

    why = reason(booking, holding)
    if holding.kind == "job":
        try:
            await monitor.cancel_job(holding.user, holding.name, why, by=BOOKING)
        except CancelRefused as exc:
            if exc.status != 409:  # 409: being ended already
                log.warning("gpuhub: could not end %s's %s: %s", holding.user, holding.label, exc)
            return
    else:
        user = monitor._user(holding.user)
        if user is None or not await monitor.stop_server(user, holding.name, why, by=BOOKING):
            return
    _WARNED.pop((holding.user, holding.name), None)
    _DUE.pop((holding.user, holding.kind, holding.name), None)
    monitor.store.clear_notice(holding.user, holding.name, BOOKING)
