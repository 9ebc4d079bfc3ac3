"""GPU-seconds spent of each budget's period, extra hours granted, and usage decayed over time.

The hub's GPU monitor charges what it measured each tick (:meth:`BudgetUsage.charge`): the
GPU-seconds it adds to ``gpuhub_gpu_seconds_total`` (a share as its fraction; time waiting in a
line or a queue never counts), so budgets, the fleet page and ``/hub/metrics`` count the same
seconds. Kept in ``gpu_budget_file`` beside the hub's database, written atomically
(:mod:`gpuhub.hub.ledger.statefile`); a damaged file is kept aside and what can be read of it
is kept, with one log line.

Never charged twice, never forgiven: only intervals the monitor measured with a monotonic clock
within one hub run are charged, each once, into the period the wall clock says it is; what is
persisted is a running sum, never re-derived. A hub that was down charges nothing for the time
it was down (work that ran meanwhile is not seen), and a clock set back or forward moves no
seconds between periods that were already charged.

It holds:

* ``accounts``: ``(scope, name, period key) -> GPU-seconds``: scope ``"user"`` (every user's
  own seconds, also inside a shared pool) or ``"group"`` (a shared pool); the period key is
  :meth:`gpuhub.core.budgets.Budget.period_key` ("week@1795302000"). Periods older than
  ``KEEP_SECONDS`` are dropped;
* ``grants``: extra hours for one budget's current period, with a reason the user reads;
* ``decayed``: per user, GPU-seconds decayed with the half-life ``usage_half_life`` (the fair
  line orders by it: :meth:`decayed_seconds`);
* ``told``: the notices already given (80 %, 100 %) per budget and period, so each is given
  once per period.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpuhub.core.budgets import (
    HOUR,
    Budget,
    BudgetConfig,
    budget_text,
    hours_words,
    over_sentence,
    state_of,
    this_period,
)
from gpuhub.core.words import duration, iso
from gpuhub.hub.ledger.statefile import JsonStore, kind_of, rows

KEEP_SECONDS = 70 * 24 * 3600.0  # two months and more: a month's period and the one before
AccountKey = tuple[str, str, str]  # (scope, name, period key)


@dataclass(frozen=True)
class ExtraHours:
    """Extra GPU-hours an admin granted for one budget's period, and why."""

    hours: float
    reason: str
    by: str
    at: float


def account_of(user: str, budget: Budget, now: float) -> AccountKey:
    """The account a budget draws on for ``user`` at ``now``: a shared group's pool, else the
    user's own."""
    key = budget.period_key(now)
    if budget.shared:
        return ("group", budget.name, key)
    return ("user", user, key)


