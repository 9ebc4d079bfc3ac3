"""``GET /gpuhub/api/holdings``: the GPUs this user holds on the hub, and their quota.

Response::

    {"available": bool, "reason": str|null, "quota": int|null, "held": int,
     "holdings": [{"kind": "server"|"job", "name", "label", "gpus", "share", "gpu_memory", "text", "gpu_type", "devices",
                   "since"}]}

The hub's GPU ledger knows every server and job of the user (``/hub/api/gpuhub/holdings``,
:mod:`gpuhub.hub.web.api`); this server asks it with its own ``JUPYTERHUB_API_TOKEN``
(:class:`gpuhub.core.hub_client.HubClient`). One answer is shared for a few seconds, so many
polling tabs cost one hub request per period.
Outside JupyterHub (a plain ``jupyter lab``) the answer says there is no hub to ask.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from gpuhub.core.hub_client import HubClient, HubUnreachable

SETTINGS_KEY = "gpuhub_holdings"
TTL = 5.0  # seconds an answer is shared


def _unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason, "quota": None, "held": 0, "holdings": []}


class HubHoldings:
    """Asks the hub's ledger, at most once per ``ttl``, whatever the number of callers."""

    def __init__(self, environ: dict[str, str] | None = None, ttl: float = TTL) -> None:
        self.hub = HubClient.from_env(environ)
        self.ttl = ttl
        self._answer: tuple[float, dict[str, Any]] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> dict[str, Any]:
        if self.hub is None:
            return _unavailable("This server was not started by JupyterHub: no hub to ask.")
        async with self._lock:
            if self._answer is not None and time.monotonic() - self._answer[0] < self.ttl:
                return self._answer[1]
            answer = await self._ask(self.hub)
            self._answer = (time.monotonic(), answer)
            return answer

    async def _ask(self, hub: HubClient) -> dict[str, Any]:
        try:
            response = await hub.call("GET", "holdings")
        except HubUnreachable:
            return _unavailable("The hub did not answer; your GPUs are shown again soon.")
        if response.code == 404:
            return _unavailable(
                "This hub does not publish GPU holdings (gpuhub's hub endpoints are off)."
            )
        data = response.json()
        if response.code != 200 or not isinstance(data, dict):
            return _unavailable("The hub cannot say what you hold right now.")
        return {
            "available": True,
            "reason": None,
            "quota": data.get("quota"),
            "held": data.get("held", 0),
            "holdings": data.get("holdings") or [],
        }


class HoldingsHandler(APIHandler):
    @web.authenticated
    async def get(self) -> None:
        source: HubHoldings = self.settings[SETTINGS_KEY]
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(await source.get()))


def setup_holdings(server_app: Any) -> None:
    web_app = server_app.web_app
    web_app.settings[SETTINGS_KEY] = HubHoldings()
    route = url_path_join(web_app.settings["base_url"], "gpuhub/api/holdings")
    web_app.add_handlers(".*$", [(route, HoldingsHandler)])
