"""The hub's GPU monitor: one loop per hub process that samples every held GPU.

Each tick (``gpu_monitor_interval`` seconds) it reads what is held from the GPU ledger and
how busy those GPUs are from the utilization source, then

* adds GPU-seconds per user to the usage store (persisted beside the hub database), and
  charges the same seconds to the user's GPU-hour budget (:mod:`gpuhub.hub.ledger.budget_usage`);
* tells users at 80 % and 100 % of their budget, and stops GPU work past its grace
  (:mod:`gpuhub.hub.monitor.budget_stops`, the grace clocks in :mod:`gpuhub.hub.monitor.budget_watch`);
* keeps 30 minutes of utilization per holding, for the fleet page's sparklines
  (:mod:`gpuhub.hub.monitor.track`);
* runs the idle clocks of :mod:`gpuhub.hub.monitor.reclaim` (:mod:`gpuhub.hub.monitor.idle_stops`)
  and watches shares of a GPU over their memory (:mod:`gpuhub.hub.monitor.share_stops`);
* stops servers whose warning ran out (:mod:`gpuhub.hub.monitor.stopping`) through the hub's
  own proxy and ``User.stop`` (as the hub's REST API does), so the database, the proxy and the
  ledger stay right, and records why for the user's next visit.

It starts with the first gpuhub spawner the hub creates (at start-up for running servers,
else at the first page that shows one), since JupyterHub has no start-up hook for it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC
from fractions import Fraction
from typing import Any

from gpuhub.core.holdings import Holding, gpu_type_names, named
from gpuhub.hub.ledger import booking_book
from gpuhub.hub.ledger.budget_usage import BudgetUsage, BudgetView
from gpuhub.hub.ledger.gpu_capacity import DeviceFree
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor import booking_watch
from gpuhub.hub.monitor.budget_stops import BudgetStops
from gpuhub.hub.monitor.budget_watch import BudgetWatch
from gpuhub.hub.monitor.eta_feed import EtaFeed, durations_path
from gpuhub.hub.monitor.idle_stops import IdleStops
from gpuhub.hub.monitor.overshare import ShareWatch, StrayWatch
from gpuhub.hub.monitor.reclaim import IdleClocks, ReclaimRule
from gpuhub.hub.monitor.share_stops import ShareStops
from gpuhub.hub.monitor.stopping import Stopping

# HISTORY_SECONDS: re-exported for the fleet page, which imports it from here (it lives in
# track.py with the tracks it bounds).
from gpuhub.hub.monitor.track import HISTORY_SECONDS as HISTORY_SECONDS
from gpuhub.hub.monitor.track import HoldingKey, Track
from gpuhub.hub.monitor.usage import UsageStore
from gpuhub.hub.monitor.utilization import (
    NoUtilization,
    Unexplained,
    UtilizationSource,
    holding_key,
)

log = logging.getLogger("gpuhub.hub.monitor.gpu_monitor")

SAMPLE_TIMEOUT = 20.0


class GPUMonitor(BudgetStops, IdleStops, ShareStops, Stopping):
    """Samples, accounts and reclaims (see the module docstring); budgets, idle reclaim,
    shares and stopping are its parts, each in a module of its own."""

    def __init__(
        self,
        spawner: Any,
        ledger: Ledger,
        source: UtilizationSource,
        rule: ReclaimRule | None,
        store: UsageStore,
        interval: float,
        budgets: BudgetUsage | None = None,
    ) -> None:
        self.spawner = spawner  # for the hub's settings and the GPU types' capacity
        self.ledger = ledger
        self.source = source
        self.rule = rule
        self.clocks = IdleClocks(rule) if rule is not None else None
        self.store = store
        self.interval = interval
        # GPU-hour budgets: what each has used (charged with the GPU-seconds), and the grace
        # clocks of users over theirs.
        self.budgets = budgets if budgets is not None else BudgetUsage(None)
        config = self.budget_config
        self.budget_watch = (
            BudgetWatch(config.grace, config.at_limit) if config is not None else None
        )
        # The last accounting (monotonic and wall clock), the holdings it charged (key ->
        # since) and each user's GPUs then and GPU-seconds it charged them.
        self._last_mono: float | None = None
        self._last_wall: float | None = None
        self._charged: dict[HoldingKey, float | None] = {}
        self._rates: dict[str, tuple[float, float]] = {}  # user -> (GPUs, seconds charged)
        # Every budget as of the last tick (the fleet page and /hub/metrics read it, in
        # other threads: replaced, never changed).
        self.budget_view = BudgetView()
        self.tracks: dict[HoldingKey, Track] = {}  # what holds GPUs (devices given, pods bound)
        # What waits for GPUs (in line, in Kueue's queue, for a node): counted against quotas
        # and shown as waiting; never sampled, billed or reclaimed. Replaced, never changed.
        self.waiting: dict[HoldingKey, Holding] = {}
        # gpu type display name -> (free, total) GPUs; a shared type's free is a fraction
        self.capacity: dict[str, tuple[float, float]] = {}
        # a type shared by memory's display name -> (bytes free, bytes in all)
        self.memory: dict[str, tuple[int, int]] = {}
        # a type claimed through DRA's display name -> its devices, what each has free and
        # who holds it (the fleet page's devices per node)
        self.devices: dict[str, tuple[DeviceFree, ...]] = {}
        self.type_names: dict[str, str] = {}  # ledger.gpu_type_names of the spawner's types
        self._told_capacity = False
        self.last_tick: float | None = None
        self.version = 0  # bumped whenever what the fleet page shows may have changed
        # Called (on the event loop, must not block) after each bump: the fleet page's cache.
        self.after_change: list[Callable[[], None]] = []
        # Holdings stopped or cancelled here, with the version that dropped them: a view built
        # before that hides them at once (gpuhub.hub.web.fleet.FleetCache).
        self.removed: dict[HoldingKey, int] = {}
        self.tick_seconds: deque[float] = deque(maxlen=100)  # what each tick cost
        self._task: asyncio.Task[None] | None = None
        self._stopping: set[HoldingKey] = set()
        self._tasks: set[asyncio.Future[Any]] = set()
        # Shares of a GPU over their memory (workstation without the CUDA MPS daemon).
        grace = float(getattr(spawner, "gpu_share_grace", 0) or 0)
        self.shares = ShareWatch(grace) if grace > 0 else None
        # Processes whose memory on a shared GPU proves no holder: ended after the same
        # grace; what the fleet admins are told of the last ones ended (newest last).
        end = bool(getattr(spawner, "gpu_share_end_unexplained", True))
        self.strays = StrayWatch(grace) if grace > 0 and end else None
        self.strays_ended: tuple[str, ...] = ()
        # Memory on shared GPUs that no proven holder explains (the admin's, never charged):
        # the last tick's, for the fleet page and /hub/metrics.
        self.unexplained: tuple[Unexplained, ...] = ()
        # Estimated starts of what waits, and hold durations learned (beside the usage file).
        self.eta = EtaFeed(durations_path(getattr(store, "path", None)))

    # -- the loop -------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        ticks = 0
        while True:
            started = time.perf_counter()
            try:
                await self.tick(time.time(), time.monotonic())
            except Exception:
                log.exception("gpuhub: GPU monitor tick failed")
            self.tick_seconds.append(time.perf_counter() - started)
            ticks += 1
            if ticks % max(1, int(30 / self.interval)) == 0:
                self.store.save()
                self.budgets.save()
            # A grace that runs out before the next tick ends on time, not a tick late.
            next_tick = time.monotonic() + self.interval
            while (due := self.next_stop(time.monotonic())) is not None and (
                time.monotonic() + due < next_tick
            ):
                await asyncio.sleep(due + 0.01)
                try:
                    await self.stop_due()
                except Exception:
                    log.exception("gpuhub: GPU monitor could not end a budget's grace")
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))

    async def tick(self, now: float, mono: float | None = None) -> None:
        """One round: holdings, samples, GPU-seconds, history, idle clocks, stops. ``mono``:
        the monotonic clock, which measures the time charged (the wall clock ``now`` only
        says which hour and period it belongs to); None: ``now`` measures it too (tests)."""
        await self._refresh_capacity()
        holdings = self._held()[0]
        try:
            samples = await asyncio.wait_for(self.source.sample(holdings), SAMPLE_TIMEOUT)
            unexplained = tuple(getattr(self.source, "unexplained", ()))
        except Exception as exc:  # a broken source must not stop accounting
            log.warning("gpuhub: cannot read GPU utilization: %s", exc)
            samples, unexplained = {}, ()
        self._tell_unexplained(unexplained)
        self.unexplained = unexplained
        if self.strays is not None:  # seen as of the sample's end (it may take a while)
            await self._end_strays(unexplained, time.time())
        # What changed while the sample was taken counts as of now: a server stopped meanwhile
        # must not come back as a row, one started meanwhile must not go (no samples yet).
        held, self.waiting = self._held()
        current = {holding_key(h): h for h in held}
        holdings = [h for h in holdings if holding_key(h) in current]
        self._account(held, now, mono)
        sampled = {holding_key(h) for h in holdings}
        holdings += [h for key, h in current.items() if key not in sampled]
        live: dict[HoldingKey, Track] = {}
        for holding in holdings:
            key = holding_key(holding)
            track = self.tracks.get(key)
            if track is None or track.holding.since != holding.since:
                track = Track(holding)
            track.holding = holding
            track.samples = tuple(samples.get(key, ()))
            self._remember(track, now)
            live[key] = track
        self.tracks = live
        if self.shares is not None:
            self._watch_shares(now)
        if self.clocks is not None:
            await self._reclaim(now)
        if self.budget_watch is not None:
            await self._watch_budgets(now, now if mono is None else mono)
        await booking_watch.watch(self, now)  # work on GPUs booked from now or soon
        self.refresh_budgets(now)
        self._drop_read_notices()
        self._estimate(now, now if mono is None else mono)
        self.last_tick = now
        self._changed()

    async def _refresh_now(self) -> None:
        """After a stop or cancel: what is free, and who holds what, as of now rather than as
        of the last tick (held and free must not lag the rows by a tick); utilization and
        GPU-seconds wait for the tick, which samples them."""
        await self._refresh_capacity()
        held, self.waiting = self._held()
        live = {holding_key(h): h for h in held}
        for key in [k for k in self.tracks if k not in live]:
            del self.tracks[key]
        for key, holding in live.items():  # e.g. the job hold a stopped server's job left
            if key not in self.tracks:
                self.tracks[key] = Track(holding)
        self._estimate(time.time(), time.monotonic())

    def _estimate(self, now: float, mono: float) -> None:
        """Every wait's estimated start again, and what ended learned (docs/architecture.md,
        "When, not only where"); a failure here never stops a tick."""
        try:
            self.eta.observe(self, now, mono)
        except Exception:
            log.exception("gpuhub: could not estimate when waiting requests start")

    def _held(self) -> tuple[list[Holding], dict[HoldingKey, Holding]]:
        """The ledger's holdings now, by display name: those that hold GPUs (devices given,
        pods bound), and those that wait for them, by key."""
        held, waiting = [], {}
        for holding in map(self._named, self.ledger.holdings()):
            if not holding.gpus:
                continue
            if holding.held:
                held.append(holding)
            else:
                waiting[holding_key(holding)] = holding
        return held, waiting

    def _changed(self, removed: HoldingKey | None = None) -> None:
        self.version += 1
        if removed is not None and self.after_change:  # a listener clears what it has seen
            self.removed[removed] = self.version
        for callback in self.after_change:
            try:
                callback()
            except Exception:
                log.exception("gpuhub: a GPU monitor listener failed")

    def _drop_read_notices(self) -> None:
        """A notice is shown until its server has been started again after the stop."""
        users = self._users() if self.store.notices else {}
        for name, notices in list(self.store.notices.items()):
            user = users.get(name)
            for notice in list(notices.values()):
                if notice.kind != "server":
                    continue  # a cancelled job's notice is shown for a day
                spawner = user.spawners.get(notice.server) if user is not None else None
                started = getattr(getattr(spawner, "orm_spawner", None), "started", None)
                if spawner is None or not spawner.ready or started is None:
                    continue
                if started.tzinfo is None:  # JupyterHub stores naive UTC
                    started = started.replace(tzinfo=UTC)
                if started.timestamp() > notice.when:
                    self.store.clear_notice(name, notice.server)

    def _named(self, holding: Holding) -> Holding:
        """Pods name their GPUs by type key or resource; people and the metrics use the GPU
        type's display name."""
        return named(holding, self.type_names)

    def _account(self, holdings: Sequence[Holding], now: float, mono: float | None = None) -> None:
        """GPU-seconds since the last accounting, a share as its fraction of a GPU, and each
        device of a user counted at most once (as :func:`gpuhub.core.holdings.gpus_held`
        counts it); the same seconds are charged to each user's GPU-hour budget.

        The interval is measured on the monotonic clock (``mono``): a wall clock set back or
        forward charges nothing twice and forgives nothing. A holding charged for the first
        time is charged from when it got its GPUs (``since``), never for the part of the
        interval before it held them: what ran is charged, not a whole interval ahead. The
        first accounting of a hub process charges nothing: what ran while the hub was down is
        not seen. Besides each tick, a stop accounts up to its moment (:meth:`settle`), so
        the seconds between the last tick and a stop are charged too."""
        last_mono, self._last_mono = self._last_mono, mono
        last_wall, self._last_wall = self._last_wall, now
        known, self._charged = self._charged, {holding_key(h): h.since for h in holdings}
        if last_wall is None:
            return
        if mono is not None and last_mono is not None:
            measured = mono - last_mono
        else:
            measured = now - last_wall
        elapsed = min(max(measured, 0.0), 3 * self.interval)  # a stalled hub adds no hours
        charged: dict[str, float] = {}
        rates: dict[str, float] = {}
        seen: dict[tuple[str, int], Fraction] = {}
        for holding in holdings:
            count = holding.amount
            if holding.devices:
                each, count = holding.amount / len(holding.devices), Fraction(0)
                for device in holding.devices:
                    key = (holding.user, device)
                    taken = min(each, 1 - seen.get(key, Fraction(0)))
                    seen[key] = seen.get(key, Fraction(0)) + taken
                    count += taken
            held_for = elapsed
            if holding.since is not None and known.get(holding_key(holding), -1.0) != holding.since:
                held_for = min(elapsed, max(now - holding.since, 0.0))  # new since last time
            self.store.add(holding.user, holding.gpu_type, float(count) * held_for, now)
            charged[holding.user] = charged.get(holding.user, 0.0) + float(count) * held_for
            rates[holding.user] = rates.get(holding.user, 0.0) + float(count)
        self._rates = {user: (rate, charged[user]) for user, rate in rates.items()}
        config = self.budget_config
        for user, seconds in charged.items():
            budget = config.budget_for(self._groups(user)) if config is not None else None
            self.budgets.charge(user, seconds, now, budget)

    def settle(self) -> None:
        """Charge what the monitor tracks up to now (before a stop takes a holding away, or
        a start adds one), so that a stop between ticks is charged to its moment."""
        if self._last_wall is None:
            return
        holdings = {k: t.holding for k, t in self.tracks.items()}
        for holding in self._held()[0]:
            holdings.setdefault(holding_key(holding), holding)
        self._account(list(holdings.values()), time.time(), time.monotonic())

    def _remember(self, track: Track, now: float) -> None:
        if not track.samples:
            track.idle_since = None
            return
        mean = sum(s.utilization for s in track.samples) / len(track.samples)
        history = (*track.history, (now, mean))
        cut = 0
        while history[cut][0] < now - HISTORY_SECONDS:
            cut += 1
        track.history = history[cut:] if cut else history
        below = self.rule.utilization_below if self.rule is not None else 0.01
        if all(s.utilization < below for s in track.samples):
            if track.idle_since is None:
                track.idle_since = now
        else:
            track.idle_since = None

    async def _refresh_capacity(self) -> None:
        try:
            types = self.spawner.gpu_policy.gpu_types
        except Exception as exc:  # an admin mistake is reported where the form renders
            log.debug("gpuhub: no GPU types for metrics: %s", exc)
            return
        self.type_names = gpu_type_names(types)
        try:
            capacity, note = await self.spawner.gpu_capacity()
        except Exception as exc:
            capacity, note = {}, f"{type(exc).__name__}: {exc}"
        if note and not self._told_capacity:
            self._told_capacity = True  # once per hub process, not every tick
            log.warning("gpuhub: gpuhub_gpus has no figures: %s", note)
        if not capacity:
            return
        self.capacity = {
            types[key].display_name: gpus_free(types[key], c)
            for key, c in capacity.items()
            if key in types
        }
        self.memory = {
            types[key].display_name: (c.memory_free, c.memory_total)
            for key, c in capacity.items()
            if key in types and c.memory_free is not None and c.memory_total is not None
        }
        self.devices = {
            types[key].display_name: c.dra_devices
            for key, c in capacity.items()
            if key in types and c.dra_devices
        }


