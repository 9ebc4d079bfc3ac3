"""GPU-hour budgets in the hub's GPU monitor: a part of :class:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor`.

Where each user's budget stands, the hours an admin grants, the 80 % and 100 % notices, and
stopping work past its grace (the grace clocks themselves: :mod:`gpuhub.hub.monitor.budget_watch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from gpuhub.core import words
from gpuhub.core.budgets import BudgetConfig, this_period
from gpuhub.core.budgets import hours_words as words_hours
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.budget_usage import (
    AccountKey,
    BudgetState,
    BudgetUsage,
    BudgetView,
    ExtraHours,
    budget_view,
    state_for,
)
from gpuhub.hub.monitor.budget_watch import BudgetWatch
from gpuhub.hub.monitor.track import HoldingKey, Track
from gpuhub.hub.monitor.usage import BUDGET, Notice, UsageStore
from gpuhub.hub.monitor.utilization import holding_key

log = logging.getLogger("gpuhub.hub.monitor.gpu_monitor")


class BudgetStops:
    """GPU-hour budgets: their state, grants, notices and the stops past the grace."""

    spawner: Any
    store: UsageStore
    budgets: BudgetUsage
    budget_watch: BudgetWatch | None
    budget_view: BudgetView
    tracks: dict[HoldingKey, Track]
    waiting: dict[HoldingKey, Holding]
    _rates: dict[str, tuple[float, float]]
    _stopping: set[HoldingKey]
    _tasks: set[asyncio.Future[Any]]

    if TYPE_CHECKING:  # the monitor's own, and its other parts'

        def _user(self, name: str) -> Any: ...
        def _changed(self, removed: HoldingKey | None = None) -> None: ...
        def settle(self) -> None: ...
        async def stop_server(
            self, user: Any, server: str, reason: str, *, by: str, notify: bool = True
        ) -> bool: ...
        async def cancel_job(self, user: str, name: str, reason: str, *, by: str) -> list[str]: ...

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
