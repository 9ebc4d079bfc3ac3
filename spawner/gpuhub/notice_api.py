"""What a user reads about their own stopped servers and cancelled jobs, and closing it.

The notices themselves (why a server was stopped, by whom) live in the usage store
(:class:`gpuhub.usage.Notice`) and are worded by :func:`gpuhub.hub_api.notice_text`. Here:

* ``POST /hub/api/gpuhub/notices/<user>/dismiss`` body ``{"key"}`` -> 204: the user closed the
  notice (its ``key`` from the notice); it stays closed, across hub restarts. Only the user
  themselves (the hub page's button, with its XSRF token; or their own token). 404 when
  there is no such notice.
* ``GET /hub/gpuhub/notices`` -> ``{"user", "notices": [...], "servers": {name: {"active",
  "ready"}}, "xsrf"}``: the logged-in user's open notices and whether each of their servers
  runs, for JupyterLab when its server is gone. A page (cookie) request, not an API
  one: JupyterLab, on the user's server's origin, has no hub XSRF token to send with a
  request; this hands it one (``xsrf``) for the dismiss above.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from tornado import web

from . import monitor as gpu_monitor


class DismissHandler(APIHandler):
    """``POST /hub/api/gpuhub/notices/<user>/dismiss``: close one notice for good."""

    def post(self, name: str) -> None:
        current = self.current_user
        if current is None or getattr(current, "kind", "user") != "user" or current.name != name:
            raise web.HTTPError(403, f"Only {name} may close their own notices.")
        body = self.get_json_body()
        key = body.get("key") if isinstance(body, dict) else None
        if not isinstance(key, str):
            raise web.HTTPError(400, 'Send a JSON object with the notice\'s "key".')
        monitor = gpu_monitor.for_handler(self)
        if monitor is None or not monitor.store.dismiss(name, key):
            raise web.HTTPError(404, f"{name} has no notice {key!r}.")
        self.set_status(204)
        self.finish()


class OwnNoticesHandler(BaseHandler):
    """``GET /hub/gpuhub/notices``: the logged-in user's open notices, as JSON."""

    @web.authenticated
    def get(self) -> None:
        from .hub_api import notice_text

        name = self.current_user.name
        monitor = gpu_monitor.for_handler(self)
        found = monitor.store.notices_for(name, shown=True) if monitor is not None else []
        notices: list[dict[str, Any]] = [{**notice_text(n), "reason": n.reason} for n in found]
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        user = self.find_user(name)
        servers = {
            server: {"active": bool(s.active), "ready": bool(s.ready)}
            for server, s in (user.spawners.items() if user is not None else ())
        }
        self.finish(
            json.dumps(
                {
                    "user": name,
                    "notices": notices,
                    "servers": servers,
                    "xsrf": self.xsrf_token.decode(),
                }
            )
        )


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/gpuhub/notices/([^/]+)/dismiss", DismissHandler),
    (r"/gpuhub/notices", OwnNoticesHandler),
]
