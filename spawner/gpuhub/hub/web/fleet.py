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
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from jupyterhub.handlers.base import BaseHandler
from markupsafe import Markup
from tornado import web

from gpuhub.core import words
from gpuhub.core.budgets import hours_words
from gpuhub.core.holdings import Holding
from gpuhub.core.quantity import human_memory
from gpuhub.hub.ledger.budget_usage import BudgetState, BudgetView
from gpuhub.hub.ledger.gpu_capacity import DeviceFree
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.gpu_monitor import HISTORY_SECONDS, GPUMonitor
from gpuhub.hub.monitor.reclaim import ReclaimRule
from gpuhub.hub.monitor.usage import gpu_hours
from gpuhub.hub.monitor.utilization import GPUSample, Unexplained

# FLEET_SCOPE: re-exported for the pages beside this one that import it from here (the
# bookings calendar); it lives in access.py with gpuhub's other scopes.
from gpuhub.hub.web.access import FLEET_SCOPE as FLEET_SCOPE
from gpuhub.hub.web.access import WHO_MAY_GRANT, may_grant, may_see_all
from gpuhub.hub.web.sparkline import SPARK_HEIGHT, SPARK_WIDTH, sparkline

log = logging.getLogger("gpuhub.hub.web.fleet")

MAX_REASON = 500
MAX_TARGET = 600  # "user/name": JupyterHub's names are far shorter


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
    unsampled_text: str = "no samples"  # why there is no sparkline
    amount: float = 0.0  # the GPUs it counts as (a share: its fraction)
    gpus_text: str = ""  # "2 x A100", "8 GB of GPU 3 (T4, shared), 0.5 GPU"
    # How people call it (Holding.label): "server 'default'", "jobs of server 'gpu1'
    # (long-one-5ff007)", as the user's notices and the holdings API name it too.
    label: str = ""
    # Where it waits for its GPUs ("waiting in line"); "" once it holds them. A waiting row
    # counts in its type's Waiting, never in Held, Free or GPU-hours.
    waiting: str = ""
    since_iso: str = ""  # <time datetime>: the browser writes it in the reader's zone


@dataclass
class FleetView:
    rows: list[Row]
    see_all: bool
    # name, held, free, total, waiting: GPUs, a shared type's in fractions (1.5); held, free
    # and total are GPUs given (devices, bound pods), waiting what waits for them
    types: list[tuple[str, float, float, float, float]] = field(default_factory=list)
    groups: list[tuple[str, float, float, float]] = field(
        default_factory=list
    )  # name, held, 24h, 7d
    hours: list[tuple[str, float, float]] = field(default_factory=list)  # user, 24 h, 7 d
    # A type shared by memory: "9 GB of 16 GB free", under its name in the types table.
    memory: dict[str, str] = field(default_factory=dict)
    reclaim: str = ""  # the rule, in words; "" when off
    # Shared GPUs' memory no proven holder explains, a sentence per GPU (fleet admins only).
    unexplained: list[str] = field(default_factory=list)
    # GPU-hour budgets: each shared group's pool, then each user's (a viewer: their own).
    budgets: list[BudgetLine] = field(default_factory=list)
    budgets_on: bool = False  # gpu_hours is set
    # When budgets were switched on, where that is within a budget's current period: what
    # was used before is in the GPU-hours below but charged to no budget ("" otherwise).
    budgets_since: str = ""  # "29 Nov 2026, 03:10 UTC", rewritten in the reader's zone
    budgets_since_iso: str = ""
    # Types claimed through DRA: (type, its devices per node), fleet admins only.
    devices: list[tuple[str, list[DeviceLine]]] = field(default_factory=list)


@dataclass(frozen=True)
class DeviceLine:
    """One DRA device on the fleet page: its node, name, what it has free, its holders."""

    node: str
    name: str
    free: str
    holders: str

    @classmethod
    def of(cls, device: DeviceFree) -> DeviceLine:
        return cls(device.node, device.name, device.free_text, "; ".join(device.holders))


