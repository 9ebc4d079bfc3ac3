"""Stopping GPU work in the hub's GPU monitor: a part of :class:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor`.

What will be stopped and when (budget, idle or share), and the stop itself: a server as the
hub's REST API stops it, a job with the hub's own means (:mod:`gpuhub.hub.monitor.cancel`),
each with a notice for the user.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.budget_usage import BudgetState
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.monitor import booking_watch
from gpuhub.hub.monitor.budget_watch import BudgetWatch
from gpuhub.hub.monitor.overshare import ShareWatch
from gpuhub.hub.monitor.reclaim import IdleClocks
from gpuhub.hub.monitor.track import HoldingKey, Track
from gpuhub.hub.monitor.usage import BUDGET, SHARE_OVERUSE, Notice, UsageStore

log = logging.getLogger("gpuhub.hub.monitor.gpu_monitor")


class Stopping:
    """Who the hub's users are, what will be stopped and when, and stopping it."""

    spawner: Any
    ledger: Ledger
    store: UsageStore
    budget_watch: BudgetWatch | None
    clocks: IdleClocks | None
    shares: ShareWatch | None
    tracks: dict[HoldingKey, Track]
    waiting: dict[HoldingKey, Holding]
    _stopping: set[HoldingKey]

    if TYPE_CHECKING:  # the monitor's own, and its other parts'

        def _changed(self, removed: HoldingKey | None = None) -> None: ...
        def settle(self) -> None: ...
        async def _refresh_now(self) -> None: ...
        def budget_state(
            self, user: str, groups: list[str] | None = None, now: float | None = None
        ) -> BudgetState | None: ...

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

    def stops(self, user: str, now: float | None = None) -> dict[HoldingKey, tuple[float, str]]:
        """``user``'s holdings that will be stopped unless something changes: (when, as epoch
        seconds, and why: ``"budget"`` for a budget's grace, ``"idle"`` for idle reclaim's
        warning, ``"share"`` for a share over its memory, ``"booking"`` for a booking's
        start), the earliest for each. The
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
        for key, when in booking_watch.due(user).items():
            if key in self.tracks:
                add(key, when, booking_watch.BOOKING)
        return found

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
