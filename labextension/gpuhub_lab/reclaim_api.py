"""The user's server asks the hub about GPU reclaim, for JupyterLab's warning and sidebar.

* ``GET  /gpuhub/api/reclaim`` -> ``{"enabled": bool, "server": idle clock or null}``
* ``POST /gpuhub/api/reclaim/keep`` -> the restarted clock, or 409 with the hub's sentence

The hub keeps the idle clocks (``gpuhub.hub.monitor.gpu_monitor``); this server calls it with its
own ``JUPYTERHUB_API_TOKEN`` (:class:`gpuhub.core.hub_client.HubClient`), so the browser needs no
hub credentials. Outside a hub, reclaim is simply off. Jupyter's authorizer decides who may
read the clock and who may keep the GPUs (resource ``gpuhub``: read, write), as for every
other gpuhub handler of this server.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from gpuhub.core.hub_client import HubClient, HubUnreachable

TIMEOUT = 10.0


class ReclaimStateHandler(APIHandler):
    auth_resource = "gpuhub"

    async def _hub_call(
        self, hub: HubClient, method: str, *rest: str, body: Any = None
    ) -> tuple[int, Any]:
        try:
            answer = await hub.call(method, "reclaim", *rest, body=body, timeout=TIMEOUT)
        except HubUnreachable as exc:
            raise web.HTTPError(502, f"The hub did not answer about GPU reclaim ({exc}).") from None
        return answer.code, answer.json()

    @web.authenticated
    @authorized
    async def get(self) -> None:
        hub = HubClient.from_env()
        if hub is None:
            self.finish({"enabled": False, "server": None})
            return
        code, data = await self._hub_call(hub, "GET")
        if code != 200 or not isinstance(data, dict):
            self.finish({"enabled": False, "server": None, "message": f"hub answered {code}"})
            return
        server = (data.get("servers") or {}).get(hub.server)
        self.finish({"enabled": bool(data.get("enabled")), "server": server})


class KeepHandler(ReclaimStateHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        hub = HubClient.from_env()
        if hub is None:
            raise web.HTTPError(409, "This server does not run under a JupyterHub.")
        code, data = await self._hub_call(hub, "POST", "keep", body={"server": hub.server})
        if code != 200:
            message = (data or {}).get("message") if isinstance(data, dict) else None
            self.set_status(code if 400 <= code < 500 else 502)
            self.finish({"message": message or f"The hub refused to keep the GPUs ({code})."})
            return
        self.finish(data)


def setup_reclaim(server_app: Any) -> None:
    web_app = server_app.web_app
    base = url_path_join(web_app.settings["base_url"], "gpuhub/api/reclaim")
    web_app.add_handlers(
        ".*$", [(base, ReclaimStateHandler), (url_path_join(base, "keep"), KeepHandler)]
    )
