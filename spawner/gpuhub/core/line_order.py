"""The order of a wait line: first come, first served, or fair (who used least goes first).

``line_order`` and ``usage_half_life`` (both spawners, :class:`gpuhub.core.policy_traits.HubPolicyTraits`)
are checked here once, each mistake one sentence (:meth:`LineOrder.from_config`). The same
order rules gpuhub's own line on a workstation (:mod:`gpuhub.hub.ledger.line`) and, where the
cluster offers it, Kueue's queue (admission fair sharing, :mod:`gpuhub.k8s.kueue`).

A fair line orders requests by their user's *decayed* past GPU usage: GPU-seconds, each
weighed by ``0.5 ** (age / half_life)``, so an hour used a half-life ago counts as half an
hour used now (the hub keeps it: :meth:`gpuhub.hub.ledger.budget_usage.BudgetUsage.decayed_seconds`).
Waiting counts as well, so that nobody waits for ever (:func:`fair_key`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuhub.core.budgets import hours_words
from gpuhub.core.policy import PolicyConfigError

FIFO = "fifo"
FAIR = "fair"
ORDERS = (FIFO, FAIR)
DEFAULT_HALF_LIFE = 7 * 24 * 3600.0  # seconds: a week, as Slurm's PriorityDecayHalfLife


@dataclass(frozen=True)
class LineOrder:
    """How a line is ordered: ``order`` (:data:`FIFO` or :data:`FAIR`) and the half-life, in
    seconds, with which past usage decays (read only by a fair line)."""

    order: str = FIFO
    half_life: float = DEFAULT_HALF_LIFE

    @property
    def fair(self) -> bool:
        return self.order == FAIR

    @classmethod
    def from_config(cls, order: Any, half_life: Any, owner: str = "LocalGPUSpawner") -> LineOrder:
        """The admin's two settings, checked: one sentence per mistake, naming the setting."""
        if order not in ORDERS:
            raise PolicyConfigError(
                f'{owner}.line_order must be "fifo" (first come, first served) or "fair" (who '
                f"used least goes first), not {order!r}."
            )
        if (
            isinstance(half_life, bool)
            or not isinstance(half_life, int | float)
            or not math.isfinite(half_life)
            or half_life <= 0
        ):
            raise PolicyConfigError(
                f"{owner}.usage_half_life must be a number of seconds above 0 (604800 for a "
                f"week), not {half_life!r}."
            )
        return cls(order, float(half_life))

    def words(self) -> str:
        """ "half-life 7 days": how past usage decays, as the waiting page says it."""
        return f"half-life {span(self.half_life)}"


def fair_key(usage: float, since: float) -> float:
    """Where a request stands in a fair line: lower goes first (ties: who came first).

    ``usage``: its user's decayed GPU-seconds now; ``since``: when it joined (epoch seconds).
    The key is their sum, so each second spent waiting counts as one GPU-second less used:
    a request that came later goes first only if its user used less by more than the earlier
    one has waited. Nobody starves: once a request has waited as many seconds as its user
    has decayed GPU-seconds, no request that comes after it goes first (their usage is never
    below 0). Among those already waiting, only changes in usage reorder the line: a user
    who keeps using GPUs elsewhere while they wait falls back, the others move ahead.
    """
    return usage + since


def hours(gpu_seconds: float) -> str:
    """ "31.5", "2.15", "0.0083", "0": decayed GPU-seconds as GPU-hours, written as every
    screen writes GPU-hours (:func:`gpuhub.core.budgets.hours_words`)."""
    return hours_words(gpu_seconds / 3600)


def span(seconds: float) -> str:
    """ "7 days", "12 hours", "90 minutes", "45 seconds": a half-life in its roundest unit."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"