class BudgetUsage(JsonStore):
    """Budget accounts and decayed usage, persisted to ``path`` (None: memory only)."""

    WHAT = "GPU budget usage"

    def __init__(
        self, path: str | os.PathLike[str] | None = None, half_life: float = 7 * 24 * 3600.0
    ) -> None:
        super().__init__(path)
        self.half_life = half_life
        self.accounts: dict[AccountKey, float] = {}
        self.grants: dict[AccountKey, list[ExtraHours]] = {}
        self.decayed: dict[str, tuple[float, float]] = {}  # user -> (seconds, as of)
        self.told: dict[AccountKey, int] = {}  # the highest notice given: 80 or 100 (%)
        # When budgets were switched on (the first look with gpu_hours set): GPU-hours used
        # before are in the usage store's figures but charged to no budget.
        self.since: float | None = None
        if self.path is not None:
            self._load()

    # -- recording --------------------------------------------------------------------------
    def charge(self, user: str, seconds: float, now: float, budget: Budget | None) -> None:
        """Add GPU-seconds the monitor measured for ``user`` up to ``now``: to their own
        account of the period of ``budget`` (and its pool if shared), and to the decayed
        usage. Charged once: the caller hands each measured interval once."""
        if seconds <= 0 or not math.isfinite(seconds):
            return
        value, as_of = self.decayed.get(user, (0.0, now))
        self.decayed[user] = (self._decay(value, as_of, now) + seconds, max(now, as_of))
        if budget is not None:
            key = budget.period_key(now)
            own = ("user", user, key)
            self.accounts[own] = self.accounts.get(own, 0.0) + seconds
            if budget.shared:
                pool = ("group", budget.name, key)
                self.accounts[pool] = self.accounts.get(pool, 0.0) + seconds
        self._dirty = True

    def grant(self, account: AccountKey, extra: ExtraHours) -> None:
        """Extra hours for one account's period (saved at once)."""
        self.grants.setdefault(account, []).append(extra)
        self.told.pop(account, None)  # notices start over for what is now left
        self._dirty = True
        self.save()

    def tell(self, account: AccountKey, level: int) -> bool:
        """True the first time ``level`` (80 or 100) is reached for ``account``; saved."""
        if self.told.get(account, 0) >= level:
            return False
        self.told[account] = level
        self._dirty = True
        self.save()
        return True

    def switched_on(self, now: float) -> float:
        """When budgets were switched on: ``now`` the first time it is asked (saved)."""
        if self.since is None:
            self.since = now
            self._dirty = True
        return self.since

    # -- reading ----------------------------------------------------------------------------
    def used(self, account: AccountKey) -> float:
        """GPU-seconds charged to ``account``."""
        return self.accounts.get(account, 0.0)

    def extra_hours(self, account: AccountKey) -> float:
        return sum(g.hours for g in self.grants.get(account, ()))

    def grants_of(self, account: AccountKey) -> list[ExtraHours]:
        return list(self.grants.get(account, ()))

    def users_seen(self) -> set[str]:
        """Every user with an account kept (used some budget in a period kept)."""
        return {name for scope, name, _ in self.accounts if scope == "user"} | {
            name for scope, name, _ in self.grants if scope == "user"
        }

    def decayed_seconds(self, user: str, now: float) -> float:
        """``user``'s GPU-seconds, each weighed by ``0.5 ** (age / half_life)``: the fair
        line serves whoever has least first. A clock set back does not make it grow."""
        value, as_of = self.decayed.get(user, (0.0, now))
        return self._decay(value, as_of, now)

    def _decay(self, value: float, as_of: float, now: float) -> float:
        if self.half_life <= 0 or now <= as_of:
            return value
        return value * 0.5 ** ((now - as_of) / self.half_life)

    # -- persistence ------------------------------------------------------------------------
    def _kept(self) -> str:
        return f"{len(self.accounts)} budget accounts, {len(self.decayed)} users' decayed usage"

    def _restore(self, data: Any) -> list[str]:
        """Take every entry of ``data`` that is what it should be; return what was not."""
        if not isinstance(data, dict):
            return [f"expected an object, found {kind_of(data)}"]
        problems: list[str] = []
        bad = 0
        for row in rows(data, "accounts", 4, problems):
            scope, name, period, seconds = row
            if _key(scope, name, period) and _seconds(seconds):
                self.accounts[(scope, name, period)] = float(seconds)
            else:
                bad += 1
        for row in rows(data, "grants", 7, problems):
            scope, name, period, hours, reason, by, at = row
            ok = _key(scope, name, period) and isinstance(hours, int | float)
            if ok and isinstance(reason, str) and isinstance(by, str) and _seconds(at):
                extra = ExtraHours(float(hours), reason, by, float(at))
                self.grants.setdefault((scope, name, period), []).append(extra)
            else:
                bad += 1
        for row in rows(data, "decayed", 3, problems):
            user, seconds, as_of = row
            if isinstance(user, str) and _seconds(seconds) and _seconds(as_of):
                self.decayed[user] = (float(seconds), float(as_of))
            else:
                bad += 1
        for row in rows(data, "told", 4, problems):
            scope, name, period, level = row
            if _key(scope, name, period) and level in (80, 100):
                self.told[(scope, name, period)] = int(level)
            else:
                bad += 1
        since = data.get("since")
        if since is not None:
            if _seconds(since):
                self.since = float(since)
            else:
                problems.append("since is not a time")
        if bad:
            problems.append(f"{bad} entries are not what they should be")
        return problems

    def _prune(self, now: float) -> None:
        for table in (self.accounts, self.grants, self.told):
            for key in [k for k in table if _period_start(k[2]) < now - KEEP_SECONDS]:
                del table[key]

    def _data(self) -> dict[str, Any]:
        return {
            "version": 1,
            "accounts": [[*k, s] for k, s in sorted(self.accounts.items())],
            "grants": [
                [*k, g.hours, g.reason, g.by, g.at]
                for k, extras in sorted(self.grants.items())
                for g in extras
            ],
            "decayed": [[u, s, t] for u, (s, t) in sorted(self.decayed.items())],
            "told": [[*k, level] for k, level in sorted(self.told.items())],
            "since": self.since,
        }


def extra_json(extra: ExtraHours) -> dict[str, Any]:
    return {**asdict(extra), "at": iso(extra.at)}


