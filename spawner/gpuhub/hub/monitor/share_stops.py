"""Shares of a GPU in the hub's GPU monitor: a part of :class:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor`.

Warns and stops a server whose share of a GPU is over its memory, tells the admin of memory no
holder explains, and ends the processes that hold it past the grace
(the watches themselves: :mod:`gpuhub.hub.monitor.overshare`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from gpuhub.core.holdings import Holding
from gpuhub.core.quantity import human_memory as words_memory
from gpuhub.hub.monitor.overshare import ShareWatch, StrayWatch
from gpuhub.hub.monitor.track import HoldingKey, Track
from gpuhub.hub.monitor.usage import SHARE_OVERUSE
from gpuhub.hub.monitor.utilization import Unexplained

log = logging.getLogger("gpuhub.hub.monitor.gpu_monitor")


class ShareStops:
    """Shares over their memory, and memory on shared GPUs that proves no holder."""

    shares: ShareWatch | None
    strays: StrayWatch | None
    strays_ended: tuple[str, ...]
    unexplained: tuple[Unexplained, ...]
    tracks: dict[HoldingKey, Track]
    _tasks: set[asyncio.Future[Any]]

    if TYPE_CHECKING:  # the monitor's own, and its other parts'

        def _users(self) -> dict[str, Any]: ...
        def _changed(self, removed: HoldingKey | None = None) -> None: ...
        async def stop_server(
            self, user: Any, server: str, reason: str, *, by: str, notify: bool = True
        ) -> bool: ...

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