def gpus_free(gpu_type: Any, capacity: Any) -> tuple[float, float]:
    """(free, total) GPUs of a type for the metrics and the fleet page: a shared type's
    free memory (or replicas) as the fraction of its GPUs it is."""
    sharing = getattr(gpu_type, "sharing", None)
    if sharing is None:
        return capacity.free, capacity.total
    if sharing.memory is not None:
        devices = capacity.devices
        if devices is None and capacity.memory_total is not None:
            devices = capacity.memory_total / sharing.memory
        if capacity.memory_free is None or devices is None:
            return 0.0, float(devices or 0)
        return min(capacity.memory_free / sharing.memory, float(devices)), float(devices)
    return capacity.free / sharing.replicas, capacity.total / sharing.replicas


_MONITOR: GPUMonitor | None = None


def current() -> GPUMonitor | None:
    """This hub process's monitor, once a gpuhub spawner has started it."""
    return _MONITOR


def holdings_changed() -> None:
    """A server started or stopped: the fleet page's holders, Held and Free follow at once
    (rebuilt in the background), not at the next tick, which may be 30 s away. Utilization
    and GPU-seconds still come with the tick."""
    monitor = _MONITOR
    if monitor is None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return

    async def refresh() -> None:
        monitor.settle()  # what stopped is charged up to its stop
        await monitor._refresh_now()
        monitor._changed()

    task = asyncio.ensure_future(refresh())
    monitor._tasks.add(task)
    task.add_done_callback(monitor._tasks.discard)


