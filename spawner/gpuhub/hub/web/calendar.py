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
  is left, given how long it has lasted (:meth:`gpuhub.hub.monitor.hold_durations.Curve.median_left`).
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
import logging
import math
import os
import time
from collections.abc import Iterable
from typing import Any

import jinja2
from jupyterhub.handlers.base import BaseHandler
from markupsafe import Markup
from tornado import web

from gpuhub.core import words
from gpuhub.hub.ledger.booking_book import BOOKINGS, BookingBook
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.web.access import FLEET_SCOPE, may_see_all
from gpuhub.hub.web.calendar_draw import bars, line, line_html
from gpuhub.hub.web.calendar_facts import PERIODS, Facts, Item, gather

log = logging.getLogger("gpuhub.hub.web.calendar")

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates", "hub")

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