@dataclass(frozen=True)
class BudgetLine:
    """One budget on the page, its figures written already (as the holdings answer has them)."""

    scope: str  # "user" or "group"
    name: str
    budget: str  # which budget: "the default budget", "the staff group's shared budget"
    used: float  # GPU-hours: the user's own part in a shared pool
    allowed: float  # GPU-hours with extra hours ("" in the page for a pool's member)
    left: float
    resets: str
    resets_iso: str
    state: str  # ok, warning, over
    extra: float
    grants: tuple[str, ...]  # "5 h by root: thesis deadline"
    text: str

    def hours(self, value: float) -> str:
        """ "14.2 GPU-h", "0.0042 GPU-h": budgets of minutes read as more than zeros."""
        return f"{hours_words(value)} GPU-h"


def budget_line(state: BudgetState) -> BudgetLine:
    """A budget's line; a member of a shared pool is shown with their own part used and the
    pool's left."""
    scope = "user" if state.user else "group"
    return BudgetLine(
        scope,
        state.user or state.budget.name,
        state.budget.label,
        round(state.own_seconds / 3600, 4),
        round(state.allowed_hours, 4),
        round(state.left_hours, 4),
        state.resets,
        state.budget.resets_at(state.now),
        state.state,
        round(state.extra_hours, 4),
        tuple(f"{hours_words(g.hours)} h by {g.by}: {g.reason}" for g in state.grants),
        state.text,
    )


def amount(gpus: float) -> int | float:
    """GPUs on the page: whole numbers as they are, a share's fraction as the quota's
    sentences round it (two decimals: 0.33)."""
    value = Fraction(gpus).limit_denominator(10**6)
    return value.numerator if value.denominator == 1 else round(float(value), 2)


def ago(seconds: float | None) -> str:
    """45 s, 12 min, 3.5 h; a dash for unknown; never negative (a moment ahead of this
    build's clock, read from another, is "0 s")."""
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    return f"{seconds / 3600:.1f} h"


class TrackCopy(NamedTuple):
    """What the page needs of one :class:`~gpuhub.hub.monitor.gpu_monitor.Track`, taken on the event loop so
    that the view can be built in a thread while the monitor moves on. Every field is
    immutable (the monitor replaces a track's history and samples, never changes them), so
    taking it copies nothing."""

    holding: Holding
    history: tuple[tuple[float, float], ...]
    samples: tuple[GPUSample, ...]
    idle_since: float | None
    deadline: float | None  # a warned server's stop time (a job hold's: its processes' end)
    unsampled: str = ""  # why it has no samples (the utilization source's words), "" if it has


@dataclass(frozen=True)
class Snapshot:
    """The immutable inputs of one build of the page (see :class:`FleetCache`)."""

    version: int
    now: float
    tracks: tuple[TrackCopy, ...]
    rule: ReclaimRule | None
    capacity: Mapping[str, tuple[float, float]]
    memory: Mapping[str, tuple[int, int]]  # GPUMonitor.memory: bytes free, in all
    hourly: Mapping[int, Mapping[tuple[str, str], float]]  # UsageStore.hourly, as of now
    groups_of: Mapping[str, list[str]]
    waiting: tuple[Holding, ...] = ()  # GPUMonitor.waiting: what waits for GPUs
    unexplained: tuple[Unexplained, ...] = ()  # GPUMonitor.unexplained (an immutable tuple)
    ended: tuple[str, ...] = ()  # GPUMonitor.strays_ended: processes ended, for admins
    ends: bool = False  # such processes are ended (GPUMonitor.strays), not only shown
    budgets: BudgetView | None = None  # GPUMonitor.budget_view; None: no gpu_hours
    # GPUMonitor.devices: each DRA type's devices (tuples of frozen values)
    devices: Mapping[str, tuple[DeviceFree, ...]] = field(default_factory=dict)


def snapshot(monitor: GPUMonitor, groups_of: Mapping[str, list[str]]) -> Snapshot:
    """Take what the page shows, on the event loop: references to immutable values, one
    pass over the holdings, the current hour's GPU-seconds copied (about 1 ms for 1,000)."""
    clocks = monitor.clocks.clocks if monitor.clocks is not None else {}
    tracks = []
    for track in monitor.tracks.values():
        h = track.holding
        clock = clocks.get(track.launch()) if clocks else None
        deadline = clock.deadline if clock is not None else None
        why = "" if track.samples else monitor.source.unsampled(h)
        tracks.append(TrackCopy(h, track.history, track.samples, track.idle_since, deadline, why))
    return Snapshot(
        version=monitor.version,
        now=monitor.last_tick or time.time(),
        tracks=tuple(tracks),
        rule=monitor.rule,
        capacity=dict(monitor.capacity),
        memory=dict(monitor.memory),
        hourly=monitor.store.hourly_snapshot(),
        groups_of=groups_of,
        waiting=tuple(monitor.waiting.values()),
        unexplained=monitor.unexplained,
        ended=monitor.strays_ended,
        ends=monitor.strays is not None,
        budgets=monitor.budget_view if monitor.budget_config is not None else None,
        devices=dict(monitor.devices),
    )


