"""Idle reclaim's clocks of a user's GPU servers and job holds, and "Keep my GPUs".

For tokens with access to the user's servers (:data:`gpuhub.hub.web.access.SERVER_ACCESS_SCOPES`)
and GPU fleet admins (``custom:gpuhub:fleet``); never for a token that only identifies the
user. The clocks are the monitor's (:mod:`gpuhub.hub.monitor.gpu_monitor`):

* ``GET /hub/api/gpuhub/reclaim/<user>`` -> ``{"enabled", "servers": {name: idle clock},
  "jobs": {server name: idle clock of its job hold}}``;
* ``POST /hub/api/gpuhub/reclaim/<user>/keep`` body ``{"server": name, "kind": "server" |
  "job"}`` -> the restarted clock, or ``409 {"message"}`` once ``max_postpones`` is used up.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tornado import web

from gpuhub.core.options import as_given
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.web.access import GpuhubAPIHandler


class ReclaimHandler(GpuhubAPIHandler):
    """``GET /hub/api/gpuhub/reclaim/<user>``: idle clocks of the user's GPU servers and job
    holds."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET", "OPTIONS")

    def get(self, name: str) -> None:
        self.require_holder_access(name)
        monitor = gpu_monitor.for_handler(self)
        now = time.time()
        clocks: dict[str, dict[str, Any]] = {"server": {}, "job": {}}
        if monitor is not None and monitor.rule is not None:
            for user, kind, held in monitor.tracks:
                if user != name or kind not in clocks:
                    continue
                found = monitor.clock_of(name, held, kind)
                if found is not None:
                    clocks[kind][held] = found[1].as_json(monitor.rule, now)
        enabled = monitor is not None and monitor.rule is not None
        self.finish(
            json.dumps({"enabled": enabled, "servers": clocks["server"], "jobs": clocks["job"]})
        )


class KeepHandler(GpuhubAPIHandler):
    """``POST /hub/api/gpuhub/reclaim/<user>/keep``, "Keep my GPUs": restart the idle clock
    of one of the user's servers or job holds."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST", "OPTIONS")

    def post(self, name: str) -> None:
        self.require_holder_access(name)
        body = self.get_json_body() or {}
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Send a JSON object with the server's name.")
        server, kind = body.get("server", ""), body.get("kind", "server")
        if not isinstance(server, str):
            raise web.HTTPError(400, f"server must be the server's name, not {as_given(server)}.")
        if kind not in ("server", "job"):
            raise web.HTTPError(400, f'kind must be "server" or "job", not {as_given(kind)}.')
        monitor = gpu_monitor.for_handler(self)
        if monitor is None or monitor.rule is None:
            raise web.HTTPError(409, "GPU reclaim is off on this hub.")
        now = time.time()
        refused = monitor.postpone(name, server, now, kind)
        if refused is not None:
            self._fail(409, refused)
            return
        self.log.info("gpuhub: %s kept the GPUs of %s %r", name, kind, server)
        found = monitor.clock_of(name, server, kind)
        assert found is not None
        self.finish(json.dumps(found[1].as_json(monitor.rule, now)))


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/gpuhub/reclaim/([^/]+)", ReclaimHandler),
    (r"/api/gpuhub/reclaim/([^/]+)/keep", KeepHandler),
]
