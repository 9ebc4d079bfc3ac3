"""Idle reclaim in the hub's GPU monitor: a part of :class:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor`.

Runs the idle clocks of :mod:`gpuhub.hub.monitor.reclaim` over the tracked holdings each tick,
answers "Keep my GPUs", and stops a server (or ends a job hold's processes) whose warning ran out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from gpuhub.core import words
from gpuhub.core.holdings import Holding
from gpuhub.hub.monitor.reclaim import Action, IdleClocks, ReclaimRule
from gpuhub.hub.monitor.track import HoldingKey, Track
from gpuhub.hub.monitor.usage import UsageStore

log = logging.getLogger("gpuhub.hub.monitor.gpu_monitor")


class IdleStops:
    """Idle reclaim: the clocks each tick, their warnings, postponing, and the stop."""

    rule: ReclaimRule | None
    clocks: IdleClocks | None
    store: UsageStore
    tracks: dict[HoldingKey, Track]
    _stopping: set[HoldingKey]
    _tasks: set[asyncio.Future[Any]]

    if TYPE_CHECKING:  # the monitor's own, and its other parts'

        def _users(self) -> dict[str, Any]: ...
        def _user(self, name: str) -> Any: ...
        async def stop_server(
            self, user: Any, server: str, reason: str, *, by: str, notify: bool = True
        ) -> bool: ...
        async def cancel_job(self, user: str, name: str, reason: str, *, by: str) -> list[str]: ...

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


def _gpus(count: int, gpu_type: str) -> str:
    name = f"{gpu_type} GPU" if gpu_type and "GPU" not in gpu_type else (gpu_type or "GPU")
    return f"{count} {name}{'s' if count != 1 else ''}"


def _held(holding: Holding) -> str:
    """ "2 A100 GPUs", "8 GB share of T4": what a holding holds, after "its"."""
    if holding.share is None:
        return _gpus(holding.gpus, holding.gpu_type)
    return holding.held_words