def _row(track: TrackCopy, now: float) -> Row:
    h = track.holding
    samples = track.samples
    memory = [s.memory_used for s in samples if s.memory_used is not None]
    warned, left = False, None
    if track.deadline is not None:
        warned, left = True, max(0.0, track.deadline - now)
    utilization = (sum(s.utilization for s in samples) / len(samples)) if samples else None
    idle_for = None if track.idle_since is None else now - track.idle_since
    used = sum(memory) if memory else None
    last = track.history[-1][0] if track.history else None
    return Row(
        since_text=words.moment_utc(h.since) if h.since else "—",
        since_iso=words.iso(h.since) if h.since else "",
        label=h.label,
        idle_text=ago(idle_for),
        # As the lab's cards say it, per GPU; a holding of several says the sum is theirs.
        memory_text=(
            "—"
            if used is None
            else f"{used / (1 << 30):.1f} GiB"
            + (f" on {len(memory)} GPUs" if len(memory) > 1 else "")
        ),
        # As the lab's sidebar says it (Math.round), and what it is: the last sample.
        util_text=f"{round(utilization * 100)} % now" if utilization is not None else "",
        left_text=ago(left) if left is not None else "",
        unsampled_text=f"no samples: {track.unsampled}" if track.unsampled else "no samples",
        user=h.user,
        kind=h.kind,
        name=h.name,
        gpu_type=h.gpu_type or "GPU",
        gpus=h.gpus,
        since=h.since,
        spark=sparkline(track.history, last, HISTORY_SECONDS) if last is not None else "",
        utilization=utilization,
        memory_used=used,
        idle_for=idle_for,
        warned=warned,
        seconds_left=left,
        amount=float(h.amount),
        gpus_text=h.gpus_text,
    )


def _waiting_row(h: Holding) -> Row:
    """A server or job that waits for its GPUs: what it asked for, where it waits, since
    when; nothing sampled (it has no GPU to sample)."""
    return Row(
        user=h.user,
        kind=h.kind,
        name=h.name,
        gpu_type=h.gpu_type or "GPU",
        gpus=h.gpus,
        since=h.since,
        spark="",
        utilization=None,
        memory_used=None,
        idle_for=None,
        since_text=words.moment_utc(h.since) if h.since else "—",
        since_iso=words.iso(h.since) if h.since else "",
        label=h.label,
        waiting=h.waiting_words,
        unsampled_text="",
        amount=float(h.amount),
        gpus_text=h.gpus_text,
    )


