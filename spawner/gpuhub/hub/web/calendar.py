"""The calendar of GPUs (``/hub/gpuhub/calendar`` and the hub's home page): per GPU type, for
the next day or the week, what is held now, what is likely free, and what is booked.

docs/architecture.md, "When, not only where". Everything comes from what the hub holds in
memory already: the GPU monitor's holdings, its reclaim clocks, budget graces and learned
hold durations (:mod:`gpuhub.hub.monitor.gpu_monitor`, :mod:`gpuhub.hub.monitor.eta`) and the
book of bookings (:mod:`gpuhub.hub.ledger.booking_book`); a request lists nothing on a
cluster. The facts are gathered once per monitor change, book change or minute
(:func:`facts`), and what is the same for every viewer (the bars, the table, the fleet
admins' list) is rendered once per gathering; a viewer's own lines are rendered for them.

* A holding is held until its known stop (``stops_at``: an idle reclaim's warning, a
  budget's grace, a share over its memory), else until its likely end: its median of what
  is left, given how long it has lasted (:meth:`gpuhub.hub.monitor.eta.Curve.median_left`).
* A waiting request takes GPUs from its estimated start (``likely``) for a likely hold.
* A booking takes its GPUs from its start to its end.
* What is left is likely free.

Fleet admins (JupyterHub admins and holders of ``custom:gpuhub:fleet``, as for the fleet
page) see whose each line is at ``/hub/gpuhub/calendar``; everyone else, there and on the
home page, reads "in use" and "booked" for others, their own lines named, and a **Book**
form where they may book (it posts to ``/hub/api/gpuhub/bookings``). Jinja autoescapes every
value; the bars are HTML with widths and heights from numbers only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jinja2
from jupyterhub.handlers.base import BaseHandler
from markupsafe import Markup, escape
from tornado import web

from gpuhub.core import words
from gpuhub.core.bookings import Booking
from gpuhub.hub.ledger.booking_book import BOOKINGS, BookingBook
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.booking_watch import plan
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.web.access import FLEET_SCOPE, may_see_all

log = logging.getLogger("gpuhub.hub.web.calendar")

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates", "hub")
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


# -- what is drawn ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Bar:
    """One bar of a type's strip: GPUs in use, booked and likely free from ``start``."""

    start: float
    end: float
    used: float
    booked: float
    free: float
    total: float
    label: str  # the axis label under it ("" for most)
    when: str  # "Sun 14:00 to 15:00 UTC"
    text: str  # the bar in words, for screen readers and the tooltip

    def figure(self, part: float) -> str:
        """ "2", "0.5": GPUs as the fleet page writes them."""
        return _gpus(part)

    def percent(self, part: float) -> float:
        return round(100.0 * part / self.total, 2) if self.total > 0 else 0.0