@dataclass(frozen=True)
class BudgetState:
    """Where one user's budget stands at ``now``: what the form, holdings, fleet page,
    notices, metrics and the admission check all read."""

    user: str
    budget: Budget
    account: AccountKey
    used_seconds: float
    extra_hours: float
    grants: tuple[ExtraHours, ...]
    at_limit: str
    now: float
    own_seconds: float = 0.0  # the user's own part of a shared pool's (all of it otherwise)

    @property
    def allowed_seconds(self) -> float:
        return (self.budget.hours + self.extra_hours) * HOUR

    @property
    def allowed_hours(self) -> float:
        return self.budget.hours + self.extra_hours

    @property
    def used_hours(self) -> float:
        return self.used_seconds / HOUR

    @property
    def left_hours(self) -> float:
        return max(0.0, self.allowed_hours - self.used_hours)

    @property
    def state(self) -> str:
        return state_of(self.used_seconds, self.allowed_seconds)

    @property
    def over(self) -> bool:
        return self.state == "over"

    @property
    def resets(self) -> str:
        return self.budget.resets_words(self.now)

    @property
    def text(self) -> str:
        """ "14.2 of 20 GPU-hours used this week; resets Monday 00:00 Europe/Berlin"."""
        return budget_text(self.used_hours, self.allowed_hours, self.budget.per, self.resets)

    def refusal(self) -> str:
        """The 403 sentence: the budget, what is used, when it resets."""
        return over_sentence(
            self.budget, self.used_hours, self.allowed_hours, self.now, self.at_limit
        )

    def as_json(self) -> dict[str, Any]:
        """The ``budgets`` entry of the holdings answer (docs/architecture.md)."""
        scope, name, _ = self.account
        return {
            "scope": scope,
            "name": name,
            "shared": self.budget.shared,
            "hours": self.budget.hours,
            "extra_hours": round(self.extra_hours, 6),
            "used_hours": round(self.used_hours, 6),
            "left_hours": round(self.left_hours, 6),
            "period": self.budget.per,
            "resets_at": self.budget.resets_at(self.now),
            "resets": self.resets,
            "state": self.state,
            "at_limit": self.at_limit,
            "grants": [extra_json(g) for g in self.grants],
            "text": self.text,
        }

    def notice(self, level: int, grace: float) -> str:
        """The 80 % or 100 % notice's sentence."""
        if level < 100:
            at_limit = (
                "this hub starts no new GPU servers or jobs for you"
                if self.at_limit == "refuse"
                else "new GPU servers and jobs start only on GPUs nobody else waits for"
            )
            label = self.budget.label[0].upper() + self.budget.label[1:]
            return f"{label} is 80 % used: {self.text}. At the limit {at_limit}."
        after = (
            "running GPU servers and jobs are stopped"
            if self.at_limit == "refuse"
            else "running GPU servers and jobs are stopped when someone within budget waits "
            "for their GPUs"
        )
        return (
            f"You have used all {hours_words(self.allowed_hours)} GPU-hours of "
            f"{self.budget.label} {this_period(self.budget.per)} ({self.text}); {after} after a "
            f"grace of {_grace_words(grace)}."
        )


def _grace_words(seconds: float) -> str:
    return duration(seconds) if seconds else "no time"


def state_for(
    user: str, groups: list[str], config: BudgetConfig | None, usage: BudgetUsage, now: float
) -> BudgetState | None:
    """``user``'s budget state now (None: no budget applies to them)."""
    if config is None:
        return None
    budget = config.budget_for(groups)
    if budget is None:
        return None
    account = account_of(user, budget, now)
    return BudgetState(
        user,
        budget,
        account,
        usage.used(account),
        usage.extra_hours(account),
        tuple(usage.grants_of(account)),
        config.at_limit,
        now,
        usage.used(("user", user, account[2])),
    )


def pool_state(budget: Budget, config: BudgetConfig, usage: BudgetUsage, now: float) -> BudgetState:
    """A shared group budget's pool, whoever draws on it."""
    account = ("group", budget.name, budget.period_key(now))
    used = usage.used(account)
    extras = tuple(usage.grants_of(account))
    return BudgetState(
        "", budget, account, used, sum(g.hours for g in extras), extras, config.at_limit, now, used
    )


@dataclass(frozen=True)
class BudgetView:
    """Every budget as of one moment, for the fleet page and ``/hub/metrics`` alike (so they
    agree): each user with a budget who used some of it this period, was granted extra hours
    or holds or waits for GPUs, and every shared group's pool."""

    users: tuple[BudgetState, ...] = ()
    groups: tuple[BudgetState, ...] = ()
    since: float | None = None  # BudgetUsage.since: what was used before is charged to none


def budget_view(
    groups_of: Mapping[str, list[str]],
    config: BudgetConfig | None,
    usage: BudgetUsage,
    now: float,
) -> BudgetView:
    """The :class:`BudgetView` of the users in ``groups_of`` (name -> groups)."""
    if config is None:
        return BudgetView()
    users = []
    for user in sorted(groups_of):
        state = state_for(user, groups_of[user], config, usage, now)
        if state is not None:
            users.append(state)
    pools = tuple(pool_state(b, config, usage, now) for b in config.budgets() if b.shared)
    return BudgetView(tuple(users), pools, usage.switched_on(now))


def _key(scope: Any, name: Any, period: Any) -> bool:
    return (
        scope in ("user", "group")
        and isinstance(name, str)
        and isinstance(period, str)
        and "@" in period
    )


def _period_start(period: str) -> float:
    try:
        return float(period.rpartition("@")[2])
    except ValueError:
        return 0.0


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