def fleet_view(snap: Snapshot) -> FleetView:
    """Everything the page shows to fleet admins, as of ``snap`` (pure: runs in a thread)."""
    now = snap.now
    rows = sorted(
        (_row(t, now) for t in snap.tracks),
        key=lambda r: (-(r.idle_for or -1), r.user, r.kind, r.name),
    )
    # What waits comes after what holds, first come first.
    waiting = sorted(
        (_waiting_row(h) for h in snap.waiting),
        key=lambda r: (r.since or 0.0, r.user, r.kind, r.name),
    )
    day = gpu_hours(snap.hourly, now - 86_400)
    week = gpu_hours(snap.hourly, now - 7 * 86_400)
    users = set(week) | set(day)
    view = FleetView(
        rows=rows,
        see_all=True,
        hours=sorted(((u, day.get(u, 0.0), week.get(u, 0.0)) for u in users), key=lambda x: -x[2]),
    )
    rule = snap.rule
    if rule is not None:
        view.reclaim = (
            f"GPU servers (and processes a stopped server left on its GPUs) idle below "
            f"{rule.utilization_below:.0%} for {rule.after:g} s are warned, then stopped "
            f"(ended) {rule.warn:g} s later"
        )
    held_by_type: dict[str, float] = {}
    for row in rows:
        held_by_type[row.gpu_type] = held_by_type.get(row.gpu_type, 0) + row.amount
    waiting_by_type: dict[str, float] = {}
    for row in waiting:
        waiting_by_type[row.gpu_type] = waiting_by_type.get(row.gpu_type, 0) + row.amount
    names = sorted(set(held_by_type) | set(snap.capacity) | set(waiting_by_type))
    # A shared type's figures are fractions of GPUs: as the quota and the lab round them.
    view.types = [
        (
            n,
            amount(held_by_type.get(n, 0)),
            amount(snap.capacity.get(n, (0, 0))[0]),
            amount(snap.capacity.get(n, (0, 0))[1]),
            amount(waiting_by_type.get(n, 0)),
        )
        for n in names
    ]
    view.memory = {
        n: f"{human_memory(free)} of {human_memory(total)} GPU memory free"
        for n, (free, total) in snap.memory.items()
    }
    view.unexplained = [unexplained_text(u, snap.ends) for u in snap.unexplained if u.used]
    view.unexplained += list(snap.ended)
    held_by_group: dict[str, list[float]] = {}
    for row in rows:
        for group in snap.groups_of.get(row.user, []):
            held_by_group.setdefault(group, [0, 0.0, 0.0])[0] += row.amount
    for user in users:
        for group in snap.groups_of.get(user, []):
            entry = held_by_group.setdefault(group, [0, 0.0, 0.0])
            entry[1] += day.get(user, 0.0)
            entry[2] += week.get(user, 0.0)
    view.groups = [(g, amount(v[0]), v[1], v[2]) for g, v in sorted(held_by_group.items())]
    view.rows = [*rows, *waiting]
    if snap.budgets is not None:
        view.budgets_on = True
        view.budgets = [budget_line(s) for s in (*snap.budgets.groups, *snap.budgets.users)]
        since = snap.budgets.since
        states = (*snap.budgets.groups, *snap.budgets.users)
        if since is not None and any(since > s.budget.period(now)[0] for s in states):
            view.budgets_since = words.moment_utc(since)
            view.budgets_since_iso = words.iso(since)
    view.devices = [
        (name, [DeviceLine.of(d) for d in sorted(devices, key=_by_node)])
        for name, devices in sorted(snap.devices.items())
    ]
    return view


def _by_node(device: DeviceFree) -> tuple[str, int, str]:
    """Node, then GPU number (GPU 2 before GPU 10), then name."""
    parts = device.name.split()
    number = parts[1] if len(parts) > 1 and parts[0] == "GPU" else ""
    return (device.node, int(number) if number.isdigit() else -1, device.name)


def unexplained_text(entry: Unexplained, ends: bool = False) -> str:
    """A shared GPU's memory that no holder proves is theirs, for the fleet admins."""
    many = len(entry.pids) != 1
    accounts = ", ".join(sorted({a for a in entry.accounts if a}))
    return (
        f"GPU {entry.gpu} ({entry.gpu_type or 'GPU'}): {human_memory(entry.used)} used by "
        f"process{'es' if many else ''} {', '.join(map(str, entry.pids))}, which prove"
        f"{'' if many else 's'} no holder of it (no launch grant, another OS account's, or "
        "another GPU's); nobody's share is charged for it"
        f"{f' (OS accounts: {accounts})' if accounts else ''}."
        + (" It is ended once that has lasted the grace for going over a share." if ends else "")
    )


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


def _monitor(handler: BaseHandler) -> GPUMonitor | None:
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
    monitor = _monitor(handler)
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


