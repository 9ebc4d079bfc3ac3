"""GPU-aware idle reclaim: the admin's rule and the idle clock of each GPU server.

``jupyterhub-idle-culler`` judges by HTTP activity, so a browser tab left open keeps a server
"active" while its GPUs sit at 0 %. gpuhub judges by the GPUs themselves::

    c.LocalGPUSpawner.gpu_idle_reclaim = {
        "after": 7200,               # seconds below the threshold before the warning
        "utilization_below": 0.05,   # a sample below this (0..1) on every GPU is idle
        "warn": 900,                 # seconds between the warning and the stop
        "exempt_groups": ["staff"],  # never reclaimed
        "max_postpones": 3,          # "Keep my GPUs" presses per server launch
    }

This module only decides; :mod:`gpuhub.hub.monitor.gpu_monitor` samples the GPUs, asks :class:`IdleClocks`
what to do and stops servers through JupyterHub. Decisions take ``now`` as an argument, so
they are tested without waiting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gpuhub.core.policy import PolicyConfigError

NAME = "gpu_idle_reclaim"
_KEYS = ("after", "utilization_below", "warn", "exempt_groups", "max_postpones")


@dataclass(frozen=True)
class ReclaimRule:
    """The admin's validated ``gpu_idle_reclaim``."""

    after: float
    utilization_below: float
    warn: float
    exempt_groups: frozenset[str] = frozenset()
    max_postpones: int = 0

    @classmethod
    def from_config(cls, value: Any, name: str = NAME) -> ReclaimRule | None:
        """Check the admin's dict once; None (or an empty dict) means reclaim is off."""
        if value is None or (isinstance(value, Mapping) and not value):
            return None
        if not isinstance(value, Mapping):
            raise PolicyConfigError(
                f"{name} must be a dict like {{'after': 7200, 'utilization_below': 0.05, "
                "'warn': 900}}"
            )
        extra = sorted(set(value) - set(_KEYS))
        if extra:
            raise PolicyConfigError(f"{name} has unknown keys {extra}; known keys are {_KEYS}")
        for key in ("after", "warn"):
            seconds: Any = value.get(key)
            if not _number(seconds) or seconds <= 0:
                raise PolicyConfigError(f"{name}.{key} must be a number of seconds above 0")
        below = value.get("utilization_below", 0.05)
        if not _number(below) or not 0 < below <= 1:
            raise PolicyConfigError(
                f"{name}.utilization_below must be a fraction above 0 and at most 1 (0.05 is 5 %)"
            )
        groups = value.get("exempt_groups") or []
        if isinstance(groups, str) or not all(isinstance(g, str) for g in groups):
            raise PolicyConfigError(f"{name}.exempt_groups must be a list of group names")
        postpones = value.get("max_postpones", 0)
        if isinstance(postpones, bool) or not isinstance(postpones, int) or postpones < 0:
            raise PolicyConfigError(f"{name}.max_postpones must be a whole number (0 or more)")
        return cls(
            after=float(value["after"]),
            utilization_below=float(below),
            warn=float(value["warn"]),
            exempt_groups=frozenset(groups),
            max_postpones=postpones,
        )

    def exempt(self, groups: Iterable[str]) -> bool:
        return not self.exempt_groups.isdisjoint(groups)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Action(Enum):
    NONE = "none"
    WARN = "warn"  # the server has just been warned
    LIFT = "lift"  # a warned server is busy again (or postponed): the warning is over
    STOP = "stop"  # the warning ran out: stop the server


@dataclass
class IdleClock:
    """The idle clock of one server launch."""

    idle_since: float | None = None  # start of the current run of idle samples
    warned_at: float | None = None
    deadline: float | None = None  # when a warned server is stopped
    postpones: int = 0
    reclaimed: bool = False

    def idle_for(self, now: float) -> float:
        return 0.0 if self.idle_since is None else max(0.0, now - self.idle_since)

    def as_json(self, rule: ReclaimRule, now: float) -> dict[str, Any]:
        """What the user's server and the fleet page show about this clock."""
        return {
            "idle_seconds": round(self.idle_for(now), 1),
            "warn_after_seconds": rule.after,
            "warned": self.deadline is not None,
            "seconds_left": None if self.deadline is None else max(0.0, self.deadline - now),
            "postpones": self.postpones,
            "postpones_left": max(0, rule.max_postpones - self.postpones),
            "utilization_below": rule.utilization_below,
        }


@dataclass
class IdleClocks:
    """Idle clocks of all GPU servers and job holds of a hub, keyed by a tuple naming one
    launch (:meth:`gpuhub.hub.monitor.track.Track.launch`: user, kind, name, start)."""

    rule: ReclaimRule
    clocks: dict[tuple[str, ...], IdleClock] = field(default_factory=dict)

    def observe(self, key: tuple[str, ...], idle: bool, now: float) -> Action:
        """Feed one sample (idle: every GPU below the threshold); say what to do now.

        Any busy sample resets the clock. After ``after`` seconds of idle samples the server
        is warned; ``warn`` seconds later, if nothing changed, it is stopped. A sample that
        cannot be read counts as busy: no server is stopped on guesswork.
        """
        clock = self.clocks.setdefault(key, IdleClock())
        if clock.reclaimed:
            return Action.NONE
        if not idle:
            warned = clock.deadline is not None
            clock.idle_since = clock.warned_at = clock.deadline = None
            return Action.LIFT if warned else Action.NONE
        if clock.idle_since is None:
            clock.idle_since = now
        if clock.deadline is None:
            if now - clock.idle_since >= self.rule.after:
                clock.warned_at, clock.deadline = now, now + self.rule.warn
                return Action.WARN
            return Action.NONE
        if now >= clock.deadline:
            clock.reclaimed = True
            return Action.STOP
        return Action.NONE

    def postpone(self, key: tuple[str, ...], now: float) -> str | None:
        """The user pressed "Keep my GPUs": restart the idle clock. None if allowed, else the
        sentence saying why not."""
        clock = self.clocks.get(key)
        if clock is None or clock.reclaimed:
            return "This server holds no GPUs that are being reclaimed."
        if clock.postpones >= self.rule.max_postpones:
            return (
                f"You have kept these GPUs {clock.postpones} times, the most this hub allows; "
                "use them or save your work before the server stops."
            )
        clock.postpones += 1
        clock.idle_since, clock.warned_at, clock.deadline = now, None, None
        return None

    def forget_except(self, live: Iterable[tuple[str, ...]]) -> None:
        """Drop the clocks of servers that no longer hold GPUs."""
        keep = set(live)
        for key in [k for k in self.clocks if k not in keep]:
            del self.clocks[key]
