"""The fleet page in the hub (``/hub/gpuhub/fleet``): who holds which GPUs, how busy they are.

JupyterHub admins and holders of ``custom:gpuhub:fleet`` see every holder, totals per GPU
type and group, GPU-hours per user and group, and may stop a server with a reason that the
user then reads on their next hub page, or cancel a job (:mod:`gpuhub.hub.monitor.cancel`) likewise.
Everyone else sees the same page with their own rows and GPU-hours only.

Everything comes from the hub's GPU monitor (:mod:`gpuhub.hub.monitor.gpu_monitor`), already in memory:
rendering lists nothing and samples nothing. After each monitor tick :class:`FleetCache`
builds the page's rows, totals, sparklines and GPU-hours once, in a thread from a copy of
the monitor's figures; a request only picks the viewer's rows and renders the page around
them, so it stays fast with thousands of GPUs (docs/benchmarks.md). Jinja autoescapes every
value; sparklines are inline SVG built from numbers only.

The figures are built by :mod:`gpuhub.hub.web.fleet_view` (pure), the stop and cancel
buttons served by :mod:`gpuhub.hub.web.fleet_actions`; who may see all is
:func:`gpuhub.hub.web.access.may_see_all`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyterhub.handlers.base import BaseHandler
from markupsafe import Markup
from tornado import web

from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.gpu_monitor import GPUMonitor

# Re-exported for the pages beside this one that import them from here (the bookings
# calendar); they live in access.py and fleet_view.py.
from gpuhub.hub.web.access import FLEET_SCOPE as FLEET_SCOPE
from gpuhub.hub.web.access import WHO_MAY_GRANT, may_grant, may_see_all
from gpuhub.hub.web.fleet_view import BudgetLine, FleetView, Row, Snapshot, fleet_view, snapshot
from gpuhub.hub.web.fleet_view import amount as amount
from gpuhub.hub.web.sparkline import SPARK_HEIGHT, SPARK_WIDTH

log = logging.getLogger("gpuhub.hub.web.fleet")


RowKey = tuple[str, str, str]  # (user, kind, name), as the monitor's tracks


@dataclass(frozen=True)
class Built:
    """One build of the page: the admins' view, and every table row as HTML, rendered and
    escaped already, so that a request only picks rows and joins strings."""

    version: int
    view: FleetView
    rows: tuple[tuple[RowKey, str], ...]  # in the page's order
    hours: tuple[tuple[str, str], ...]  # (user, GPU-hours row), in the page's order
    rows_of: Mapping[str, tuple[Row, ...]]  # each user's own rows
    seconds: float = 0.0  # what the build cost (in its thread)
    # Every budget's row as HTML (pools, then users), and each user's own (what a viewer sees).
    budgets_html: str = ""
    budgets_of: Mapping[str, tuple[tuple[BudgetLine, str], ...]] = field(default_factory=dict)


def build(snap: Snapshot, env: Any, base_url: str) -> Built:
    """Build the view and render its rows with ``env`` (a synchronous Jinja environment);
    pure and CPU-bound: :class:`FleetCache` runs it in a thread."""
    started = time.perf_counter()
    view = fleet_view(snap)
    context = {"spark_width": SPARK_WIDTH, "spark_height": SPARK_HEIGHT, "base_url": base_url}
    row_html = env.get_template(FRAGMENTS["rows_html"]).make_module(context).row
    hours_html = env.get_template(FRAGMENTS["hours_html"]).make_module(context).hours_row
    rows = tuple(((r.user, r.kind, r.name), str(row_html(r))) for r in view.rows)
    hours = tuple((h[0], str(hours_html(*h))) for h in view.hours)
    rows_of: dict[str, list[Row]] = {}
    for r in view.rows:
        rows_of.setdefault(r.user, []).append(r)
    budget_html = env.get_template(FRAGMENTS["budgets_html"]).make_module(context).budget_row
    budgets = [(b, str(budget_html(b))) for b in view.budgets]
    budgets_of: dict[str, list[tuple[BudgetLine, str]]] = {}
    for b, html in budgets:
        if b.scope == "user":  # a viewer sees their own line, never a pool's
            budgets_of.setdefault(b.name, []).append((b, html))
    return Built(
        snap.version,
        view,
        rows,
        hours,
        {u: tuple(rs) for u, rs in rows_of.items()},
        time.perf_counter() - started,
        "".join(html for _, html in budgets),
        {u: tuple(bs) for u, bs in budgets_of.items()},
    )


FRAGMENTS = {
    "rows_html": "gpuhub_fleet_rows.html",
    "hours_html": "gpuhub_fleet_hours.html",
    "budgets_html": "gpuhub_fleet_budgets.html",
}


class FleetCache:
    """The page, built once after each monitor tick, off the request path.

    After every tick (and every stop or cancel) the monitor calls :meth:`refresh`: the inputs
    are copied on the event loop (:func:`snapshot`, a few ms), then :func:`build` runs in a
    thread. Requests never wait for a build, except the very first one after the hub started:
    they serve the last complete build (its figures are as of its tick), less the rows of
    servers and jobs stopped since, so an admin's stop shows at once.
    """

    def __init__(self, monitor: GPUMonitor, env: Any, base_url: str, groups_of: Any) -> None:
        self.monitor = monitor
        # The hub's environment renders asynchronously; a thread needs a synchronous one.
        self.env = env.overlay(enable_async=False) if getattr(env, "is_async", False) else env
        self.base_url = base_url
        self.groups_of = groups_of  # () -> {user: [group]}, read on the event loop
        self.built: Built | None = None
        self._task: asyncio.Task[None] | None = None
        self._again = False
        monitor.after_change.append(self.refresh)

    def refresh(self) -> None:
        """Start a build (or one more after the running one) of what the monitor has now."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.ensure_future(self._build())

    async def _build(self) -> None:
        while True:
            self._again = False
            snap = snapshot(self.monitor, self.groups_of())
            try:
                self.built = await asyncio.to_thread(build, snap, self.env, self.base_url)
            except Exception:
                log.exception("gpuhub: could not build the fleet page")
            removed = self.monitor.removed
            for key in [k for k, v in removed.items() if v <= snap.version]:
                del removed[key]
            if not self._again:
                return

    async def current(self) -> Built:
        """The last complete build; the first one is awaited."""
        if self.built is None:
            if self._task is None or self._task.done():
                self.refresh()
            assert self._task is not None
            await asyncio.shield(self._task)
        if self.built is None:
            raise web.HTTPError(500, "The fleet page could not be built; see the hub's log.")
        return self.built

    async def up_to_date(self) -> Built:
        """A build of what the monitor has now, waited for: after an admin's stop or cancel
        (an action, not a page view), so that the page they come back to shows its effect on
        every figure (rows, held and free per type and group) at once."""
        for _ in range(3):  # a build that fails is logged; do not wait on it for ever
            if self.built is not None and self.built.version >= self.monitor.version:
                break
            if self._task is None or self._task.done():
                self.refresh()
            assert self._task is not None
            await asyncio.shield(self._task)
        return await self.current()

    def page(self, built: Built, viewer: str, see_all: bool) -> tuple[FleetView, dict[str, str]]:
        """Pick ``viewer``'s rows (all for fleet admins), less those stopped since the build."""
        removed = self.monitor.removed
        gone = {k for k, v in removed.items() if v > built.version} if removed else set()
        base = built.view
        if see_all:
            rows = [r for r in base.rows if (r.user, r.kind, r.name) not in gone]
            view = dataclasses.replace(base, rows=rows)
            html = "".join(h for k, h in built.rows if k not in gone)
            hours = "".join(h for _, h in built.hours)
            budgets = built.budgets_html
        else:
            rows = [
                r for r in built.rows_of.get(viewer, ()) if (r.user, r.kind, r.name) not in gone
            ]
            own = built.budgets_of.get(viewer, ())
            view = FleetView(
                rows=rows,
                see_all=False,
                hours=[h for h in base.hours if h[0] == viewer],
                reclaim=base.reclaim,
                budgets=[b for b, _ in own],
                budgets_on=base.budgets_on,
                budgets_since=base.budgets_since,
                budgets_since_iso=base.budgets_since_iso,
            )
            html = "".join(h for k, h in built.rows if k[0] == viewer and k not in gone)
            hours = "".join(h for u, h in built.hours if u == viewer)
            budgets = "".join(h for _, h in own)
        return view, {"rows_html": html, "hours_html": hours, "budgets_html": budgets}


