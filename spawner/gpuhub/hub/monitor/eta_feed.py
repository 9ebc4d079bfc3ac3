"""The monitor's side of estimated starts: gathers what the hub knows, learns hold durations.

Each monitor tick (and each refresh after a stop or a start) hands the facts of every GPU
type's line to :func:`gpuhub.hub.monitor.eta.estimate` (pure) and keeps the answers for the
holdings API, the spawn page and the form. Holds that ended since the last look teach
:class:`gpuhub.hub.monitor.hold_durations.Durations`, kept in a state file beside ``gpu_usage_file``
(written atomically, as the ledger's and usage files are; a damaged one is set aside and
learning starts again from the prior). docs/architecture.md, "When, not only where".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuhub.core.bookings import Booking
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.booking_book import BOOKINGS
from gpuhub.hub.ledger.statefile import restore_json, write_json
from gpuhub.hub.monitor.booking_watch import plan
from gpuhub.hub.monitor.eta import (
    HARD_SLACK,
    STOP_LAG,
    Estimate,
    Held,
    Line,
    Waiter,
    by_booking,
    estimate,
)
from gpuhub.hub.monitor.hold_durations import Curve, Durations

log = logging.getLogger("gpuhub.hub.monitor.eta_feed")

HoldingKey = tuple[str, str, str]  # (user, kind, name), as the monitor keys holdings
SAVE_EVERY = 30.0  # seconds between writes of what was learned
RENEW_EVERY = 60.0  # seconds between remaking the curves with what was learned


def durations_path(usage_file: Path | None) -> Path | None:
    """Where learned hold durations live: beside the usage file (None: memory only)."""
    if usage_file is None:
        return None
    return usage_file.with_name(f"{usage_file.stem}-hold-durations.json")


class EtaFeed:
    """Learned durations and the last estimates of one hub (see the module docstring)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.durations = Durations()
        self.estimates: dict[HoldingKey, Estimate] = {}  # replaced, never changed
        self.free_at: dict[str, Estimate] = {}  # GPU type display name -> a newcomer's start
        # Held now: since, GPU type, and whether idle reclaim is stopping it.
        self._seen: dict[HoldingKey, tuple[float, str, bool]] = {}
        self._dirty = False
        self._saved = self._renewed = time.monotonic()
        if path is not None:
            damage = restore_json(path, self._restore)
            if damage is not None:
                log.error(
                    damage.sentence("the learned hold durations file", "starts learning again")
                )

    def _restore(self, data: Any) -> list[str]:
        self.durations, problems = Durations.from_json(data)
        return problems

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        try:
            write_json(self.path, self.durations.as_json())
        except OSError as exc:
            log.warning("gpuhub: cannot save learned hold durations to %s: %s", self.path, exc)
            return
        self._dirty, self._saved = False, time.monotonic()

    def learn(
        self,
        held: Mapping[HoldingKey, Holding],
        now: float,
        groups_of: Any,
        reclaimed: Callable[[HoldingKey], bool] = lambda key: False,
    ) -> None:
        """Holds seen before and gone now (or launched again) ended: learn how long they
        lasted, per user, group and GPU type; one that idle reclaim was stopping when last
        seen (``reclaimed``) was cut short (:meth:`Durations.learn`)."""
        for key, (since, gpu_type, cut_short) in self._seen.items():
            holding = held.get(key)
            if holding is not None and holding.since == since:
                continue
            self.durations.learn(
                key[0], groups_of(key[0]), gpu_type, now - since, cut_short=cut_short
            )
            self._dirty = True
        self._seen = {
            key: (h.since, h.gpu_type or "GPU", reclaimed(key))
            for key, h in held.items()
            if h.since is not None
        }

    def observe(self, monitor: Any, now: float, mono: float) -> None:
        """Learn from what ended and estimate every wait again, from ``monitor``'s view
        (:class:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor`)."""
        groups: dict[str, list[str]] = {}

        def groups_of(user: str) -> list[str]:
            if user not in groups:
                try:
                    groups[user] = list(monitor._groups(user))
                except Exception:
                    groups[user] = []
            return groups[user]

        held = {key: track.holding for key, track in monitor.tracks.items()}
        self.learn(held, now, groups_of, _reclaimed(monitor))
        if time.monotonic() - self._renewed >= RENEW_EVERY:
            running = [
                (h.user, groups_of(h.user), h.gpu_type or "GPU", max(now - h.since, 0.0))
                for h in held.values()
                if h.since is not None
            ]
            self.durations.renew(running)
            self._renewed = time.monotonic()
        lines = self._lines(monitor, held, now, mono, groups_of)
        estimates: dict[HoldingKey, Estimate] = {}
        free_at: dict[str, Estimate] = {}
        for name, line in lines.items():
            found, newcomer = estimate(line, now, self.durations.curve("", [], name))
            estimates.update(found)
            if newcomer is not None:
                free_at[name] = newcomer
        self._own_bookings(monitor, held, estimates, now)
        self.estimates, self.free_at = estimates, free_at
        if self._dirty and time.monotonic() - self._saved >= SAVE_EVERY:
            self.save()

    def _lines(
        self,
        monitor: Any,
        held: Mapping[HoldingKey, Holding],
        now: float,
        mono: float,
        groups_of: Any,
    ) -> dict[str, Line]:
        """Each GPU type's facts: what exists, who holds it until when, who waits in order."""
        clocks, rule = monitor.clocks, monitor.rule
        watch = monitor.budget_watch
        deadlines: dict[str, float | None] = {}

        def grace_end(user: str) -> float | None:
            if watch is None:
                return None
            if user not in deadlines:
                deadlines[user] = watch.deadline(user, mono, now)
            return deadlines[user]

        by_type: dict[str, list[Held]] = {}
        bookings = [b for b in BOOKINGS.bookings.values() if b.end > now]
        gone = self._booked(monitor, bookings, held, now, groups_of, by_type)
        for key, holding in held.items():
            if key in gone:
                continue  # stopped now for a running booking (its users' hold replaces it)
            name = holding.gpu_type or "GPU"
            curve = self.durations.curve(holding.user, groups_of(holding.user), name)
            soft = None
            track = monitor.tracks.get(key)
            clock = clocks.clocks.get(track.launch()) if clocks is not None and track else None
            if clock is not None and not clock.reclaimed and rule is not None:
                if clock.deadline is not None:
                    soft = clock.deadline
                elif clock.idle_since is not None:
                    soft = clock.idle_since + rule.after + rule.warn
            hard, why = None, ""
            end = grace_end(holding.user)
            if end is not None and watch.at_limit == "refuse":
                hard, why = end, "budget"
            elif end is not None:  # idle_only: stopped if someone within budget waits
                soft = end if soft is None else min(soft, end)
            by_type.setdefault(name, []).append(
                Held(holding.gpus, holding.since or now, curve, hard, why, soft)
            )
        order, fair = _order(monitor)
        waiting: dict[str, list[Waiter]] = {}
        rank = {key: i for i, key in enumerate(order)}
        listed = sorted(
            monitor.waiting.items(),
            key=lambda item: (rank.get(item[0], len(rank)), item[1].since or now),
        )
        for key, holding in listed:
            name = holding.gpu_type or "GPU"
            user = holding.user
            curve = self.durations.curve(user, groups_of(user), name)
            waiting.setdefault(name, []).append(
                Waiter(
                    key,
                    holding.gpus,
                    holding.since or now,
                    curve,
                    _budget_hold(monitor, holding, now),
                )
            )
        interval = float(getattr(monitor, "interval", 0) or 0)
        lag = STOP_LAG + interval / 2  # a stop is seen at the next tick: half one, mostly
        lines = {}
        for name in {*by_type, *waiting, *monitor.capacity}:
            total = int(monitor.capacity.get(name, (0, 0))[1])
            if not waiting.get(name) and monitor.capacity.get(name, (1, 0))[0] >= 1:
                continue  # nobody waits and some are free: nothing to estimate
            lines[name] = Line(
                name,
                total,
                tuple(by_type.get(name, ())),
                tuple(waiting.get(name, ())),
                fair,
                lag,
                HARD_SLACK + interval,
                booked=tuple(
                    (b.start, b.end, b.gpus) for b in bookings if (b.type_name or "GPU") == name
                ),
                booked_curve=self.durations.curve("", [], name),
            )
        return lines

    def _own_bookings(
        self,
        monitor: Any,
        held: Mapping[HoldingKey, Holding],
        estimates: dict[HoldingKey, Estimate],
        now: float,
    ) -> None:
        """A wait that its user's own booking covers (its GPUs beside what they hold of the
        type) starts by the booking's start at the latest (:func:`gpuhub.hub.monitor.eta.by_booking`)."""
        if not BOOKINGS.bookings:
            return
        slack = HARD_SLACK + float(getattr(monitor, "interval", 0) or 0)
        for key, waiting in monitor.waiting.items():
            if key not in estimates:
                continue
            name = waiting.gpu_type or "GPU"
            holds = sum(
                h.gpus for h in held.values() if h.user == waiting.user and h.gpu_type == name
            )
            covering = [
                b
                for b in BOOKINGS.bookings.values()
                if b.for_user == waiting.user
                and (b.type_name or "GPU") == name
                and b.gpus >= waiting.gpus + holds
                and b.end > now
            ]
            if covering:
                first = min(covering, key=lambda b: b.start)
                estimates[key] = by_booking(estimates[key], first.start, first.end, now, slack)

    def _booked(
        self,
        monitor: Any,
        bookings: list[Booking],
        held: Mapping[HoldingKey, Holding],
        now: float,
        groups_of: Any,
        by_type: dict[str, list[Held]],
    ) -> set[HoldingKey]:
        """Running bookings: the holdings stopped for them (returned), and the GPUs they
        still owe, held from now by their users as a fresh hold (added to ``by_type``)."""
        running = [b for b in bookings if b.start <= now]
        if not running:
            return set()

        def is_for(booking: Booking, user: str) -> bool:
            return BOOKINGS.is_for(booking, user, groups_of(user))

        free = {name: int(figures[0]) for name, figures in monitor.capacity.items()}
        gone: set[HoldingKey] = {
            (h.user, h.kind, h.name)
            for _, h in plan(running, held.values(), free, now, 0.0, is_for)
        }
        for booking in running:
            name = booking.type_name or "GPU"
            owed = booking.gpus - sum(
                h.gpus for h in held.values() if h.gpu_type == name and is_for(booking, h.user)
            )
            if owed > 0:
                curve = self.durations.curve("", [], name)
                by_type.setdefault(name, []).append(Held(owed, now, curve))
        return gone

    def sentence(self, key: HoldingKey, now: float | None = None) -> str:
        """The estimate of one waiting request in words ("" when there is none yet)."""
        found = self.estimates.get(key)
        return found.sentence(time.time() if now is None else now) if found else ""