class Refused(Exception):
    """A fleet action refused: the page says ``message`` (next to ``field`` when it names
    one of the page's fields) with HTTP ``status``."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


class _ActionHandler(BaseHandler):
    """The fleet page's actions: a refusal keeps the admin on the fleet page, its sentence
    next to the field it is about (the reason) or above the table, with a 4xx status."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST",)

    async def act(self) -> None:
        raise NotImplementedError

    @web.authenticated
    async def post(self) -> None:
        try:
            await self.act()
        except Refused as refused:
            await render_fleet(
                self,
                refused.status,
                error=refused.message,
                error_field=refused.field,
                reason=self.get_body_argument("reason", "")[:MAX_REASON],
                target=self.get_body_argument("target", ""),
            )

    def render_template(self, name: str, sync: bool = False, **ns: Any) -> Any:
        if name == "404.html":  # JupyterHub's 404 page shows no message; ours is the point
            name = "error.html"
        return super().render_template(name, sync=sync, **ns)

    def _given_target(self) -> tuple[str, str, str]:
        """The row's button sends "user/name" (neither may contain a slash in JupyterHub);
        refusals quote it, so one longer than any holder's is refused unquoted."""
        target = self.get_body_argument("target", "")
        if len(target) > MAX_TARGET:
            raise Refused(
                400,
                f"target must name a holder as user/name, at most {MAX_TARGET} characters; "
                f"this one has {len(target)}.",
            )
        name, slash, item = target.partition("/")
        return name, slash, item

    def _given_reason(self, own: bool, what: str) -> str:
        """The reason given, or the refusal when another user's holding is stopped without."""
        reason = " ".join(self.get_body_argument("reason", "").split())[:MAX_REASON]
        if not own and not reason:
            raise Refused(
                400,
                f"Give a reason in the Reason field to {what}: they read it on their next "
                "visit to the hub.",
                "reason",
            )
        return reason

    async def _done(self, monitor: GPUMonitor, said: str) -> None:
        """Back to the page, once it shows the action's effect; the page says ``said`` to
        this admin alone (the link carries a token, never the text)."""
        await fleet_cache(monitor, self).up_to_date()
        done = OUTCOMES.record(self.current_user.name, said)
        self.redirect(f"{self.hub.base_url}gpuhub/fleet?done={done}", status=303)


class FleetStopHandler(_ActionHandler):
    """``POST /hub/gpuhub/fleet/stop`` (form: target "user/server", reason): stop a server."""

    async def act(self) -> None:
        monitor = _monitor(self)
        if monitor is None:
            raise Refused(503, "gpuhub's GPU monitor is not running on this hub yet.")
        name, _, server = self._given_target()
        own = name == self.current_user.name
        if not own and not may_see_all(self):
            raise Refused(403, "Only GPU fleet admins may stop other users' servers.")
        label = f"server {server!r}" if server else "server"
        reason = self._given_reason(own, f"stop {name}'s {label}")
        user = self.find_user(name)
        if user is None or server not in user.spawners or not user.spawners[server].active:
            raise Refused(404, f"{name} has no running server {server!r}.")
        why = reason or "you stopped it from the fleet page"
        stopped = await monitor.stop_server(
            user, server, why, by=self.current_user.name, notify=not own
        )
        if not stopped:
            raise Refused(409, "That server is starting or stopping already; try again.")
        whose = "your" if own else f"{name}'s"
        told = "" if own else "; they will read why on their next visit"
        await self._done(monitor, f"Stopped {whose} server {server or 'default'!r}{told}.")


class FleetCancelHandler(_ActionHandler):
    """``POST /hub/gpuhub/fleet/cancel`` (form: target "user/job", reason): cancel a GPU job
    (:meth:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor.cancel_job`). The same rights and checks as stopping a
    server: the user's own job, or anyone's for fleet admins, with a reason."""

    async def act(self) -> None:
        from gpuhub.hub.monitor.cancel import CancelRefused

        monitor = _monitor(self)
        if monitor is None:
            raise Refused(503, "gpuhub's GPU monitor is not running on this hub yet.")
        name, slash, job = self._given_target()
        if not name or not slash or "/" in job:  # a workstation's job hold may be named ""
            raise Refused(400, "target must name a job as user/job.")
        own = name == self.current_user.name
        if not own and not may_see_all(self):
            raise Refused(403, "Only GPU fleet admins may cancel other users' jobs.")
        reason = self._given_reason(own, f"cancel {name}'s job {job!r}")
        why = reason or "you cancelled it from the fleet page"
        track = monitor.tracks.get((name, "job", job))
        holding = track.holding if track is not None else monitor.waiting.get((name, "job", job))
        what = holding.label if holding is not None else f"job {job!r}"
        try:
            await monitor.cancel_job(name, job, why, by=self.current_user.name)
        except CancelRefused as exc:
            raise Refused(exc.status, exc.message) from None
        whose = "your" if own else f"{name}'s"
        told = "" if own else "; they will read why on their next visit"
        await self._done(monitor, f"Cancelled {whose} {what}{told}.")


HANDLERS: list[tuple[str, Any]] = [
    (r"/gpuhub/fleet", FleetHandler),
    (r"/gpuhub/fleet/stop", FleetStopHandler),
    (r"/gpuhub/fleet/cancel", FleetCancelHandler),
]