def for_handler(handler: Any) -> GPUMonitor | None:
    """The monitor, for a hub request handler: a gpuhub spawner starts it, so the current
    user's is made if none has been yet (a hub just started, nobody spawned)."""
    if _MONITOR is None and handler.current_user is not None:
        user = handler.find_user(handler.current_user.name)
        if user is not None:
            user.spawner  # noqa: B018 - a gpuhub spawner starts the monitor
    return _MONITOR


def check_settings(spawner: Any) -> str | None:
    """The admin's GPU settings, checked once when the hub starts: a mistake is one error
    line naming the setting (the form refuses to render until it is fixed). Returns it."""
    from gpuhub.core.policy import PolicyConfigError

    try:
        spawner.gpu_policy  # noqa: B018 - validates the policy for this spawner's platform
        spawner.gpu_quota_limit()
        spawner.gpu_idle_reclaim_rule()
        spawner.gpu_line_order()
        spawner.gpu_budget_config()
        booking_book.rules_of(spawner)
    except PolicyConfigError as exc:
        log.error("gpuhub: the GPU settings in jupyterhub_config.py are invalid: %s", exc)
        return str(exc)
    return None


def _half_life(spawner: Any) -> float:
    """``usage_half_life`` as checked with ``line_order`` (a week if it is not valid)."""
    try:
        return float(spawner.gpu_line_order().half_life)
    except Exception:
        return 7 * 24 * 3600.0


