"""A workstation spawn waiting in line for GPUs (:mod:`gpuhub.hub.ledger.line`): a part of
:class:`gpuhub.hub.local_gpu_spawner.LocalGPUSpawner`.

The hub's line and ledger, the wait itself, the spawn page's words and bar while it waits,
and the notice a user gets when the hub's shutdown ends the wait.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from gpuhub.core import words
from gpuhub.core.line_order import LineOrder
from gpuhub.core.quantity import human_memory
from gpuhub.hub.ledger.device_book import ALLOCATOR
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.ledger.line import GPULine, Ticket
from gpuhub.hub.monitor.eta import clock
from gpuhub.hub.monitor.gpu_monitor import current
from gpuhub.hub.monitor.usage import HUB_SHUTDOWN
from gpuhub.hub.refusals import log_name, refusal
from gpuhub.hub.spawner_parts import LocalPart

# The ledger of this hub's workstation: what the device book says users hold, plus the
# spawns waiting in line for GPUs.
LINE = GPULine(ALLOCATOR)
LEDGER = Ledger(LINE)


def likely_free(type_name: str) -> str:
    """ "likely free around 14:30 UTC": when one more request for a GPU of the type
    ``type_name`` likely starts, by the monitor's last estimate ("" before its first)."""
    monitor = current()
    found = monitor.eta.free_at.get(type_name) if monitor is not None else None
    if found is None:
        return ""
    return f"likely free around {clock(found.likely, time.time())}"


def line_usage(order: LineOrder) -> Callable[[str], float]:
    """A user's decayed GPU-seconds now, as a fair line orders by them: what the hub's
    monitor charged them (servers and job holds alike, a share as its fraction), decayed with
    ``usage_half_life`` and kept across restarts (:mod:`gpuhub.hub.ledger.budget_usage`)."""

    def usage_of(user: str) -> float:
        monitor = current()
        if monitor is None or not order.fair:
            return 0.0
        return monitor.budgets.decayed_seconds(user, time.time())

    return usage_of


