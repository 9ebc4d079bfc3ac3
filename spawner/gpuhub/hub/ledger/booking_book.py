"""The hub's book of GPU bookings, kept in ``gpu_bookings_file`` beside its database.

One book per hub process (:data:`BOOKINGS`), shared by the bookings endpoint
(:mod:`gpuhub.hub.web.bookings`), the line (:mod:`gpuhub.hub.ledger.line`), which sets booked
GPUs aside for their bookers, and the monitor's booking watch
(:mod:`gpuhub.hub.monitor.booking_watch`), which warns and stops work still on them. Every
change is written at once, atomically (:func:`gpuhub.hub.ledger.statefile.write_json`); a
damaged file is set aside, logged in one line, and the hub goes on with what it could read.
Ended bookings are pruned (docs/architecture.md, "Bookings").
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from gpuhub.core.bookings import Booking, BookingRules
from gpuhub.core.policy import PolicyConfigError
from gpuhub.hub.ledger.statefile import kind_of, restore_json, write_json

log = logging.getLogger(__name__)

VERSION = 1


def no_groups(_user: str) -> Collection[str]:
    return ()


class BookingBook:
    """The bookings not yet ended, by id."""

    def __init__(self) -> None:
        self.bookings: dict[str, Booking] = {}
        self.path: Path | None = None
        self.rules: BookingRules | None = None
        # A user's groups (the hub's database), for group bookings: set by the spawner.
        self.groups_of: Callable[[str], Collection[str]] = no_groups
        self.version = 0  # bumped at every change (the monitor's watch looks again)

    def open(self, path: str | os.PathLike[str] | None) -> None:
        """Read the bookings a previous hub process left in ``path`` (once per path)."""
        if not path:
            return
        resolved = Path(path).resolve()
        if self.path == resolved:
            return
        self.path = resolved
        damage = restore_json(resolved, self._restore)
        if self.prune() and damage is None:
            self.save()
        if damage is not None:
            log.error(
                damage.sentence(
                    "the bookings file",
                    f"goes on with the {len(self.bookings)} bookings it could read",
                )
            )
            self.save()

    def _restore(self, data: Any) -> list[str]:
        if not isinstance(data, dict) or not isinstance(data.get("bookings"), list):
            return [f"expected an object with a list of bookings, found {kind_of(data)}"]
        problems = []
        for n, entry in enumerate(data["bookings"], 1):
            try:
                booking = Booking.from_state(entry)
            except ValueError as exc:
                problems.append(f"booking {n}: {exc}")
                continue
            self.bookings[booking.id] = booking
        return problems

    def save(self) -> None:
        """Write the book; a failure is logged (the bookings stay in the hub's memory)."""
        if self.path is None:
            return
        entries = [b.to_state() for b in sorted(self.bookings.values(), key=lambda b: b.start)]
        try:
            write_json(self.path, {"version": VERSION, "bookings": entries})
        except OSError as exc:
            log.error(
                "gpuhub: cannot write the bookings file %s (%s); the bookings stay in the "
                "hub's memory until the next change is written",
                self.path,
                exc,
            )

    def prune(self, now: float | None = None) -> list[Booking]:
        """Forget bookings that have ended; returns them."""
        now = time.time() if now is None else now
        ended = [b for b in self.bookings.values() if b.end <= now]
        for booking in ended:
            del self.bookings[booking.id]
        if ended:
            self.version += 1
        return ended

    def all(self, now: float | None = None) -> list[Booking]:
        """Every booking not yet ended, soonest first."""
        if self.prune(now):
            self.save()
        return sorted(self.bookings.values(), key=lambda b: (b.start, b.id))

    def add(self, booking: Booking) -> None:
        self.bookings[booking.id] = booking
        self.version += 1
        self.save()

    def remove(self, booking_id: str) -> Booking | None:
        booking = self.bookings.pop(booking_id, None)
        if booking is not None:
            self.version += 1
            self.save()
        return booking

    def lead(self) -> float:
        """Seconds before a start when booked GPUs are no longer lent (``warn_before``)."""
        return self.rules.warn_before if self.rules is not None else 0.0

    def setting_aside(self, gpu_type: str, now: float) -> list[Booking]:
        """The bookings of a type (its key) whose GPUs are set aside now: those running, and
        those starting within :meth:`lead` (their GPUs are lent no more)."""
        lead = self.lead()
        return [
            b
            for b in self.bookings.values()
            if b.gpu_type == gpu_type and b.start - lead <= now < b.end
        ]

    def in_the_way(self, gpu_type: str, now: float, until: float) -> list[Booking]:
        """The bookings of a type (its key) whose GPUs work gone by ``until`` may not take
        now: those running, and those whose GPUs are lent no more (from :meth:`lead` before
        their start) at some instant up to ``until``. Work of unknown end gives
        ``math.inf``: every booking not yet ended is in its way."""
        lead = self.lead()
        return [
            b
            for b in self.bookings.values()
            if b.gpu_type == gpu_type and b.start - lead <= max(until, now) and now < b.end
        ]

    def is_for(self, booking: Booking, user: str, groups: Collection[str] | None = None) -> bool:
        """Whether ``user`` (in ``groups``, looked up when not given) is whom it is for."""
        if booking.for_user:
            return booking.for_user == user
        if groups is None:
            try:
                groups = self.groups_of(user)
            except Exception:
                groups = ()
        return booking.for_group in groups


# The one book of this hub process.
BOOKINGS = BookingBook()
_RULES: dict[str, BookingRules | None] = {}


def rules_of(spawner: Any) -> BookingRules | None:
    """The spawner's ``bookings``, checked once per distinct setting (raises
    :class:`~gpuhub.core.policy.PolicyConfigError` naming the mistake)."""
    value = getattr(spawner, "bookings", None)
    key = json.dumps(value, sort_keys=True, default=str)
    if key not in _RULES:
        _RULES[key] = BookingRules.from_config(value)
    return _RULES[key]


def attach(spawner: Any) -> BookingBook:
    """The hub's book with ``spawner``'s rules (none when they are not valid: the hub's start
    said why), its file opened and the hub's users' groups to look up."""
    try:
        BOOKINGS.rules = rules_of(spawner)
    except PolicyConfigError:
        BOOKINGS.rules = None
    BOOKINGS.open(getattr(spawner, "gpu_bookings_file", "") or None)
    user = getattr(spawner, "user", None)
    users = getattr(user, "settings", {}).get("users") if user is not None else None
    if users is not None:

        def groups_of(name: str) -> Collection[str]:
            try:
                return [g.name for g in users[name].groups]
            except KeyError:
                return ()

        BOOKINGS.groups_of = groups_of
    return BOOKINGS