_CACHES: dict[int, FleetCache] = {}


def fleet_cache(monitor: GPUMonitor, handler: BaseHandler) -> FleetCache:
    """The monitor's page cache, made by the first request (which knows the hub's template
    environment and users)."""
    cache = _CACHES.get(id(monitor))
    if cache is None or cache.monitor is not monitor:
        users = handler.users
        cache = FleetCache(
            monitor,
            handler.settings["jinja2_env"],
            handler.hub.base_url,
            lambda: {u.name: [g.name for g in u.groups] for u in users.values()},
        )
        _CACHES.clear()
        _CACHES[id(monitor)] = cache
    return cache


def monitor_of(handler: BaseHandler) -> GPUMonitor | None:
    """The hub's GPU monitor, started for ``handler``'s user if none runs yet."""
    return gpu_monitor.for_handler(handler)


class Outcomes:
    """What the fleet page's actions did, for the page the action redirects to: the redirect
    carries a random token only, so the page shows the hub's own sentence to the admin who
    acted, and no text anyone can put in a link."""

    KEEP_SECONDS = 600.0

    def __init__(self) -> None:
        self._done: dict[str, tuple[str, str, float]] = {}  # token -> (viewer, text, when)

    def record(self, viewer: str, text: str) -> str:
        now = time.monotonic()
        for token in [
            t for t, (_, _, when) in self._done.items() if now - when > self.KEEP_SECONDS
        ]:
            del self._done[token]
        token = secrets.token_urlsafe(12)
        self._done[token] = (viewer, text, now)
        return token

    def take(self, token: str, viewer: str) -> str:
        """The sentence recorded under ``token`` for ``viewer``; "" for anything else."""
        found = self._done.get(token)
        if found is None or found[0] != viewer or time.monotonic() - found[2] > self.KEEP_SECONDS:
            return ""
        return found[1]


