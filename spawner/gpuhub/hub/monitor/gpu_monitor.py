"""The hub's GPU monitor: one loop per hub process that samples every held GPU.

Each tick (``gpu_monitor_interval`` seconds) it reads what is held from the GPU ledger and
how busy those GPUs are from the utilization source, then

* adds GPU-seconds per user to the usage store (persisted beside the hub database), and
  charges the same seconds to the user's GPU-hour budget (:mod:`gpuhub.hub.ledger.budget_usage`);
* tells users at 80 % and 100 % of their budget, and stops GPU work past its grace
  (:mod:`gpuhub.hub.monitor.budget_watch`);
* keeps 30 minutes of utilization per holding, for the fleet page's sparklines;
* runs the idle clocks of :mod:`gpuhub.hub.monitor.reclaim` and stops servers whose warning ran out,
  through the hub's own proxy and ``User.stop`` (as the hub's REST API does), so the
  database, the proxy and the ledger stay right, and records why for the user's next visit.

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
from dataclasses import dataclass
from datetime import UTC
from fractions import Fraction
from typing import Any

from gpuhub.core import words
from gpuhub.core.budgets import BudgetConfig, this_period
from gpuhub.core.budgets import hours_words as words_hours
from gpuhub.core.holdings import Holding, gpu_type_names, named
from gpuhub.core.quantity import human_memory as words_memory
from gpuhub.hub.ledger import booking_book
from gpuhub.hub.ledger.budget_usage import (
    AccountKey,
    BudgetState,
    BudgetUsage,
    BudgetView,
    ExtraHours,
    budget_view,
    state_for,
)
from gpuhub.hub.ledger.gpu_capacity import DeviceFree
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor import booking_watch
from gpuhub.hub.monitor.budget_watch import BudgetWatch
from gpuhub.hub.monitor.eta_feed import EtaFeed, durations_path
from gpuhub.hub.monitor.overshare import ShareWatch, StrayWatch
from gpuhub.hub.monitor.reclaim import Action, IdleClocks, ReclaimRule
from gpuhub.hub.monitor.usage import BUDGET, SHARE_OVERUSE, Notice, UsageStore
from gpuhub.hub.monitor.utilization import (
    GPUSample,
    NoUtilization,
    Unexplained,
    UtilizationSource,
    holding_key,
)

log = logging.getLogger("gpuhub.hub.monitor.gpu_monitor")

HISTORY_SECONDS = 30 * 60
SAMPLE_TIMEOUT = 20.0

HoldingKey = tuple[str, str, str]  # (user, kind, name)
LaunchKey = tuple[str, str, str, str]  # (user, kind, name, since): one idle clock


@dataclass
class Track:
    """What the monitor knows of one holding: recent samples and its idle clock's key."""

    holding: Holding
    # (time, mean 0..1). Tuples, replaced (never changed) each tick, like ``samples``: the
    # fleet page reads them in a thread without copying (gpuhub.hub.web.fleet.snapshot).
    history: tuple[tuple[float, float], ...] = ()
    samples: tuple[GPUSample, ...] = ()
    idle_since: float | None = None  # below the threshold (or 0 % without a rule) since

    def launch(self) -> LaunchKey:
        """The idle clock's key: a new launch of a server (or a new job hold) starts a new
        clock; a server and the job hold its earlier launch left never share one."""
        h = self.holding
        return (h.user, h.kind, h.name, f"{h.since or 0:.3f}")


