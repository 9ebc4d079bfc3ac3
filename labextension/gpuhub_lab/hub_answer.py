"""One answer from the hub, shared by every caller of this server for a few seconds.

The sidebar's holdings and bookings (:mod:`gpuhub_lab.holdings`, :mod:`gpuhub_lab.bookings`)
are asked of the hub with this server's own ``JUPYTERHUB_API_TOKEN``; many polling tabs then
cost one hub request per period, and callers that arrive together wait for the one request
under way (a lock) rather than each sending their own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpuhub.core.hub_client import HubClient

NO_HUB = "This server was not started by JupyterHub: no hub to ask."


class SharedHubAnswer:
    """Asks the hub at most once per ``ttl``, whatever the number of callers; a subclass
    says what to ask (:meth:`_ask`) and what to answer without a hub (:meth:`_unavailable`)."""

    def __init__(self, hub: HubClient | None, ttl: float) -> None:
        self.hub = hub
        self.ttl = ttl
        self._answer: tuple[float, dict[str, Any]] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> dict[str, Any]:
        if self.hub is None:
            return self._unavailable(NO_HUB)
        async with self._lock:
            if self._answer is not None and time.monotonic() - self._answer[0] < self.ttl:
                return self._answer[1]
            answer = await self._ask(self.hub)
            self._answer = (time.monotonic(), answer)
            return answer

    def _unavailable(self, reason: str) -> dict[str, Any]:
        raise NotImplementedError

    async def _ask(self, hub: HubClient) -> dict[str, Any]:
        raise NotImplementedError