OUTCOMES = Outcomes()


class FleetHandler(BaseHandler):
    """``GET /hub/gpuhub/fleet``: the page."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET",)

    @web.authenticated
    async def get(self) -> None:
        await render_fleet(
            self,
            # Only what the hub itself recorded for this viewer: never text from the URL.
            done=OUTCOMES.take(self.get_argument("done", ""), self.current_user.name),
        )


async def render_fleet(handler: BaseHandler, status: int = 200, **say: str) -> None:
    """The fleet page for ``handler``'s user; ``say`` holds what the page reports (``done``:
    the hub's own sentence on an action) or refuses (``error``, ``error_field``, ``reason``,
    ``target``)."""
    monitor = monitor_of(handler)
    if monitor is None:
        raise web.HTTPError(503, "gpuhub's GPU monitor is not running on this hub yet.")
    cache = fleet_cache(monitor, handler)
    view, fragments = cache.page(
        await cache.current(), handler.current_user.name, may_see_all(handler)
    )
    words = {
        k: ""
        for k in (
            "done",
            "error",
            "error_field",
            "reason",
            "target",
            "grant_user",
            "grant_hours",
            "grant_reason",
        )
    }
    html = await handler.render_template(
        "gpuhub_fleet.html",
        view=view,
        may_grant=may_grant(handler),
        who_may_grant=WHO_MAY_GRANT,
        **{k: Markup(v) for k, v in fragments.items()},  # rendered and escaped already
        **{**words, **say},
    )
    handler.set_status(status)
    handler.finish(html)


HANDLERS: list[tuple[str, Any]] = [
    (r"/gpuhub/fleet", FleetHandler),
]
