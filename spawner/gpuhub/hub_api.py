"""gpuhub's endpoints inside the hub process, where the GPU ledger lives.

The ledger (:mod:`gpuhub.ledger`) is one per hub process: spawns are checked in the hub. So
that cluster jobs are checked by the same ledger under the same per-user lock, the jobs
service asks the hub for a *grant* before it creates anything:

* ``POST /hub/api/gpuhub/grants`` body ``{"user", "kind", "name", "gpus", "gpu_type"}``
  -> ``201 {"user", "name", "gpus", "quota", "held"}``, or ``403 {"message"}`` over quota.
  The grant counts until the workload's pods appear in the hub's pod watch (then they count)
  or ``GRANT_SECONDS`` pass.
* ``DELETE /hub/api/gpuhub/grants/<user>/<name>`` -> 204: the submit failed, forget it.
* ``GET /hub/api/gpuhub/holdings/<user>`` -> ``{"user", "quota", "held", "holdings": [{"kind",
  "name", "label", "gpus", "gpu_type", "devices", "since"}]}``: what the user holds, for the user
  themselves (any token of theirs, e.g. their server's) and for the jobs service.

Callers need the custom scope ``custom:gpuhub:grants`` (the chart gives it to the jobs
service's role). Enable in ``jupyterhub_config.py`` (the Helm chart does)::

    from gpuhub.hub_api import configure_hub
    configure_hub(c)

``JupyterHub.extra_handlers`` is marked deprecated in favour of services, but a service
cannot share the hub's lock and caches, which is the point here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from .ledger import Grant, Ledger, QuotaExceeded, gpus_held

GRANTS_SCOPE = "custom:gpuhub:grants"
# How long a job's grant counts while its pods are not in the watch yet: a pipeline step's
# pod appears after Kubeflow's driver pods, which can take minutes on a busy cluster.
GRANT_SECONDS = 600.0
_KINDS = {"job", "pytorchjob", "tfjob", "pipeline"}


def configure_hub(c: Any) -> None:
    """Register gpuhub's hub endpoints and scope on a JupyterHub config object ``c``."""
    hub = c.JupyterHub
    # Unset traits are lazy placeholders in a config object: read only what was set.
    scopes = dict(hub.custom_scopes) if "custom_scopes" in hub else {}
    scopes[GRANTS_SCOPE] = {"description": "Ask the hub's GPU ledger for GPUs for a user's job."}
    hub.custom_scopes = scopes
    handlers = list(hub.extra_handlers) if "extra_handlers" in hub else []
    handlers += [(path, handler) for path, handler in HANDLERS if (path, handler) not in handlers]
    hub.extra_handlers = handlers


class GrantsHandler(APIHandler):
    """Quota grants for the jobs service (see the module docstring)."""

    def _require_scope(self) -> None:
        if not self.current_user:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        if GRANTS_SCOPE not in self.expanded_scopes:
            raise web.HTTPError(403, f"This token lacks the {GRANTS_SCOPE} scope.")

    def _fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish(json.dumps({"status": status, "message": message}))

    async def _ledger_for(self, name: str) -> tuple[Any, Ledger, int | None]:
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, f"No user {name!r} on this hub (gpuhub ledger).")
        spawner = user.get_spawner("", replace_failed=True)
        ledger_of = getattr(spawner, "gpu_ledger", None)
        if ledger_of is None:
            raise web.HTTPError(
                409, "This hub's spawner keeps no GPU ledger (not a gpuhub spawner)."
            )
        ledger = await ledger_of()
        return user, ledger, spawner.gpu_quota_limit()

    async def post(self) -> None:
        self._require_scope()
        body = self.get_json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Send a JSON object: user, kind, name, gpus, gpu_type.")
        name, kind, job, gpus = (
            body.get("user"),
            body.get("kind"),
            body.get("name"),
            body.get("gpus"),
        )
        if not isinstance(name, str) or not isinstance(job, str) or not job:
            raise web.HTTPError(400, "user and name must be strings.")
        if kind not in _KINDS:
            raise web.HTTPError(400, f"kind must be one of {', '.join(sorted(_KINDS))}.")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 100_000:
            raise web.HTTPError(400, "gpus must be a whole number of GPUs.")
        gpu_type = str(body.get("gpu_type") or "")[:200]
        user, ledger, limit = await self._ledger_for(name)
        async with ledger.lock(user.name):
            try:
                held = ledger.check(user.name, limit, gpus, what="job")
            except QuotaExceeded as exc:
                self.log.warning(
                    "gpuhub: refused %s GPUs for %s's job %s: %s", gpus, name, job, exc
                )
                self._fail(exc.status, exc.message)
                return
            if gpus > 0:
                ledger.grant(
                    Grant(user.name, "job", job, gpus, gpu_type, time.time() + GRANT_SECONDS)
                )
        self.set_status(201)
        self.finish(
            json.dumps(
                {
                    "user": user.name,
                    "name": job,
                    "gpus": gpus,
                    "quota": limit,
                    "held": gpus_held(held),
                }
            )
        )

    async def delete(self, name: str, job: str) -> None:
        self._require_scope()
        user, ledger, _ = await self._ledger_for(name)
        ledger.release_grant(user.name, job)
        self.set_status(204)
        self.finish()


class HoldingsHandler(GrantsHandler):
    """What one user holds against their quota (their own view, or the jobs service's)."""

    async def get(self, name: str) -> None:
        caller = self.current_user
        if caller is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        own = getattr(caller, "kind", "") == "user" and caller.name == name
        if not own and GRANTS_SCOPE not in self.expanded_scopes:
            raise web.HTTPError(404, f"No user {name!r} on this hub (gpuhub ledger).")
        user, ledger, limit = await self._ledger_for(name)
        try:
            held = ledger.holdings(user.name)
        except RuntimeError:  # the cluster has not answered yet
            raise web.HTTPError(503, "GPU holdings cannot be read right now.") from None
        self.finish(
            json.dumps(
                {
                    "user": user.name,
                    "quota": limit,
                    "held": gpus_held(held),
                    "holdings": [
                        {
                            "kind": h.kind,
                            "name": h.name,
                            "label": h.label,
                            "gpus": h.gpus,
                            "gpu_type": h.gpu_type,
                            "devices": list(h.devices),
                            "since": h.since,
                        }
                        for h in held
                    ],
                }
            )
        )


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/gpuhub/grants", GrantsHandler),
    (r"/api/gpuhub/grants/([^/]+)/([^/]+)", GrantsHandler),
    (r"/api/gpuhub/holdings/([^/]+)", HoldingsHandler),
]
