"""The fleet page in the hub (``/hub/gpuhub/fleet``): who holds which GPUs, how busy they are.

JupyterHub admins and holders of ``custom:gpuhub:fleet`` see every holder, totals per GPU
type and group, GPU-hours per user and group, and may stop a server with a reason that the
user then reads on their next hub page. Everyone else sees the same page with their own
rows and GPU-hours only.

Everything comes from the hub's GPU monitor (:mod:`gpuhub.monitor`), already in memory:
rendering lists nothing and samples nothing, so the page stays fast with thousands of GPUs.
Jinja autoescapes every value; sparklines are inline SVG built from numbers only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyterhub.handlers.base import BaseHandler
from markupsafe import Markup
from tornado import web

from . import monitor as gpu_monitor
from .monitor import GPUMonitor, Track
from .sparkline import SPARK_HEIGHT, SPARK_WIDTH

FLEET_SCOPE = "custom:gpuhub:fleet"
MAX_REASON = 500


@dataclass(frozen=True)
class Row:
    user: str
    kind: str
    name: str
    gpu_type: str
    gpus: int
    since: float | None
    spark: str  # SVG polyline points; "" when nothing was sampled yet
    utilization: float | None  # last mean, 0..1
    memory_used: int | None  # bytes, all GPUs of the holding
    idle_for: float | None  # seconds below the threshold; None when busy or unknown
    warned: bool = False
    seconds_left: float | None = None
    # Preformatted, so the template loops over plain strings (1,000 rows in < 50 ms).
    since_text: str = "—"
    idle_text: str = "—"
    memory_text: str = "—"
    util_text: str = ""
    left_text: str = ""


@dataclass
class FleetView:
    rows: list[Row]
    see_all: bool
    types: list[tuple[str, int, int, int]] = field(default_factory=list)  # name, held, free, total
    groups: list[tuple[str, int, float, float]] = field(default_factory=list)  # name, held, 24h, 7d
    hours: list[tuple[str, float, float]] = field(default_factory=list)  # user, 24 h, 7 d
    reclaim: str = ""  # the rule, in words; "" when off


def ago(seconds: float | None) -> str:
    """45 s, 12 min, 3.5 h; a dash for unknown."""
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    return f"{seconds / 3600:.1f} h"


def _row(track: Track, monitor: GPUMonitor, now: float) -> Row:
    h = track.holding
    samples = track.samples
    memory = [s.memory_used for s in samples if s.memory_used is not None]
    warned, left = False, None
    if h.kind == "server" and monitor.rule is not None:
        found = monitor.clock_of(h.user, h.name)
        if found is not None and found[1].deadline is not None:
            warned, left = True, max(0.0, found[1].deadline - now)
    utilization = (sum(s.utilization for s in samples) / len(samples)) if samples else None
    idle_for = None if track.idle_since is None else now - track.idle_since
    used = sum(memory) if memory else None
    return Row(
        since_text=f"{ago(now - h.since)} ago" if h.since else "—",
        idle_text=ago(idle_for),
        memory_text=f"{used / (1 << 30):.1f} GiB" if used is not None else "—",
        util_text=f"{int(utilization * 100)} %" if utilization is not None else "",
        left_text=ago(left) if left is not None else "",
        user=h.user,
        kind=h.kind,
        name=h.name,
        gpu_type=h.gpu_type or "GPU",
        gpus=h.gpus,
        since=h.since,
        spark=track.spark(),
        utilization=utilization,
        memory_used=used,
        idle_for=idle_for,
        warned=warned,
        seconds_left=left,
    )


def fleet_view(
    monitor: GPUMonitor,
    viewer: str,
    see_all: bool,
    groups_of: Mapping[str, list[str]],
    now: float | None = None,
) -> FleetView:
    """What the page shows to ``viewer`` (everything when ``see_all``)."""
    now = time.time() if now is None else now
    tracks = [t for t in monitor.tracks.values() if see_all or t.holding.user == viewer]
    rows = sorted(
        (_row(t, monitor, now) for t in tracks),
        key=lambda r: (-(r.idle_for or -1), r.user, r.kind, r.name),
    )
    day = monitor.store.gpu_hours(now - 86_400)
    week = monitor.store.gpu_hours(now - 7 * 86_400)
    users = set(week) | set(day)
    if not see_all:
        users &= {viewer}
    view = FleetView(
        rows=rows,
        see_all=see_all,
        hours=sorted(((u, day.get(u, 0.0), week.get(u, 0.0)) for u in users), key=lambda x: -x[2]),
    )
    rule = monitor.rule
    if rule is not None:
        view.reclaim = (
            f"GPU servers idle below {rule.utilization_below:.0%} for {rule.after:g} s are "
            f"warned, then stopped {rule.warn:g} s later"
        )
    if see_all:
        held_by_type: dict[str, int] = {}
        for row in rows:
            held_by_type[row.gpu_type] = held_by_type.get(row.gpu_type, 0) + row.gpus
        names = sorted(set(held_by_type) | set(monitor.capacity))
        view.types = [
            (
                n,
                held_by_type.get(n, 0),
                monitor.capacity.get(n, (0, 0))[0],
                monitor.capacity.get(n, (0, 0))[1],
            )
            for n in names
        ]
        held_by_group: dict[str, list[float]] = {}
        for row in rows:
            for group in groups_of.get(row.user, []):
                held_by_group.setdefault(group, [0, 0.0, 0.0])[0] += row.gpus
        for user in users:
            for group in groups_of.get(user, []):
                entry = held_by_group.setdefault(group, [0, 0.0, 0.0])
                entry[1] += day.get(user, 0.0)
                entry[2] += week.get(user, 0.0)
        view.groups = [(g, int(v[0]), v[1], v[2]) for g, v in sorted(held_by_group.items())]
    return view


_PAGES: dict[tuple[int, int, str], tuple[FleetView, dict[str, str]]] = {}
FRAGMENTS = {"rows_html": "gpuhub_fleet_rows.html", "hours_html": "gpuhub_fleet_hours.html"}


async def cached_view(
    env: Any,
    monitor: GPUMonitor,
    viewer: str,
    see_all: bool,
    groups_of: Callable[[], Mapping[str, list[str]]],
) -> tuple[FleetView, dict[str, str]]:
    """The view and its long tables' rows (holders, GPU-hours), built once per monitor tick and viewer (admins share
    one): the figures only change when the monitor samples, so a page view between ticks
    renders just the page around them. Times in the rows are as of the last sample."""
    key = (id(monitor), monitor.version, "*" if see_all else viewer)
    cached = _PAGES.get(key)
    if cached is None:
        view = fleet_view(monitor, viewer, see_all, groups_of(), now=monitor.last_tick)
        context = {"view": view, "spark_width": SPARK_WIDTH, "spark_height": SPARK_HEIGHT}
        fragments = {}
        for name, path in FRAGMENTS.items():
            template = env.get_template(path)
            if env.is_async:
                fragments[name] = await template.render_async(**context)
            else:
                fragments[name] = template.render(**context)
        for old in [k for k in _PAGES if k[:2] != key[:2]]:
            del _PAGES[old]  # an older tick
        if len(_PAGES) > 1000:
            _PAGES.clear()
        cached = _PAGES[key] = (view, fragments)
    return cached


def may_see_all(handler: BaseHandler) -> bool:
    user = handler.current_user
    return bool(getattr(user, "admin", False)) or FLEET_SCOPE in handler.expanded_scopes


def _monitor(handler: BaseHandler) -> GPUMonitor | None:
    if gpu_monitor.current() is None and handler.current_user is not None:
        user = handler.find_user(handler.current_user.name)
        if user is not None:
            user.spawner  # noqa: B018 - a gpuhub spawner starts the monitor
    return gpu_monitor.current()


class FleetHandler(BaseHandler):
    """``GET /hub/gpuhub/fleet``: the page."""

    @web.authenticated
    async def get(self) -> None:
        monitor = _monitor(self)
        if monitor is None:
            raise web.HTTPError(503, "gpuhub's GPU monitor is not running on this hub yet.")
        see_all = may_see_all(self)
        view, fragments = await cached_view(
            self.settings["jinja2_env"],
            monitor,
            self.current_user.name,
            see_all,
            lambda: {u.name: [g.name for g in u.groups] for u in self.users.values()},
        )
        html = await self.render_template(
            "gpuhub_fleet.html",
            view=view,
            **{k: Markup(v) for k, v in fragments.items()},  # rendered and escaped already
            stopped=self.get_argument("stopped", ""),
        )
        self.finish(html)


class FleetStopHandler(BaseHandler):
    """``POST /hub/gpuhub/fleet/stop`` (form: target "user/server", reason): stop a server."""

    @web.authenticated
    async def post(self) -> None:
        monitor = _monitor(self)
        if monitor is None:
            raise web.HTTPError(503, "gpuhub's GPU monitor is not running on this hub yet.")
        # The row's button sends "user/server" (neither may contain a slash in JupyterHub).
        name, _, server = self.get_body_argument("target", "").partition("/")
        reason = " ".join(self.get_body_argument("reason", "").split())[:MAX_REASON]
        own = name == self.current_user.name
        if not own and not may_see_all(self):
            raise web.HTTPError(403, "Only GPU fleet admins may stop other users' servers.")
        if not own and not reason:
            raise web.HTTPError(400, "Give a reason: the user reads it on their next visit.")
        user = self.find_user(name)
        if user is None or server not in user.spawners or not user.spawners[server].active:
            raise web.HTTPError(404, f"{name} has no running server {server!r}.")
        why = reason or "you stopped it from the fleet page"
        stopped = await monitor.stop_server(user, server, why, by=self.current_user.name)
        if not stopped:
            raise web.HTTPError(409, "That server is starting or stopping already; try again.")
        self.redirect(f"{self.hub.base_url}gpuhub/fleet?stopped={name}", status=303)


HANDLERS: list[tuple[str, Any]] = [
    (r"/gpuhub/fleet", FleetHandler),
    (r"/gpuhub/fleet/stop", FleetStopHandler),
]
