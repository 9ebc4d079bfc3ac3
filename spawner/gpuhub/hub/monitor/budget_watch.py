"""What happens to running GPU work once its user's GPU-hour budget is used up.

The monitor (:mod:`gpuhub.hub.monitor.gpu_monitor`) hands each tick the budget states of the
users who hold GPUs; :class:`BudgetWatch` decides, without I/O, whose work is stopped:

* ``at_limit = "refuse"``: a user over budget is warned (a notice), and ``grace`` seconds
  later every GPU server and job they run is stopped like an idle reclaim, with its reason;
* ``at_limit = "idle_only"``: their work may go on while nobody else wants its GPUs; once
  someone within budget waits for GPUs of the same type, and the grace has run, it is the
  first to be stopped, before anyone within budget.

The grace is measured on the monotonic clock from when the budget ran out, as the tick that
first saw the user over works it out from how far over they are and the GPUs they held, in
this hub process (after a hub restart it starts again: nothing is stopped for time the hub
did not see).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.budget_usage import BudgetState


@dataclass
class BudgetWatch:
    """The grace clocks of the users over budget (see the module docstring)."""

    grace: float
    at_limit: str
    over_since: dict[str, float] = field(default_factory=dict)  # user -> monotonic seconds

    def observe(
        self,
        states: Mapping[str, BudgetState],
        held: Iterable[Holding],
        waiting: Iterable[Holding],
        mono: float,
        ran_out: Mapping[str, float] | None = None,
    ) -> list[Holding]:
        """The holdings to stop now. ``states``: the budget of each user who holds or waits
        for GPUs (users without a budget are absent); ``ran_out``: when (monotonic) a budget
        over now ran out, where known: a grace starting now runs from then."""
        held = list(held)
        over = {user for user, state in states.items() if state.over}
        for user in [u for u in self.over_since if u not in over]:
            del self.over_since[user]  # a grant, a new period: within budget again
        holders = {h.user for h in held}
        for user in over & holders:
            self.over_since.setdefault(user, min(mono, (ran_out or {}).get(user, mono)))
        due = {u for u, since in self.over_since.items() if mono - since >= self.grace}
        if not due:
            return []
        if self.at_limit == "refuse":
            return [h for h in held if h.user in due]
        # idle_only: only what someone within budget waits for (a type's GPUs).
        wanted = {h.gpu_type for h in waiting if h.user not in over}
        return [h for h in held if h.user in due and h.gpu_type in wanted]

    def deadline(self, user: str, mono: float, now: float) -> float | None:
        """When ``user``'s grace runs out, as a wall-clock time (None: not over)."""
        since = self.over_since.get(user)
        if since is None:
            return None
        return now + max(0.0, self.grace - (mono - since))