def _reclaimed(monitor: Any) -> Callable[[HoldingKey], bool]:
    """Whether idle reclaim is stopping a holding now (its clock says so)."""
    clocks = getattr(monitor, "clocks", None)

    def reclaimed(key: HoldingKey) -> bool:
        track = monitor.tracks.get(key)
        clock = clocks.clocks.get(track.launch()) if clocks is not None and track else None
        return bool(clock is not None and clock.reclaimed)

    return reclaimed


def _order(monitor: Any) -> tuple[list[HoldingKey], bool]:
    """The order the line serves its requests in (a workstation's line), and whether it is
    fair (others may still pass); where there is no such line (Kueue's queue), by arrival."""
    line: Any = getattr(monitor.ledger, "source", None)
    lines = getattr(line, "lines", None)
    if line is None or not isinstance(lines, dict):
        return [], False
    keys: list[HoldingKey] = []
    for type_key in list(lines):
        for ticket in line.ordered(type_key):
            keys.append((ticket.holder.user, "server", ticket.holder.name))
    return keys, bool(getattr(getattr(line, "order", None), "fair", False))


def _budget_hold(monitor: Any, holding: Holding, now: float) -> float | None:
    """The longest a waiting request may hold its GPUs once it starts: what its user's
    budget leaves, spread over its GPUs, plus the grace (None: no budget stops it)."""
    watch = monitor.budget_watch
    if watch is None or watch.at_limit != "refuse" or not holding.gpus:
        return None
    try:
        state = monitor.budget_state(holding.user, now=now)
    except Exception:
        return None
    if state is None:
        return None
    left = max(float(state.allowed_seconds) - float(state.used_seconds), 0.0)
    return left / holding.gpus + float(watch.grace)


__all__ = ["Curve", "EtaFeed", "durations_path"]
