"""Wait in line for GPUs on one workstation: first come, first served per GPU type.

Every spawn that asks for GPUs comes here first (:meth:`GPULine.take_now`); the line
hands its head to the device book (:mod:`gpuhub.hub.ledger.device_book`) when enough is free, and
nothing reaches the book around it: a request that finds GPUs free while others of its type
wait joins the line behind them (docs/architecture.md, "The line comes before the book").
When it cannot be served at once, ``LocalGPUSpawner`` accepts the spawn and its ``start()``
waits here (``LocalGPUSpawner.gpu_queue_timeout``). Each GPU type has one line; only the
head of a line is served, so a big request is never overtaken by small ones. The line is
served whenever GPUs may have come back (a server stopped, a job hold ended, checked every
second), so a GPU is still never handed out twice.

The line is also the local ledger's source of holdings (:mod:`gpuhub.hub.ledger.ledger`): a spawn
waiting in line counts against its user's quota, so waiting cannot be used to get around it,
but it holds nothing (``Holding.waiting``): the fleet page, the metrics and GPU-hours show it
as waiting.
gpuhub's own wait is always a *line*; a *queue* is Kueue's (:mod:`gpuhub.k8s.kueue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from fractions import Fraction

from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, HolderKey, NotEnoughGPUs

SERVE_EVERY = 1.0  # seconds between looks at the book while anyone waits


@dataclass(eq=False)
class Ticket:
    """One spawn waiting for ``gpus`` GPUs of type ``type_key`` among ``candidates``."""

    key: HolderKey  # the server, as the device book keys it
    holder: Holder
    type_key: str
    type_name: str
    gpus: int
    candidates: list[int]
    since: float = field(default_factory=time.time)
    granted: asyncio.Future[list[int]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    awaited: bool = False  # the spawn's start() waits for it (not only accepted yet)


class GPULine:
    """The lines of one workstation (one per GPU type), over its device book."""

    def __init__(self, book: GPUAllocator) -> None:
        self.book = book
        self.lines: dict[str, list[Ticket]] = {}
        self._server: asyncio.Task[None] | None = None

    # -- the ledger's source ------------------------------------------------------------------
    def holdings(self, user: str | None = None) -> list[Holding]:
        """What users hold, plus what their spawns waiting in line will take (``waiting``:
        they count against the quota, but nothing is given to them yet)."""
        held = self.book.holdings(user)
        for line in self.lines.values():
            for ticket in line:
                if user is None or ticket.holder.user == user:
                    name, holder = ticket.holder.name, ticket.holder
                    held.append(
                        Holding(
                            holder.user,
                            "server",
                            name,
                            ticket.gpus,
                            ticket.type_name,
                            since=ticket.since,
                            waiting="line",  # counts against the quota; never held
                            # A share waiting counts as its fraction, as once it is served.
                            share=(
                                Fraction(holder.gpu_memory, holder.device_memory)
                                if holder.shared
                                else None
                            ),
                            memory=holder.gpu_memory if holder.shared else 0,
                        )
                    )
        return held

    # -- the lines ------------------------------------------------------------------------------
    def take_now(
        self, key: HolderKey, gpus: int, type_key: str, candidates: list[int], holder: Holder
    ) -> list[int] | None:
        """The devices, if this request is served at once: nobody of its type waits and
        enough are free. None: it must wait in line (:meth:`join`)."""
        if self.lines.get(type_key):
            return None  # first come, first served: behind those already waiting
        try:
            return self.book.allocate(key, gpus, candidates, holder)
        except NotEnoughGPUs:
            return None

    def join(self, ticket: Ticket) -> None:
        self.lines.setdefault(ticket.type_key, []).append(ticket)
        self.serve()
        if not ticket.granted.done() and (self._server is None or self._server.done()):
            self._server = asyncio.ensure_future(self._serve_while_waiting())

    def leave(self, ticket: Ticket) -> None:
        """A waiting spawn was stopped, failed or timed out: out of the line."""
        line = self.lines.get(ticket.type_key, [])
        if ticket in line:
            line.remove(ticket)
        if not ticket.granted.done():
            ticket.granted.cancel()
        self.serve()

    def position(self, ticket: Ticket) -> int:
        """1 for the head of the line; 0 once out of it."""
        line = self.lines.get(ticket.type_key, [])
        return line.index(ticket) + 1 if ticket in line else 0

    def waiting(self, type_key: str) -> int:
        return len(self.lines.get(type_key, []))

    def serve(self) -> None:
        """Give GPUs to the heads of the lines, in order, while there are enough."""
        for line in self.lines.values():
            while line:
                head = line[0]
                try:
                    devices = self.book.allocate(head.key, head.gpus, head.candidates, head.holder)
                except NotEnoughGPUs:
                    break
                line.pop(0)
                head.granted.set_result(devices)

    async def _serve_while_waiting(self) -> None:
        while any(self.lines.values()):
            await asyncio.sleep(SERVE_EVERY)
            with contextlib.suppress(Exception):  # a bad look at the book: try again
                self.serve()