def bars(facts: TypeFacts, period: Period, now: float) -> list[Bar]:
    """The strip of one type: each bar counts what overlaps it (a holding that ends within
    the bar still uses its GPUs in it), in use first, then booked, the rest likely free."""
    first = math.floor(now / period.seconds) * period.seconds
    # Each item adds its GPUs to the bars it overlaps: a difference array, one pass over the
    # items and one over the bars (thousands of holdings cost milliseconds).
    used_at = [0.0] * (period.slots + 1)
    booked_at = [0.0] * (period.slots + 1)
    for item in facts.items:
        begin = max(item.start, now)
        if item.end <= begin:
            continue
        low = max(int((begin - first) // period.seconds), 0)
        high = min(math.ceil((item.end - first) / period.seconds), period.slots)
        if low >= high:
            continue
        diff = booked_at if item.kind == "booked" else used_at
        diff[low] += item.gpus
        diff[high] -= item.gpus
    out = []
    used = booked = 0.0
    for n in range(period.slots):
        start, end = first + n * period.seconds, first + (n + 1) * period.seconds
        used = round(used + used_at[n], 6)
        booked = round(booked + booked_at[n], 6)
        total = facts.total
        shown_used = min(max(used, 0.0), total)
        shown_booked = min(max(booked, 0.0), total - shown_used)
        free = max(total - shown_used - shown_booked, 0.0)
        label = _axis(start, period) if n % period.label_every == 0 else ""
        when = _span(start, end, period)
        text = (
            f"{facts.name}, {when}: {_gpus(shown_used)} in use, {_gpus(shown_booked)} booked, "
            f"{_gpus(free)} likely free of {_gpus(total)}"
        )
        out.append(Bar(start, end, shown_used, shown_booked, free, total, label, when, text))
    return out


def _gpus(value: float) -> str:
    """ "2", "0.5": GPUs as the fleet page writes them."""
    return words.amount(value)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _axis(start: float, period: Period) -> str:
    when = _utc(start)
    return f"{when:%H:%M}" if period.key == "day" else f"{when:%a %H:%M}"


def _span(start: float, end: float, period: Period) -> str:
    a, b = _utc(start), _utc(end)
    if period.key == "day":
        return f"{a:%a} {a:%H:%M} to {b:%H:%M} UTC"
    return f"{a:%a %d %b} {a:%H:%M} to {b:%a} {b:%H:%M} UTC"


@dataclass(frozen=True)
class Line:
    """One item as a viewer reads it: who (empty when not theirs to know) and what."""

    kind: str
    who: str
    what: str
    gpus: str
    start_iso: str
    start_text: str
    end_iso: str
    end_text: str
    end_words: str  # "until", "likely until about", "to"
    why: str
    own: bool


def line(item: Item, viewer: str, names: bool, groups: Iterable[str] = ()) -> Line:
    """``item`` for ``viewer``: with names for fleet admins and for what is the viewer's own
    (theirs, booked by them, or for a group of theirs), "in use"/"booked" otherwise."""
    own = viewer != "" and (
        item.user == viewer or item.booked_by == viewer or (item.group in set(groups))
    )
    shown = names or own
    if item.kind == "booked":
        whose = f"group {item.group}" if item.group else item.user
        who = (
            (f"for {whose}" + (f", by {item.booked_by}" if item.booked_by else "")) if shown else ""
        )
        what = item.what if shown else ""
        end_words = "to"
    else:
        who = item.user if shown else ""
        what = item.what if shown else ""
        end_words = "until" if item.end_known else "likely until about"
    return Line(
        item.kind,
        who,
        what,
        words.gpus(int(item.gpus), item.gpu_type)
        if float(item.gpus).is_integer()
        else f"{words.amount(item.gpus)} of a {item.gpu_type}",
        words.iso(item.start),
        words.moment_utc(item.start),
        words.iso(item.end),
        words.moment_utc(item.end),
        end_words,
        STOP_WORDS.get(item.why, "") if shown else "",
        own,
    )


def _time(iso: str, text: str) -> str:
    return f'<time class="gpuhub-time" datetime="{escape(iso)}">{escape(text)}</time>'


def line_html(line: Line) -> str:
    """One line as the calendar's list shows it, every value escaped (``escape``). Written
    here, not in a template: a fleet admin's list may have thousands, a string each."""
    start, end = _time(line.start_iso, line.start_text), _time(line.end_iso, line.end_text)
    what = escape(line.what)
    if line.kind == "booked":
        who = f" {escape(line.who)}" if line.who else ""
        body = f"<strong>Booked</strong>{who}: {escape(line.gpus)} from {start} to {end}" + (
            f" ({what})" if what else ""
        )
    else:
        head = f"<strong>{escape(line.who or ('Waiting' if line.kind == 'waiting' else 'In use'))}</strong>"
        head += f", {what}" if what else ""
        if line.kind == "waiting":
            body = (
                f"{head}: {escape(line.gpus)}, waiting; likely from {start} "
                f"{escape(line.end_words)} {end}"
            )
        else:
            body = (
                f"{head}: {escape(line.gpus)}, held since {start}, {escape(line.end_words)} {end}"
            )
            body += f" ({escape(line.why)})" if line.why else ""
    own = " gpuhub-cal-own" if line.own else ""
    kind = escape(line.kind)
    return f'<li class="gpuhub-cal-line gpuhub-cal-{kind}-line{own}" tabindex="0">{body}</li>\n'


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    """The calendar's own (synchronous) template environment, autoescaping everything: the
    home page's template variable has no handler to borrow the hub's from."""
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
    return _ENV


_CACHE: dict[str, Facts] = {}
# Each item's line as fleet admins read it, kept from one gathering to the next while the
# item is the same (a holding's known stop, its likely end to 5 minutes, a booking).
_LINES: dict[Item, str] = {}


def named(item: Item) -> str:
    """``item``'s line for fleet admins."""
    return line_html(line(item, "", True))


REFRESH = 60.0  # seconds: the likely ends move with the clock


def facts(monitor: GPUMonitor, book: BookingBook = BOOKINGS, now: float | None = None) -> Facts:
    """The facts as of the monitor's last change and the book's, with what every viewer
    shares rendered. After a monitor tick the last facts are served while they are gathered
    again just after the request (once, on the event loop, as the fleet page serves its last
    build), so no view waits for a gathering; a change of the book (a booking made or
    cancelled) or facts a minute old (likely ends move with the clock) are gathered at once."""
    now = time.time() if now is None else now
    key = (id(monitor), monitor.version, id(book), book.version, math.floor(now / REFRESH))
    found = _CACHE.get("facts")
    if found is not None and found.key == key:
        return found
    same_book = found is not None and found.key[2:4] == key[2:4] and found.key[0] == key[0]
    if found is not None and same_book and now - found.now < REFRESH and _later(monitor, book):
        return found
    return build(monitor, book, now)


_PENDING: set[int] = set()  # monitors whose calendar is being gathered again


def _later(monitor: GPUMonitor, book: BookingBook) -> bool:
    """Gather again soon, on the event loop (False: there is none; gather now)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    if id(monitor) not in _PENDING:
        _PENDING.add(id(monitor))

        def again() -> None:
            _PENDING.discard(id(monitor))
            try:
                build(monitor, book, time.time())
            except Exception:
                log.exception("gpuhub: could not gather the GPU calendar")

        loop.call_soon(again)
    return True


def build(monitor: GPUMonitor, book: BookingBook, now: float) -> Facts:
    """Gather the facts now and render what every viewer shares (see :func:`facts`)."""
    key = (id(monitor), monitor.version, id(book), book.version, math.floor(now / REFRESH))
    gathered = gather(monitor, book, now)
    built = Facts(
        gathered.now,
        gathered.types,
        gathered.bookable,
        gathered.booking_on,
        gathered.rules,
        key,
    )
    module: Any = environment().get_template("gpuhub_calendar_strips.html").make_module({})
    strip = module.strip
    for t in built.types:
        for period in PERIODS:
            built.shared[(period.key, t.name)] = str(strip(t, period, bars(t, period, built.now)))
    _CACHE["facts"] = built
    count = sum(len(t.items) for t in built.types)
    if len(_LINES) > 2 * count + 100:  # forget the lines of what is gone, now and then
        current = {i for t in built.types for i in t.items}
        for item in [i for i in _LINES if i not in current]:
            del _LINES[item]
    return built


def may_book(facts: Facts, groups: Iterable[str], fleet_admin: bool) -> bool:
    """Whether a user in ``groups`` may book anything: a rule of a group of theirs, or a
    fleet admin (for a user, or for a group where the rules allow)."""
    rules = facts.rules
    if rules is None or not facts.bookable:
        return False
    return fleet_admin or rules.rule_for(groups) is not None


def render(
    facts: Facts,
    viewer: str,
    groups: Iterable[str],
    fleet_admin: bool,
    names: bool,
    period: str = "day",
    base_url: str = "/hub/",
) -> Markup:
    """The calendar for ``viewer`` (``names``: whose every line is; else theirs alone)."""
    groups = list(groups)
    lines: dict[str, Markup] = {}
    for t in facts.types:
        if names:  # the same for every fleet admin: written once per gathering
            cached = facts.shared.get(("names", t.name))
            if cached is None:
                shown = [_LINES.get(i) or _LINES.setdefault(i, named(i)) for i in t.items]
                cached = facts.shared[("names", t.name)] = "".join(shown)
            lines[t.name] = Markup(cached)
            continue
        mine = [i for i in t.items if i.kind == "booked" or i.user == viewer]
        lines[t.name] = Markup("".join(line_html(line(i, viewer, False, groups)) for i in mine))
    # Others' holdings are counted in the bars; a viewer without names reads them summed.
    others = {
        t.name: sum(i.gpus for i in t.items if i.kind == "held" and i.user != viewer)
        for t in facts.types
    }
    template = environment().get_template("gpuhub_calendar_body.html")
    html = template.render(
        facts=facts,
        # Rendered and escaped already (numbers and type names only).
        strip=lambda period, name: Markup(facts.shared.get((period, name), "")),
        lines=lines,
        others=others,
        names=names,
        period=period if period in {p.key for p in PERIODS} else "day",
        periods=PERIODS,
        may_book=may_book(facts, groups, fleet_admin),
        fleet_admin=fleet_admin,
        groups_book=bool(fleet_admin and facts.rules and facts.rules.admins_book_for_groups),
        viewer=viewer,
        base_url=base_url,
        amount=words.amount,
    )
    return Markup(html)


def _fleet_admin_of(user: Any) -> bool:
    """Whether a hub user is a fleet admin (admin, or holds ``custom:gpuhub:fleet``), for the
    home page, which has the user and not the request's scopes."""
    if getattr(user, "admin", False):
        return True
    try:
        from jupyterhub.scopes import get_scopes_for

        return FLEET_SCOPE in get_scopes_for(getattr(user, "orm_user", user))
    except Exception:
        return False


def home_calendar(user: Any) -> HomeCalendar:
    """The calendar on the hub's home page (template_vars ``gpuhub_calendar``), drawn only
    where a page shows it (:class:`HomeCalendar`)."""
    return HomeCalendar(user)


class HomeCalendar:
    """The home page's calendar for ``user``: others' lines without names, the user's own
    named, with Book where they may. JupyterHub works out every template variable for every
    page it renders (the spawn form too): this one is drawn only when a template writes it
    (``__html__``), which gpuhub's home.html alone does."""

    def __init__(self, user: Any) -> None:
        self.user = user

    def __html__(self) -> str:
        user = self.user
        if user is None:
            return ""
        if gpu_monitor.current() is None:
            user.spawner  # noqa: B018 - a gpuhub spawner starts the monitor
        monitor = gpu_monitor.current()
        if monitor is None:
            return ""
        found = facts(monitor)
        if not found.types:  # a hub without GPUs (or before its first look at them): nothing
            return ""
        groups = [g.name for g in getattr(user, "groups", ())]
        hub = (getattr(user, "settings", None) or {}).get("hub")
        hub_url = getattr(hub, "base_url", "/hub/")
        admin = _fleet_admin_of(user)
        return str(render(found, user.name, groups, admin, False, "day", hub_url))


class CalendarHandler(BaseHandler):
    """``GET /hub/gpuhub/calendar[?view=week]``: the calendar page, with names for fleet
    admins."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET",)

    @web.authenticated
    async def get(self) -> None:
        monitor = gpu_monitor.for_handler(self)
        if monitor is None:
            raise web.HTTPError(503, "gpuhub's GPU monitor is not running on this hub yet.")
        view = self.get_argument("view", "day")
        if view not in {p.key for p in PERIODS}:
            raise web.HTTPError(
                400, f"view must be one of {', '.join(p.key for p in PERIODS)}, not {view!r}."
            )
        user = self.current_user
        admin = may_see_all(self)
        groups = [g.name for g in user.groups]
        body = render(facts(monitor), user.name, groups, admin, admin, view, self.hub.base_url)
        html = await self.render_template("gpuhub_calendar.html", calendar=body, names=admin)
        self.finish(html)


HANDLERS: list[tuple[str, Any]] = [(r"/gpuhub/calendar", CalendarHandler)]
