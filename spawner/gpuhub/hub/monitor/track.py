"""What the hub's GPU monitor keeps of one holding, and the keys it files holdings by.

Below the monitor (:mod:`gpuhub.hub.monitor.gpu_monitor`) and its parts, so that each part
names the type without importing the monitor that is built from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhub.core.holdings import Holding
from gpuhub.hub.monitor.utilization import GPUSample

HISTORY_SECONDS = 30 * 60

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
