"""The user's server asks the hub about GPU reclaim, for JupyterLab's warning and sidebar.

* ``GET  /gpuhub/api/reclaim`` -> ``{"enabled": bool, "server": idle clock or null}``
* ``POST /gpuhub/api/reclaim/keep`` -> the restarted clock, or 409 with the hub's sentence

The hub keeps the idle clocks (``gpuhub.hub.monitor.gpu_monitor``); this server calls it with its own
``JUPYTERHUB_API_TOKEN``, so the browser needs no hub credentials. Outside a hub, reclaim is
simply off.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

TIMEOUT = 10.0


def _hub() -> tuple[str, str, str, str] | None:
    """(API URL, token, user, server name) from the hub's environment, or None."""
    url = os.environ.get("JUPYTERHUB_API_URL")
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    user = os.environ.get("JUPYTERHUB_USER")
    if not (url and token and user):
        return None
    return url.rstrip("/"), token, user, os.environ.get("JUPYTERHUB_SERVER_NAME", "")


class ReclaimStateHandler(APIHandler):
    async def _hub_call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        hub = _hub()
        assert hub is not None
        url, token, user, _ = hub
        request = HTTPRequest(
            f"{url}/gpuhub/reclaim/{quote(user, safe='')}{path}",
            method=method,
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
            body=None if body is None else json.dumps(body),
            request_timeout=TIMEOUT,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as exc:
            raise web.HTTPError(502, f"The hub did not answer about GPU reclaim ({exc}).") from None
        try:
            data = json.loads(response.body or b"null")
        except ValueError:
            data = None
        return response.code, data

    @web.authenticated
    async def get(self) -> None:
        hub = _hub()
        if hub is None:
            self.finish({"enabled": False, "server": None})
            return
        code, data = await self._hub_call("GET", "")
        if code != 200 or not isinstance(data, dict):
            self.finish({"enabled": False, "server": None, "message": f"hub answered {code}"})
            return
        server = (data.get("servers") or {}).get(hub[3])
        self.finish({"enabled": bool(data.get("enabled")), "server": server})


class KeepHandler(ReclaimStateHandler):
    @web.authenticated
    async def post(self) -> None:
        hub = _hub()
        if hub is None:
            raise web.HTTPError(409, "This server does not run under a JupyterHub.")
        code, data = await self._hub_call("POST", "/keep", {"server": hub[3]})
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