class WorkstationLine(LocalPart):
    """A spawn's wait in the workstation's line: the wait, its words, its end by the hub."""

    _gpuhub_ticket: Ticket | None = None

    async def _wait_in_line(self) -> None:
        """Wait for GPUs if the spawn was accepted while too few were free."""
        ticket = self._gpuhub_ticket
        if ticket is None:
            return
        ticket.awaited = True
        try:
            await asyncio.wait_for(asyncio.shield(ticket.granted), self.gpu_queue_timeout)
        except TimeoutError:
            waited = words.duration(self.gpu_queue_timeout)
            message = (
                f"Waited {waited} in line for {words.gpus(ticket.gpus, ticket.type_name)} and "
                "none came free; try again later or ask for fewer GPUs."
            )
            self.log.warning("Spawn of %s: %s", log_name(self), message)
            raise refusal(message, 503) from None
        finally:
            LINE.leave(ticket)  # out of the line, whatever happened (served, stopped, timed out)
            self._gpuhub_ticket = None
            self.restore_start_timeout()

    def _gone_by(self) -> float:
        """When this spawn's server is known to be gone, for bookings not yet started
        (:attr:`gpuhub.hub.ledger.line.Ticket.until`): 0 for ``idle_only`` work (its user is
        over a GPU-hour budget whose ``at_limit`` is ``idle_only``: a booking's start stops
        it), else never known (``math.inf``): a server has no time limit."""
        config = self.gpu_budget_config()
        monitor = current()
        if config is None or config.at_limit != "idle_only" or monitor is None:
            return math.inf
        try:
            state = monitor.budget_state(self.user.name, self.user_groups())
        except Exception:  # no figures: lend it nothing booked
            return math.inf
        return 0.0 if state is not None and state.over else math.inf

    _gpuhub_joined_at = 1

    async def progress(self) -> Any:
        """Where a waiting spawn stands, in words, then which GPUs it got.

        While in line, the bar moves with the place (from where the spawn joined to the head
        of the line: 10 % to 40 %), and the message says how long gpuhub waits; the event's
        ``gpuhub_line`` (place, deadline) is for the spawn page's "Leave the line" button
        (``templates/hub/spawn_pending.html``)."""
        last = ""
        while (ticket := self._gpuhub_ticket) is not None and not ticket.granted.done():
            message = self._line_message(ticket)
            if message != last:
                last = message
                yield {
                    "progress": self._line_progress(ticket),
                    "message": message,
                    # For the spawn page's "Leave the line" and its clock (spawn_pending.html).
                    "gpuhub_line": {
                        "place": LINE.position(ticket),
                        "deadline": round(self._line_deadline(ticket)),
                    },
                }
            await asyncio.sleep(0.5)
        yield {"progress": 50, "message": self.starting_message()}

    def _line_progress(self, ticket: Ticket) -> int:
        """10 % on joining at the back, 40 % at the head of the line (50 %: GPUs given). In a
        fair line people who came later may pass: the bar then starts again from the farthest
        place back, never below 10 %."""
        place = LINE.position(ticket) or 1
        self._gpuhub_joined_at = joined = max(self._gpuhub_joined_at, place, 1)
        return round(10 + 30 * (joined - place + 1) / joined)

    def _line_deadline(self, ticket: Ticket) -> float:
        return ticket.since + self.gpu_queue_timeout

    def _line_message(self, ticket: Ticket) -> str:
        if ticket.holder.shared:
            return self._share_line_message(ticket)
        position = LINE.position(ticket)
        held = [h for h in LINE.book.holdings() if set(h.devices) & set(ticket.candidates)]
        busy = len({d for h in held for d in h.devices if d in ticket.candidates})
        users = len({h.user for h in held})
        free = len(ticket.candidates) - busy
        # Enough may be free for this one while an earlier, bigger request waits: say why.
        first = self._line_rule(ticket) if position > 1 and free >= ticket.gpus else ""
        return (
            f"Waiting for {words.gpus(ticket.gpus, ticket.type_name)}: you are "
            f"{words.ordinal(position)} in line; {busy} of {len(ticket.candidates)} are held "
            f"(servers and jobs of {users} user{'s' if users != 1 else ''}){first}"
            f"{LINE.booked_words(ticket)}. "
            f"{self._line_after(ticket)}"
        )

    def _line_after(self, ticket: Ticket) -> str:
        """How every wait's message ends, whole or a share: who passed it, its estimated
        start, and until when gpuhub waits."""
        deadline = words.moment_utc(self._line_deadline(ticket))
        return (
            f"{self._line_passed(ticket)}{self._line_estimate(ticket)}"
            f"gpuhub waits until {deadline}, "
            f"{words.duration(self.gpu_queue_timeout)} after you joined."
        )

    @staticmethod
    def _line_rule(ticket: Ticket) -> str:
        """Why those ahead go first although enough is free for this one: the line's rule."""
        if LINE.order.fair:
            return "; the line favours who used least"
        return "; the line is first come, first served"

    def _line_passed(self, ticket: Ticket) -> str:
        """ "The line favours who used least: ... goes first. ", or "" when nobody who came
        later goes first; names and figures of others only for an admin."""
        said = LINE.why_passed(ticket, names=bool(getattr(self.user, "admin", False)))
        return f"{said} " if said else ""

    @staticmethod
    def _line_estimate(ticket: Ticket) -> str:
        """ "Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC. ": the monitor's
        estimate of this wait (gpuhub.hub.monitor.eta), "" before its first."""
        monitor = current()
        if monitor is None:
            return ""
        said = monitor.eta.sentence((ticket.holder.user, "server", ticket.holder.name))
        return f"{said} " if said else ""

    def _share_line_message(self, ticket: Ticket) -> str:
        """Waiting for a share: the memory left on each GPU of the type, as the form says it."""
        position = LINE.position(ticket)
        holder = ticket.holder
        room = LINE.book.room(ticket.candidates, holder.device_memory)
        most = max(room.values(), default=0)
        first = self._line_rule(ticket) if position > 1 and most >= holder.gpu_memory else ""
        return (
            f"Waiting for {human_memory(holder.gpu_memory)} of one {ticket.type_name}: you are "
            f"{words.ordinal(position)} in line; the most free on one GPU is "
            f"{human_memory(most)} of {human_memory(holder.device_memory)}{first}. "
            f"{self._line_after(ticket)}"
        )

    async def poll(self) -> int | None:
        """A spawn waiting in line is alive (None), so the hub's shutdown stops it: JupyterHub
        calls ``stop()`` only for what ``poll()`` says runs."""
        if self._gpuhub_ticket is not None:
            return None
        status: int | None = await super().poll()
        return status

    def _tell_the_line_ended(self, ticket: Ticket) -> None:
        """Leave the user a notice when the hub itself ends a wait in line.

        JupyterHub cancels a spawn it interrupts for a user or an admin before it calls
        ``stop()``, and that cancellation already took the ticket back (``_wait_in_line``). A
        ticket still here that ``start()`` waits for means the hub stops a waiting spawn of
        its own accord: its shutdown (``cleanup_servers``). One that ``start()`` never
        reached is a spawn that failed before it (a ``pre_spawn_hook``, say): JupyterHub
        shows that failure itself, and the ticket just leaves the line. The line lives in
        this process and cannot outlive it, so the spawn ends, and the user's next visit to
        the hub says so (``hub_api.notice_text``).
        With ``cleanup_servers = False`` the hub cancels the wait without stopping it, and
        the spawn ends without a notice.
        """
        from gpuhub.hub.monitor.usage import Notice

        monitor = current()
        if monitor is None:
            return
        reason = (
            f"{words.ordinal(LINE.position(ticket) or 1)} in line for "
            f"{words.gpus(ticket.gpus, ticket.type_name)}"
        )
        notice = Notice(
            self.name, time.time(), reason, ticket.gpus, ticket.type_name, by=HUB_SHUTDOWN
        )
        monitor.store.notify(self.user.name, notice)
