"""The fleet page's figures, pure: a copy of the monitor's (:func:`snapshot`, taken on the
event loop) in, the page's rows, totals, GPU-hours and budgets (:class:`FleetView`) out.

No I/O and no templates (as kubespawner's ``objects.py`` builds manifests): the page
(:mod:`gpuhub.hub.web.fleet`) runs :func:`fleet_view` in a thread after each monitor tick
and renders what it returns.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from gpuhub.core import words
from gpuhub.core.budgets import hours_words
from gpuhub.core.holdings import Holding
from gpuhub.core.quantity import human_memory
from gpuhub.hub.ledger.budget_usage import BudgetState, BudgetView
from gpuhub.hub.ledger.gpu_capacity import DeviceFree
from gpuhub.hub.monitor.eta import Estimate
from gpuhub.hub.monitor.gpu_monitor import HISTORY_SECONDS, GPUMonitor
from gpuhub.hub.monitor.reclaim import ReclaimRule
from gpuhub.hub.monitor.usage import gpu_hours
from gpuhub.hub.monitor.utilization import GPUSample, Unexplained, holding_key
from gpuhub.hub.web.sparkline import sparkline


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
    # A waiting row's estimated start in the spawn page's words ("Likely to start around
    # 14:30 UTC, ..."); "" once held, or before the monitor's first estimate.
    estimate: str = ""


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
    # GPUMonitor.eta.estimates: each wait's estimated start (a dict replaced, never changed)
    estimates: Mapping[tuple[str, str, str], Estimate] = field(default_factory=dict)
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
        estimates=monitor.eta.estimates,
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
        **_holding_fields(h),
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
        spark=sparkline(track.history, last, HISTORY_SECONDS) if last is not None else "",
        utilization=utilization,
        memory_used=used,
        idle_for=idle_for,
        warned=warned,
        seconds_left=left,
    )


def _holding_fields(h: Holding) -> dict[str, Any]:
    """What every row says of its holding, held or waiting: whose, what, since when, and
    how many GPUs it counts as."""
    return {
        "user": h.user,
        "kind": h.kind,
        "name": h.name,
        "gpu_type": h.gpu_type or "GPU",
        "gpus": h.gpus,
        "since": h.since,
        "since_text": words.moment_utc(h.since) if h.since else "—",
        "since_iso": words.iso(h.since) if h.since else "",
        "label": h.label,
        "amount": float(h.amount),
        "gpus_text": h.gpus_text,
    }


def _waiting_row(h: Holding, estimate: Estimate | None, now: float) -> Row:
    """A server or job that waits for its GPUs: what it asked for, where it waits, since
    when and when it likely starts; nothing sampled (it has no GPU to sample)."""
    return Row(
        **_holding_fields(h),
        spark="",
        utilization=None,
        memory_used=None,
        idle_for=None,
        waiting=h.waiting_words,
        estimate=estimate.sentence(now) if estimate is not None else "",
        unsampled_text="",
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
        (_waiting_row(h, snap.estimates.get(holding_key(h)), now) for h in snap.waiting),
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