class GPUMonitor:
    """Samples, accounts and reclaims (see the module docstring)."""

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

    # -- GPU-hour budgets -----------------------------------------------------------------
    @property
    def budget_config(self) -> BudgetConfig | None:
        """The admin's ``gpu_hours`` (None: none, or not valid: said at hub start)."""
        try:
            config: BudgetConfig | None = self.spawner.gpu_budget_config()
        except Exception:
            return None
        return config

    def _members(self, user: str, group: str) -> list[str]:
        """The members of ``group``, as ``user`` (one of them) sees it in the hub's database."""
        found = self._user(user)
        for g in getattr(found, "groups", ()):
            if g.name == group:
                return sorted({user, *(u.name for u in getattr(g, "users", ()))})
        return [user]

    def _groups(self, name: str) -> list[str]:
        user = self._user(name)
        return [g.name for g in user.groups] if user is not None else []

    def budget_state(
        self, user: str, groups: list[str] | None = None, now: float | None = None
    ) -> BudgetState | None:
        """Where ``user``'s budget stands (None: no budget applies)."""
        now = time.time() if now is None else now
        groups = self._groups(user) if groups is None else groups
        return state_for(user, groups, self.budget_config, self.budgets, now)

    def grant_hours(
        self, user: str, groups: list[str], hours: float, reason: str, by: str, group: str = ""
    ) -> BudgetState:
        """Extra GPU-hours for ``user``'s budget this period (its shared pool if it draws on
        one: then ``group``, if given, must name it), with a reason the user reads in a
        notice. Raises ``ValueError`` with the sentence when no budget applies."""
        now = time.time()
        state = self.budget_state(user, groups, now)
        if state is None:
            raise ValueError(f"No GPU-hour budget applies to {user}, so there is none to add to.")
        pool = state.budget.name if state.budget.shared else ""
        if group and group != pool:
            whose = f"the {pool} group's shared pool" if pool else "their own budget"
            raise ValueError(
                f"{user}'s GPU-hours come from {whose}, not from a shared budget of group "
                f'"{group}"; leave group out to add to it.'
            )
        self.budgets.grant(state.account, ExtraHours(hours, reason, by, now))
        state = self.budget_state(user, groups, now)
        assert state is not None
        self._lift_budget_notices(user, state)
        extra = words_hours(hours)
        to = f"{state.budget.label} ({pool} group)" if pool else "your budget"
        self.store.notify(
            user,
            Notice(
                f"grant:{state.account[2]}:{now:.6f}",
                now,
                f"{by} granted {extra} extra GPU-hours to {to} {this_period(state.budget.per)}: "
                f"{reason.rstrip('.')}. Now {state.text}.",
                0,
                "",
                by=BUDGET,
                kind="budget",
            ),
        )
        log.info("gpuhub: %s granted %s %s extra GPU-hours: %s", by, user, extra, reason)
        self.refresh_budgets(now)
        self._changed()
        return state

    def _lift_budget_notices(self, user: str, state: BudgetState) -> None:
        """After a grant: the 80 % and 100 % notices the budget is no longer at go (from
        every member of a shared pool); the grant starts them over (``BudgetUsage.grant``),
        so they are given again should it get there again."""
        level = 100 if state.over else 80 if state.state == "warning" else 0
        scope, name, period = state.account
        told = self._members(user, name) if state.budget.shared else [user]
        for stale in (80, 100):
            if stale > level:
                for member in told:
                    self.store.clear_notice(member, f"{scope}:{name}:{period}:{stale}", "budget")
        if not state.over and self.budget_watch is not None:
            for member in told:  # no grace runs: nothing stops (stops_at) from now
                self.budget_watch.over_since.pop(member, None)

    def refresh_budgets(self, now: float | None = None) -> None:
        """Build :attr:`budget_view` (on the event loop: it reads users' groups)."""
        config = self.budget_config
        if config is None:
            self.budget_view = BudgetView()
            return
        now = time.time() if now is None else now
        holders = {t.holding.user for t in self.tracks.values()}
        holders |= {h.user for h in self.waiting.values()}
        names = self.budgets.users_seen() | holders
        view = budget_view({n: self._groups(n) for n in names}, config, self.budgets, now)
        # Users whose budget this period is untouched and who hold nothing are left out.
        users = tuple(s for s in view.users if s.own_seconds or s.extra_hours or s.user in holders)
        self.budget_view = BudgetView(users, view.groups, view.since)

    async def _watch_budgets(self, now: float, mono: float) -> None:
        """Notices at 80 % and 100 % (once per period), and stops past the grace."""
        assert self.budget_watch is not None
        watch = self.budget_watch
        config = self.budget_config
        if config is None:
            return
        watch.grace, watch.at_limit = config.grace, config.at_limit
        held = [t.holding for t in self.tracks.values()]
        users = {h.user for h in held} | {h.user for h in self.waiting.values()}
        states = {}
        for user in users:
            state = self.budget_state(user, now=now)
            if state is None:
                continue
            states[user] = state
            level = 100 if state.over else 80 if state.state == "warning" else 0
            if level and self.budgets.tell(state.account, level):
                self._budget_notice(user, state, level, now)
        for holding in watch.observe(
            states, held, self.waiting.values(), mono, self._ran_out(states, mono)
        ):
            key = holding_key(holding)
            if key in self._stopping:
                continue
            state = states[holding.user]
            reason = (
                f"you used all {words_hours(state.allowed_hours)} GPU-hours of "
                f"{state.budget.label} {this_period(state.budget.per)} ({state.text}) and the grace "
                f"of {words.duration(config.grace) if config.grace else 'no time'} ran out"
            )
            if config.at_limit == "idle_only":
                reason += ", and someone within their budget waits for these GPUs"
            task = asyncio.ensure_future(self._stop_over_budget(holding, reason, state))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _ran_out(self, states: dict[str, BudgetState], mono: float) -> dict[str, float]:
        """When (monotonic) each budget over now ran out, from how far over it is and the
        GPUs its users held since the last accounting: the grace runs from that moment, not
        from the tick that saw it, so work stops within a tick of its budget and grace."""
        rates: dict[AccountKey, float] = {}
        last: dict[AccountKey, float] = {}  # what the last accounting charged each budget
        for user, state in states.items():
            rate, seconds = self._rates.get(user, (0.0, 0.0))
            rates[state.account] = rates.get(state.account, 0.0) + rate
            last[state.account] = last.get(state.account, 0.0) + seconds
        out = {}
        for user, state in states.items():
            rate = rates[state.account]
            over = state.used_seconds - state.allowed_seconds
            # Only a budget that the last accounting took over ran out since: one over
            # before (work started over budget, as idle_only allows) starts its grace now.
            if state.over and rate > 0 and 0 <= over <= last[state.account]:
                out[user] = mono - over / rate
        return out

    def stops(self, user: str, now: float | None = None) -> dict[HoldingKey, tuple[float, str]]:
        """``user``'s holdings that will be stopped unless something changes: (when, as epoch
        seconds, and why: ``"budget"`` for a budget's grace, ``"idle"`` for idle reclaim's
        warning, ``"share"`` for a share over its memory), the earliest for each. The
        holdings answer's ``stops_at``, which the lab counts down and saves notebooks by."""
        now = time.time() if now is None else now
        found: dict[HoldingKey, tuple[float, str]] = {}

        def add(key: HoldingKey, when: float, why: str) -> None:
            if key not in found or when < found[key][0]:
                found[key] = (when, why)

        watch = self.budget_watch
        deadline = watch.deadline(user, time.monotonic(), now) if watch is not None else None
        if watch is not None and deadline is not None:
            mine = [(k, t.holding) for k, t in self.tracks.items() if k[0] == user]
            if watch.at_limit == "idle_only":  # stopped only for someone within budget
                wanted = set()
                for holding in self.waiting.values():
                    state = self.budget_state(holding.user, now=now)
                    if state is None or not state.over:
                        wanted.add(holding.gpu_type)
                mine = [(k, h) for k, h in mine if h.gpu_type in wanted]
            for key, _ in mine:
                add(key, deadline, BUDGET)
        if self.clocks is not None:
            for key, track in self.tracks.items():
                clock = self.clocks.clocks.get(track.launch()) if key[0] == user else None
                if clock is not None and clock.deadline is not None and not clock.reclaimed:
                    add(key, clock.deadline, "idle")
        if self.shares is not None:
            for key in self.shares.over:
                if key[0] == user and key in self.tracks:
                    add(key, self.shares.deadline(key), SHARE_OVERUSE)
        return found

    def next_stop(self, mono: float) -> float | None:
        """Seconds until the next grace runs out (None: none runs out after ``mono``; one
        that has run out is the ticks' business)."""
        watch = self.budget_watch
        if watch is None:
            return None
        left = [since + watch.grace - mono for since in watch.over_since.values()]
        return min((s for s in left if s > 0), default=None)

    async def stop_due(self) -> None:
        """Between ticks, when a grace runs out: charge up to now and stop what is due, as
        a tick would (without sampling utilization, which may take a while)."""
        if self.budget_watch is None:
            return
        self.settle()
        await self._watch_budgets(time.time(), time.monotonic())

    def _budget_notice(self, user: str, state: BudgetState, level: int, now: float) -> None:
        """The 80 % or 100 % notice, one per budget and period: to the user, or to every
        member of a shared pool."""
        grace = self.budget_watch.grace if self.budget_watch is not None else 0.0
        scope, name, period = state.account
        told = self._members(user, name) if state.budget.shared else [user]
        for member in told:
            self.store.notify(
                member,
                Notice(
                    f"{scope}:{name}:{period}:{level}",
                    now,
                    state.notice(level, grace),
                    0,
                    "",
                    by=BUDGET,
                    kind="budget",
                ),
            )
        log.info("gpuhub: %s reached %s%% of their GPU-hour budget: %s", user, level, state.text)

    async def _stop_over_budget(self, holding: Holding, reason: str, state: BudgetState) -> None:
        """Stop (or cancel) ``holding``; its notice then says what the 100 % notice warned
        would happen, which goes, so that the user reads it once."""
        from gpuhub.hub.monitor.cancel import CancelRefused

        if holding.kind == "job":
            try:
                await self.cancel_job(holding.user, holding.name, reason, by=BUDGET)
            except CancelRefused as exc:
                log.warning(
                    "gpuhub: could not end %s's %s over budget: %s",
                    holding.user,
                    holding.label,
                    exc,
                )
                return
        else:
            user = self._user(holding.user)
            if user is None or not await self.stop_server(user, holding.name, reason, by=BUDGET):
                return
        scope, name, period = state.account
        self.store.clear_notice(holding.user, f"{scope}:{name}:{period}:100", "budget")

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

    # -- reclaim --------------------------------------------------------------------------
    def _users(self) -> dict[str, Any]:
        """The hub's loaded users by name (every user with a running server is loaded)."""
        users = self.spawner.user.settings.get("users")
        if users is None:
            return {}
        return {u.name: u for u in users.values()}

    def _user(self, name: str) -> Any:
        """The hub's user ``name`` (loaded from the database if need be), or None."""
        users = self.spawner.user.settings.get("users")
        try:
            return users[name] if users is not None else None
        except KeyError:
            return None

    async def _reclaim(self, now: float) -> None:
        assert self.clocks is not None and self.rule is not None
        users = self._users()
        launches = []
        for track in self.tracks.values():
            holding = track.holding
            if holding.kind == "server":
                user = users.get(holding.user)
                if user is None:
                    continue
                spawner = user.spawners.get(holding.name)
                if spawner is None or not spawner.ready:
                    continue  # starting or stopping: not this loop's business now
            elif holding.processes:
                # A job hold: processes a stopped server left running on its GPUs. They
                # are reclaimed like a server; a cluster job (no processes here) ends by
                # itself or is cancelled by an admin.
                user = users.get(holding.user) or self._user(holding.user)
                if (holding.user, "job", holding.name) in self._stopping:
                    continue
            else:
                continue
            if user is not None and self.rule.exempt(g.name for g in user.groups):
                continue
            launch = track.launch()
            launches.append(launch)
            idle = bool(track.samples) and all(
                s.utilization < self.rule.utilization_below for s in track.samples
            )
            action = self.clocks.observe(launch, idle, now)
            if action is Action.WARN:
                log.info(
                    "gpuhub: %s's %s idle on %s GPUs since %.0fs; %s in %.0fs unless kept",
                    holding.user,
                    holding.label,
                    holding.gpus,
                    self.rule.after,
                    "stops" if holding.kind == "server" else "its processes end",
                    self.rule.warn,
                )
            elif action is Action.LIFT:
                log.info(
                    "gpuhub: %s's %s is busy again; warning lifted", holding.user, holding.label
                )
            elif action is Action.STOP:
                task = asyncio.ensure_future(self._stop_idle(user, holding))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self.clocks.forget_except(launches)

    def _watch_shares(self, now: float) -> None:
        """Warn a server whose share of a GPU is over its memory; stop it once it has been
        over for the grace period (gpuhub.hub.monitor.overshare)."""
        assert self.shares is not None
        warned, stop = self.shares.observe(
            ((key, t.holding, t.samples) for key, t in self.tracks.items()), now
        )
        for key in warned:
            holding = self.tracks[key].holding
            log.warning(
                "gpuhub: %s's %s is over its share: %s",
                holding.user,
                holding.label,
                self.shares.warning(holding, key),
            )
        users = self._users() if stop else {}
        for key in stop:
            holding = self.tracks[key].holding
            user = users.get(holding.user)
            if user is None:
                continue
            reason = self.shares.reason(holding, key)
            task = asyncio.ensure_future(
                self.stop_server(user, holding.name, reason, by=SHARE_OVERUSE)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _tell_unexplained(self, now: tuple[Unexplained, ...]) -> None:
        """Log the admin a line when a shared GPU's memory stops being explained (once,
        not every tick)."""
        before = {u.gpu for u in self.unexplained if u.used}
        for entry in now:
            if entry.used and entry.gpu not in before:
                log.warning(
                    "gpuhub: %s of GPU %s is used by processes %s that prove no holder of it "
                    "(no launch grant, another OS account's, or another GPU's); charged to "
                    "nobody",
                    words_memory(entry.used),
                    entry.gpu,
                    ", ".join(map(str, entry.pids)),
                )

    async def _end_strays(self, unexplained: tuple[Unexplained, ...], now: float) -> None:
        """End each process whose memory on a shared GPU has proved no holder for the grace
        (:class:`gpuhub.hub.monitor.overshare.StrayWatch`), and tell the fleet admins: the
        log, and the fleet page (:attr:`strays_ended`). The ending waits in a task of its
        own, not in the tick."""
        assert self.strays is not None
        for pid in self.strays.observe(unexplained, now):
            account = self.strays.seen[pid].account
            said = self.strays.ended(pid, now)
            task = asyncio.ensure_future(self._end_stray(pid, account, said))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _end_stray(self, pid: int, account: str, said: str) -> None:
        if not await asyncio.to_thread(_end_process, pid, account):
            return
        log.warning("gpuhub: %s", said)
        self.strays_ended = (*self.strays_ended, said)[-20:]
        self._changed()

    def share_warnings(self, user: str) -> list[tuple[Holding, float, str]]:
        """``user``'s servers over their share of a GPU now: (holding, when it is stopped,
        the warning)."""
        if self.shares is None:
            return []
        return [
            (
                self.tracks[key].holding,
                self.shares.deadline(key),
                self.shares.warning(self.tracks[key].holding, key),
            )
            for key in self.shares.over
            if key[0] == user and key in self.tracks
        ]

    def clock_of(self, user: str, name: str, kind: str = "server") -> tuple[Track, Any] | None:
        """The track and idle clock of ``user``'s server (or job hold) ``name`` (None: no
        GPU holding, or none on the clock)."""
        track = self.tracks.get((user, kind, name))
        if track is None or self.clocks is None:
            return None
        clock = self.clocks.clocks.get(track.launch())
        return (track, clock) if clock is not None else None

    def postpone(self, user: str, name: str, now: float, kind: str = "server") -> str | None:
        """ "Keep my GPUs": None when postponed, else the sentence saying why not."""
        if self.clocks is None:
            return "GPU reclaim is off on this hub."
        track = self.tracks.get((user, kind, name))
        if track is None:
            return f"This {'server' if kind == 'server' else 'job'} holds no GPUs that are being reclaimed."
        return self.clocks.postpone(track.launch(), now)

    def warnings_for(self, user: str, now: float | None = None) -> list[tuple[Holding, float]]:
        """``user``'s job holds that are warned now, with when their processes end: the hub
        pages say so (a server's warning shows in its JupyterLab)."""
        if self.clocks is None:
            return []
        now = time.time() if now is None else now
        out = []
        for (name, kind, _), track in self.tracks.items():
            if name != user or kind != "job":
                continue
            clock = self.clocks.clocks.get(track.launch())
            if clock is not None and clock.deadline is not None and not clock.reclaimed:
                out.append((track.holding, clock.deadline))
        return out

    async def _stop_idle(self, user: Any, holding: Holding) -> None:
        assert self.rule is not None
        rule = self.rule
        reason = (
            f"{'its' if holding.kind == 'server' else 'their'} "
            f"{_held(holding)} stayed below "
            f"{rule.utilization_below:.0%} utilization for {words.duration(rule.after)} and "
            f"nobody kept them during the {words.duration(rule.warn)} warning"
        )
        if holding.kind == "job":
            from gpuhub.hub.monitor.cancel import CancelRefused

            try:
                await self.cancel_job(holding.user, holding.name, reason, by="idle")
            except CancelRefused as exc:
                log.warning(
                    "gpuhub: could not end %s's idle %s: %s", holding.user, holding.label, exc
                )
                return
        elif user is None or not await self.stop_server(user, holding.name, reason, by="idle"):
            return
        self.store.count_reclaim(holding.gpu_type or "GPU")

    async def stop_server(
        self, user: Any, server: str, reason: str, *, by: str, notify: bool = True
    ) -> bool:
        """Stop ``user``'s server as the hub's REST API does, and leave the user a notice
        (``notify``: unless they stopped it themselves, and know)."""
        key = (user.name, "server", server)
        if key in self._stopping:
            return False
        spawner = user.spawners.get(server)
        if spawner is None or not spawner.active or spawner.pending:
            return False
        held = self.tracks.get((user.name, "server", server))
        gpus, gpu_type = (held.holding.gpus, held.holding.gpu_type) if held else (0, "")
        self._stopping.add(key)
        try:
            log.warning("gpuhub: stopping %s's server %r: %s", user.name, server, reason)
            proxy = user.settings.get("proxy")
            if proxy is not None:
                await proxy.delete_user(user, server)
            await user.stop(server)
        except Exception:
            log.exception("gpuhub: could not stop %s's server %r", user.name, server)
            return False
        finally:
            self._stopping.discard(key)
        self.settle()  # its GPUs were held until now
        # The notice first: the user's lab asks why as soon as the hub says it stopped.
        if notify:
            self.store.notify(
                user.name, Notice(server, time.time(), reason, gpus, gpu_type or "GPU", by)
            )
        self.tracks.pop((user.name, "server", server), None)  # gone now, not at the next tick
        self.waiting = {k: h for k, h in self.waiting.items() if k != key}
        await self._refresh_now()
        self._changed(removed=(user.name, "server", server))
        return True

    async def cancel_job(self, user: str, name: str, reason: str, *, by: str) -> list[str]:
        """Cancel ``user``'s GPU job ``name`` (a fleet page row) with the hub's own means
        (:mod:`gpuhub.hub.monitor.cancel`), and leave the user a notice with ``reason``. Returns the job
        ids cancelled; raises :class:`gpuhub.hub.monitor.cancel.CancelRefused` with a sentence."""
        from gpuhub.hub.monitor.cancel import CancelRefused, cancel_kube, cancel_local

        key = (user, "job", name)
        track = self.tracks.get(key)
        # A job queued in Kueue holds no GPU yet, but its place: it may be cancelled too.
        holding = track.holding if track is not None else self.waiting.get(key)
        if holding is None:
            raise CancelRefused(404, f"{user} has no job {name!r} holding or waiting for GPUs.")
        if key in self._stopping:
            raise CancelRefused(409, "That job is being cancelled already.")
        self._stopping.add(key)
        try:
            log.warning("gpuhub: %s cancels %s's %s: %s", by, user, holding.label, reason)
            core_api = getattr(self.spawner, "api", None)
            if core_api is not None:
                namespace = getattr(self.spawner, "namespace", None)
                job_ids = await cancel_kube(core_api, holding, reason, by, namespace)
            else:
                book = getattr(self.spawner, "_book", None)
                if book is None:
                    raise CancelRefused(409, "This hub's spawner cannot cancel jobs.")
                job_ids = await cancel_local(book, holding)
        finally:
            self._stopping.discard(key)
        self.settle()  # its GPUs were held until now
        # A queued job held its GPUs by a grant; the jobs service stops renewing it once
        # the job is gone, but it would count until it expires.
        self.ledger.release_job_grant(user, name)
        self.tracks.pop(key, None)  # gone now, not at the next tick
        self.waiting = {k: h for k, h in self.waiting.items() if k != key}
        await self._refresh_now()
        self._changed(removed=(user, "job", name))
        self.store.notify(
            user,
            Notice(
                name,
                time.time(),
                reason,
                holding.gpus,
                holding.gpu_type or "GPU",
                by,
                kind="job",
                jobs=tuple(job_ids),
            ),
        )
        return job_ids


def _gpus(count: int, gpu_type: str) -> str:
    name = f"{gpu_type} GPU" if gpu_type and "GPU" not in gpu_type else (gpu_type or "GPU")
    return f"{count} {name}{'s' if count != 1 else ''}"


def _held(holding: Holding) -> str:
    """ "2 A100 GPUs", "8 GB share of T4": what a holding holds, after "its"."""
    if holding.share is None:
        return _gpus(holding.gpus, holding.gpu_type)
    return holding.held_words


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


def _end_process(pid: int, account: str) -> bool:
    """End process ``pid`` if it still runs as ``account`` (a pid may have been reused):
    SIGTERM, then SIGKILL after 5 seconds. Blocking (runs in a thread). Never the hub."""
    import os

    import psutil

    from gpuhub.hub.monitor.utilization import account_name

    if pid in (os.getpid(), os.getppid()):
        return False
    try:
        proc = psutil.Process(pid)
        if account and account_name(proc.uids().real) != account:
            return False
        proc.terminate()
        try:
            proc.wait(5)
        except psutil.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, OSError) as exc:
        log.warning("gpuhub: could not end process %s (OS account %s): %s", pid, account, exc)
        return False
    return True
