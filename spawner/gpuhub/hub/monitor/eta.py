"""When a wait ends: an estimated start for every request waiting for GPUs (issue 38).

docs/architecture.md, "When, not only where". Pure: no clock, no file, no hub. The monitor
(:mod:`gpuhub.hub.monitor.eta_feed`) gathers the facts each tick and hands them here with
its ``now``; the benchmark (``python -m benchmarks eta``) and the unit tests hand their own.

An estimate is ``likely`` (the median of when it starts), ``by`` (the 80th percentile) and
``latest`` (from hard facts only: never passed, else None), with the sentences that say why.
It comes from, in order: the line (who is ahead and what they need), idle holders' reclaim
clocks (a clock is soft: a holder busy again keeps its GPUs), budgets running out (their
grace's end is hard), hard deadlines (a job's time limit; a booking's start or end later)
and how long holds last, learned per user, group and GPU type and *conditioned on how long a
hold has lasted*: a hold 3 hours old is not a fresh one (:class:`Durations`).

The maths: each GPU type's line is replayed a few dozen times on sampled hold ends (stratified
uniforms from a fixed seed, so the same facts always give the same answer): the n-th free GPU
goes to the head of the line, which then holds it for a sampled fresh hold, and so on down
the line. ``likely`` and ``by`` are the quantiles of the starts; ``latest`` is the same replay
with every hold at its hard end (infinite where there is none). The number of replays
shrinks with the line's length, so 1,000 waiting requests cost a few tens of milliseconds.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuhub.core import words
from gpuhub.core.words import clock
from gpuhub.hub.monitor.hold_durations import TABLE, Curve

STAY_IDLE = 0.9  # how likely an idle holder stays idle until its reclaim clock runs out
STOP_LAG = 30.0  # seconds from a hold's end to the next start running: the stop, the start
HARD_SLACK = 60.0  # seconds added to a hard end: the tick that sees it and the stop itself

LIKELY, BY = 0.5, 0.8
WORK = 6000  # samples x requests per line and tick: the cost bound (docs/architecture.md)
MIN_SAMPLES, MAX_SAMPLES = 11, 101


# -- the facts of one line --------------------------------------------------------------------
@dataclass(frozen=True)
class Held:
    """One holding of the type: ``gpus`` of it since ``since``, ending by its ``curve`` unless
    ``hard_end`` (a budget's grace ends, a job's deadline: it *will* end by then) or
    ``soft_end`` (its idle reclaim clock: it ends then *if it stays idle*) comes first."""

    gpus: int
    since: float
    curve: Curve
    hard_end: float | None = None
    hard_why: str = ""  # "budget", "deadline"
    soft_end: float | None = None


@dataclass(frozen=True)
class Waiter:
    """One request in line, in the order it will be served: ``gpus`` it needs, how its hold
    will last once it starts (``curve``), and the most it may hold them (``hard_hold``:
    what its budget leaves, plus grace; None: nothing bounds it)."""

    key: Any
    gpus: int
    since: float
    curve: Curve
    hard_hold: float | None = None


@dataclass(frozen=True)
class Line:
    """A GPU type's line as it stands: ``total`` GPUs, who holds them, who waits in what
    order (``fair``: others may still come and pass, so no ``latest``)."""

    name: str
    total: int
    held: tuple[Held, ...]
    waiting: tuple[Waiter, ...]
    fair: bool = False
    lag: float = STOP_LAG  # seconds from a hold's end to its GPUs being given again
    slack: float = HARD_SLACK  # the most that may pass from a hard end to the GPUs given
    # Bookings of the type not yet ended, (start, end, GPUs): their GPUs go to their users
    # first, so they bound no wait of others (a running one's users are among ``held``);
    # before the start they are lent only to a wait whose hold ends in time (``hard_hold``).
    booked: tuple[tuple[float, float, int], ...] = ()
    # How long the booking's users hold what they take at its start (None: until its end).
    booked_curve: Curve | None = None


@dataclass(frozen=True)
class Estimate:
    """When one request likely starts (median), by when (80th percentile), and at the latest
    (hard facts only; None: nothing bounds it), with the reasons, as sentences."""

    likely: float
    by: float
    latest: float | None
    because: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "likely": words.iso(self.likely),
            "by": words.iso(self.by),
            "latest": None if self.latest is None else words.iso(self.latest),
            "because": list(self.because),
        }

    def sentence(self, now: float) -> str:
        """The estimate in words (a waiting page, a form): :func:`gpuhub.core.words.start_sentence`."""
        return words.start_sentence(self.likely, self.by, self.latest, now)


def about(seconds: float) -> str:
    """ "about 2 hours", "about 40 minutes": a learned length, rounded as people say it."""
    if seconds >= 5400:
        return f"about {words.plural(round(seconds / 3600), 'hour')}"
    return f"about {words.plural(max(1, round(seconds / 60)), 'minute')}"


def estimate(
    line: Line, now: float, newcomer: Curve | None = None
) -> tuple[dict[Any, Estimate], Estimate | None]:
    """Every waiter's estimate, by key; and, with ``newcomer``, when one more request for one
    GPU that joined now would start (the form's "likely free around 14:30")."""
    waiting = list(line.waiting)
    if newcomer is not None:
        waiting.append(Waiter(_NEWCOMER, 1, now, newcomer))
    if not waiting:
        return {}, None
    total = max(line.total, 0)
    work = len(waiting) + len(line.held)
    samples = max(MIN_SAMPLES, min(MAX_SAMPLES, WORK // work)) | 1
    starts = _replay(line, waiting, total, now, samples)
    latest = _latest(line, waiting, total, now)
    reasons = _reasons(line, now)
    out: dict[Any, Estimate] = {}
    ahead_gpus = 0
    for i, waiter in enumerate(waiting):
        row = sorted(starts[i])
        likely = max(_quantile(row, LIKELY), now)
        by = max(_quantile(row, BY), likely)
        hard = latest[i]
        blocking = [b for b in line.booked if b[1] > now and (hard is None or b[0] < hard)]
        if blocking:
            hard = None  # booked GPUs go to the booking's users first, however long they hold
        if hard is not None:
            likely, by = min(likely, hard), min(by, hard)
        because = [_place(i, ahead_gpus, waiter, line), *reasons]
        if blocking:
            because.append("No later time is certain: booked GPUs go to the booking's users first.")
        elif hard is None:
            because.append(
                "No later time is certain: others who used less may still come and go first."
                if line.fair
                else "No later time is certain: nothing that holds these GPUs has to end by a set time."
            )
        else:
            because.append(f"By {clock(hard, now)} at the latest: {_hard_words(line)}.")
        out[waiter.key] = Estimate(likely, by, hard, tuple(because))
        ahead_gpus += waiter.gpus
    return out, out.pop(_NEWCOMER, None)


_NEWCOMER = object()


def by_booking(found: Estimate, start: float, end: float, now: float, slack: float) -> Estimate:
    """The estimate of a wait whose user's own booking covers it: it starts by the booking's
    start at the latest (work on its GPUs is stopped then, and the request passes the line),
    a hard fact; ``slack``: the stop and the tick that sees it."""
    hard = max(start, now) + slack
    if found.latest is not None and found.latest <= hard:
        return found
    because = [s for s in found.because if not s.startswith(("No later time", "By "))]
    because.append(
        f"By {clock(hard, now)} at the latest: your booking from {clock(start, now)} to "
        f"{clock(end, now)} gives you these GPUs."
    )
    return Estimate(min(found.likely, hard), min(found.by, hard), hard, tuple(because))


def _quantile(row: Sequence[float], p: float) -> float:
    finite = [x for x in row if math.isfinite(x)]
    if not finite:
        return math.inf
    return row[min(len(row) - 1, int(p * len(row)))]


def _replay(
    line: Line, waiting: Sequence[Waiter], total: int, now: float, samples: int
) -> list[list[float]]:
    """``starts[i][s]``: when waiter ``i`` starts in replay ``s``. Written for speed (the
    monitor's tick runs it for every waiting request): each holding's table, where its
    survival starts in it, and its bounds are read once, not once a replay."""
    rng = random.Random(0x38)  # the same facts, the same answer
    uniform = rng.random
    free = max(total - sum(h.gpus for h in line.held), 0)
    starts = [[0.0] * samples for _ in waiting]
    lag, top = line.lag, TABLE - 1
    future = _future(line, now)
    held_for: Callable[[], float] | None = None
    if line.booked_curve is not None and future:
        booked_table = line.booked_curve.table

        def held_for() -> float:  # the booking's users hold on as long as holds last
            return booked_table[min(int(uniform() * TABLE), top)]

    held = []
    for h in line.held:
        table, base, age = h.curve.sampler(max(now - h.since, 0.0))
        soft = math.inf if h.soft_end is None else max(h.soft_end, now)
        hard = math.inf if h.hard_end is None else max(h.hard_end, now)
        # Older than anything learned: as long again, give or take (Curve.left).
        offset = rng.randrange(samples)
        held.append((table, base, 1.0 - base, age, base >= 1.0 - 1e-9, soft, hard, h.gpus, offset))
    fresh = [
        (w.curve.table, math.inf if w.hard_hold is None else w.hard_hold, rng.randrange(samples))
        for w in waiting
    ]
    pop, push = heapq.heappop, heapq.heappush
    for s in range(samples):
        frees = [now] * free
        # Stratified: over the replays each holding draws from each 1/samples of its
        # distribution once (a rotation of its own), so no seed leans every estimate one way.
        for table, base, span, age, beyond, soft, hard, gpus, offset in held:
            u = ((s + offset) % samples + uniform()) / samples
            if beyond:
                left = age * (0.25 + 1.5 * u)
            else:
                left = table[min(int((base + u * span) * TABLE), top)] - age
                left = left if left > 0.0 else 0.0
            end = now + left
            if soft < end and ((s + offset * 7) % samples + 0.5) / samples < STAY_IDLE:
                end = soft
            if hard < end:
                end = hard
            end += lag
            if gpus == 1:
                frees.append(end)
            else:
                frees.extend([end] * gpus)
        heapq.heapify(frees)
        slots = _booked_slots(frees, future, lag, False, held_for) if future else []
        previous = now
        for i, w in enumerate(waiting):
            need = w.gpus if w.gpus < total else total
            if need <= 0 or len(frees) + len(slots) < need:
                starts[i][s] = math.inf if need > 0 else previous
                continue
            table, bound, offset = fresh[i]
            booked = bool(slots)  # some GPUs are booked later: lent to holds ending in time
            if booked:
                last, taken = _take_booked(frees, slots, need, bound, lag, False)
            else:
                for _ in range(need):
                    last = pop(frees)
            start = last if last > previous else previous  # only the head is served
            previous = start
            starts[i][s] = start
            u = ((s + offset) % samples + uniform()) / samples
            hold = table[min(int(u * TABLE), top)]
            freed = start + (hold if hold < bound else bound) + lag
            if booked:
                _give_back(frees, slots, taken, freed, lag, False)
            else:
                for _ in range(need):
                    push(frees, freed)
    return starts


def _future(line: Line, now: float) -> list[tuple[float, float, int]]:
    """The type's bookings not started yet, soonest first (running ones are held)."""
    return sorted(b for b in line.booked if b[0] > now and b[2] > 0)


# A GPU a later booking takes: (when work of no set end may have it, free at, the booking's
# start, until when it is booked). A heap on the first, so most takes cost a pop.
Slot = tuple[float, float, float, float]


def _slot(free: float, start: float, end: float, pad: float, hard: bool) -> Slot:
    """The booked GPU free at ``free``: work of no set end has it once the booking is over
    (``hard``: never, as the booking's users may hold it on)."""
    if free >= end:
        return (free, free, start, end)
    return (math.inf if hard else end + pad, free, start, end)


def _booked_slots(
    frees: list[float],
    future: Sequence[tuple[float, float, int]],
    pad: float,
    hard: bool,
    held_for: Callable[[], float] | None = None,
) -> list[Slot]:
    """The GPUs later bookings take: the soonest free ones, as the line sets free GPUs
    aside for them (taken out of ``frees``); ``held_for``: how long the booking's users hold
    what they take at its start (they may hold on past its end)."""
    slots = []
    for start, end, gpus in future:
        for _ in range(min(gpus, len(frees))):
            until = end if held_for is None else max(end, start + held_for())
            slots.append(_slot(heapq.heappop(frees), start, until, pad, hard))
    heapq.heapify(slots)
    return slots


def _take_booked(
    frees: list[float],
    slots: list[Slot],
    need: int,
    hold: float,
    pad: float,
    hard: bool,
) -> tuple[float, list[Slot | None]]:
    """Take the ``need`` GPUs that come soonest for a hold of at most ``hold``, free ones
    (``frees``) and booked ones (``slots``) alike; when the last of them comes, and which
    were taken (a booked slot, or None for a free one). A booked GPU is lent to a hold that
    ends (plus ``pad``) before the booking starts."""
    taken: list[Slot | None] = []
    last = 0.0
    if math.isinf(hold):  # no set end: the two heaps' tops
        for _ in range(need):
            if slots and (not frees or slots[0][0] < frees[0]):
                slot = heapq.heappop(slots)
                last = max(last, slot[0])
                taken.append(slot)
            else:
                last = max(last, heapq.heappop(frees))
                taken.append(None)
        return last, taken
    pool: list[tuple[float, Slot | None]] = [
        (heapq.heappop(frees), None) for _ in range(min(need, len(frees)))
    ]
    for slot in slots:
        free, start = slot[1], slot[2]
        pool.append((free if free + hold + pad <= start else slot[0], slot))
    pool.sort(key=lambda item: item[0])
    for when, other in pool[need:]:
        if other is None:
            heapq.heappush(frees, when)
    chosen = pool[:need]
    gone = {id(slot) for _, slot in chosen if slot is not None}
    if gone:
        slots[:] = [slot for slot in slots if id(slot) not in gone]
        heapq.heapify(slots)
    return chosen[-1][0], [slot for _, slot in chosen]


def _give_back(
    frees: list[float],
    slots: list[Slot],
    taken: Sequence[Slot | None],
    freed: float,
    pad: float,
    hard: bool,
) -> None:
    """The GPUs a hold took come back at ``freed``: a booked one stays booked until its
    booking is over."""
    for slot in taken:
        if slot is not None and freed < slot[3]:
            heapq.heappush(slots, _slot(freed, slot[2], slot[3], pad, hard))
        else:
            heapq.heappush(frees, freed)


def _latest(line: Line, waiting: Sequence[Waiter], total: int, now: float) -> list[float | None]:
    """When each waiter starts if every hold lasts as long as hard facts allow."""
    if line.fair:
        return [None] * len(waiting)
    free = max(total - sum(h.gpus for h in line.held), 0)
    frees = [now] * free
    for h in line.held:
        end = math.inf if h.hard_end is None else max(h.hard_end, now) + line.slack
        frees.extend([end] * h.gpus)
    heapq.heapify(frees)
    slots = _booked_slots(frees, _future(line, now), STOP_LAG, True)
    out: list[float | None] = []
    previous = now
    for w in waiting:
        need = min(w.gpus, total)
        if need <= 0 or len(frees) + len(slots) < need:
            out.append(None)
            previous = math.inf
            continue
        hold = math.inf if w.hard_hold is None else w.hard_hold + line.slack
        lent = bool(slots)
        if lent:
            last, booked = _take_booked(frees, slots, need, hold, STOP_LAG, True)
        else:
            last = max(heapq.heappop(frees) for _ in range(need))
        start = max(last, previous)
        previous = start
        out.append(start + STOP_LAG if math.isfinite(start) else None)
        if lent:
            _give_back(frees, slots, booked, start + hold, STOP_LAG, True)
        else:
            for _ in range(need):
                heapq.heappush(frees, start + hold)
    return out


def _place(index: int, ahead_gpus: int, waiter: Waiter, line: Line) -> str:
    gpus = words.gpus(waiter.gpus, line.name)
    if index == 0:
        return f"You are first in line for {gpus}."
    people = words.plural(index, "request")
    return (
        f"You are {words.ordinal(index + 1)} in line for {gpus}: {people} ahead of you "
        f"need {ahead_gpus} in all."
    )


def _reasons(line: Line, now: float) -> list[str]:
    """What the holders' clocks and the learned durations say, for everyone in this line."""
    out = []
    soft = sorted(h.soft_end for h in line.held if h.soft_end is not None)
    if soft:
        n = words.plural(len(soft), "holding")
        out.append(
            f"{n} of these GPUs {'is' if len(soft) == 1 else 'are'} idle: reclaimed from "
            f"{clock(soft[0], now)} if {'it stays' if len(soft) == 1 else 'they stay'} idle."
        )
    hard = sorted(
        h.hard_end for h in line.held if h.hard_end is not None and h.hard_why == "budget"
    )
    if hard:
        out.append(
            f"{words.plural(len(hard), 'holding')} ran out of GPU-hours: stopped by "
            f"{clock(hard[0], now)} when the grace ends."
        )
    for start, end, gpus in sorted(b for b in line.booked if b[1] > now)[:1]:
        booked = words.gpus(gpus, line.name)
        lent = (
            f" Until then {'it is' if gpus == 1 else 'they are'} lent only to work that will be "
            f"gone by {clock(start, now)}, so a server waits for {'it' if gpus == 1 else 'them'}"
            f" until {clock(end, now)}."
            if start > now
            else ""
        )
        out.append(
            f"{booked} {'is' if gpus == 1 else 'are'} booked from {clock(start, now)} to "
            f"{clock(end, now)}: {'it goes' if gpus == 1 else 'they go'} to the booking's users "
            f"first, and work on them is stopped at the start.{lent}"
        )
    deadlines = sorted(
        h.hard_end for h in line.held if h.hard_end is not None and h.hard_why == "deadline"
    )
    if deadlines:
        out.append(f"A job on these GPUs reaches its time limit at {clock(deadlines[0], now)}.")
    if line.held:
        oldest = min(line.held, key=lambda h: h.since)
        learned = oldest.curve.learned
        source = (
            f"learned from {words.plural(round(learned), 'hold')}"
            if learned >= 1
            else "a first guess: nothing is learned yet"
        )
        out.append(
            f"Holds of {line.name} last {about(oldest.curve.quantile(0.5))} ({source}); "
            f"the longest-held one has lasted {about(max(now - oldest.since, 0))} and likely "
            f"has {about(oldest.curve.median_left(max(now - oldest.since, 0)))} to go."
        )
    return out


def _hard_words(line: Line) -> str:
    whys = {h.hard_why for h in line.held if h.hard_end is not None}
    said = []
    if "budget" in whys:
        said.append("budgets' grace ends")
    if "deadline" in whys:
        said.append("jobs' time limits")
    if not said:
        said.append("enough GPUs are free or freed by then")
    return " and ".join(said)