async def _start(spawner: Any) -> None:
    global _MONITOR
    check_settings(spawner)
    booking_book.attach(spawner)  # the bookings the watch keeps GPUs free for
    ledger = await spawner.gpu_ledger()
    if _MONITOR is not None:
        return
    rule = spawner.gpu_idle_reclaim_rule()
    source = spawner.gpu_utilization_source(**spawner.gpu_utilization_settings())
    store = UsageStore(spawner.gpu_usage_file or None)
    atexit.register(store.save)  # the hub's shutdown keeps the GPU-seconds since the last save
    budgets = BudgetUsage(getattr(spawner, "gpu_budget_file", "") or None, _half_life(spawner))
    atexit.register(budgets.save)
    monitor = GPUMonitor(
        spawner, ledger, source, rule, store, spawner.gpu_monitor_interval, budgets
    )
    _MONITOR = monitor
    from gpuhub.hub.monitor.metrics import register

    register(monitor)
    atexit.register(monitor.eta.save)  # what was learned since the last save
    monitor.start()
    if rule is not None and isinstance(source, NoUtilization):
        log.warning(
            "gpuhub: gpu_idle_reclaim is set but no GPU utilization source is configured "
            "(GPUSpawner.prometheus_url); nothing will be reclaimed"
        )
    log.info(
        "gpuhub: GPU monitor every %ss with %s; idle reclaim %s",
        monitor.interval,
        type(source).__name__,
        rule if rule is not None else "off",
    )


_STARTING: asyncio.Future[None] | None = None


async def started(spawner: Any, timeout: float = 15.0) -> GPUMonitor | None:
    """The monitor, started from ``spawner`` if need be and waited for (a hub just started:
    what the budgets have used is read from its file first); None if it does not start."""
    ensure_started(spawner)
    starting = _STARTING
    if _MONITOR is None and starting is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(starting), timeout)
    return _MONITOR


def ensure_started(spawner: Any) -> None:
    """Start the hub's monitor from ``spawner`` once (no-op outside a running event loop)."""
    global _STARTING
    if _MONITOR is not None or _STARTING is not None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return

    def done(task: asyncio.Future[None]) -> None:
        global _STARTING
        if task.cancelled() or task.exception() is not None:
            if not task.cancelled():
                log.error("gpuhub: GPU monitor did not start: %s", task.exception())
            _STARTING = None  # try again with the next spawner

    _STARTING = asyncio.ensure_future(_start(spawner))
    _STARTING.add_done_callback(done)
