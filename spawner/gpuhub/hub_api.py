"""gpuhub's endpoints inside the hub process, where the GPU ledger lives.

The ledger (:mod:`gpuhub.ledger`) is one per hub process: spawns are checked in the hub. So
that cluster jobs are checked by the same ledger under the same per-user lock, the jobs
service asks the hub for a *grant* before it creates anything:

* ``POST /hub/api/gpuhub/grants`` body ``{"user", "kind", "name", "gpus", "gpu_type"}``
  -> ``201 {"user", "name", "gpus", "quota", "held"}``, or ``403 {"message"}`` over quota.
  The grant counts until the workload's pods appear in the hub's pod watch (then they count)
  or ``GRANT_SECONDS`` pass.
* ``DELETE /hub/api/gpuhub/grants/<user>/<name>`` -> 204: the submit failed (or the job was
  cancelled), forget it.
* ``PUT /hub/api/gpuhub/grants/<user>/<name>`` body ``{"kind", "gpus", "gpu_type"}`` -> 204:
  the job, granted at submit, still waits in Kueue's queue with no pods: keep counting it for
  another ``GRANT_SECONDS`` (no new quota check; the service renews every minute while the
  job is queued, so a queued job holds its place and a forgotten one lapses).
* ``GET /hub/api/gpuhub/holdings/<user>`` -> ``{"user", "quota", "held", "holdings": [{"kind",
  "name", "label", "gpus", "gpu_type", "devices", "since"}]}``: what the user holds, for the user
  themselves (any token of theirs, e.g. their server's) and for the jobs service.

Callers need the custom scope ``custom:gpuhub:grants`` (the chart gives it to the jobs
service's role).

GPU reclaim (:mod:`gpuhub.monitor`), for the user's own server (its JUPYTERHUB_API_TOKEN),
the user, admins and holders of ``custom:gpuhub:fleet``:

* ``GET /hub/api/gpuhub/notices/<user>`` -> ``{"notices": [{"kind": "server"|"job", "server",
  "jobs": [job ids], "when", "by", "reason", "text"}]}``: why servers were stopped and jobs
  cancelled from the fleet page (the local jobs backend marks its records from it);

* ``GET /hub/api/gpuhub/reclaim/<user>`` -> ``{"enabled", "servers": {name: idle clock}}``;
* ``POST /hub/api/gpuhub/reclaim/<user>/keep`` body ``{"server": name}`` -> the restarted
  clock, or ``409 {"message"}`` once ``max_postpones`` is used up.

Hub pages show why a user's server was reclaimed (``template_vars`` ``gpuhub_notices``,
rendered by gpuhub's ``page.html``, which extends JupyterHub's). Enable in ``jupyterhub_config.py`` (the Helm chart does)::

    from gpuhub.hub_api import configure_hub
    configure_hub(c)

``JupyterHub.extra_handlers`` is marked deprecated in favour of services, but a service
cannot share the hub's lock and caches, which is the point here. Its warning is meant for an
admin who adds handlers; when gpuhub's are the only ones, the hub's log leaves it out
(:class:`QuietHubNoise`), so that a clean start shows only what an admin needs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from datetime import UTC, datetime
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from . import monitor as gpu_monitor
from .fleet import FLEET_SCOPE
from .fleet import HANDLERS as FLEET_HANDLERS
from .ledger import Grant, Ledger, QuotaExceeded, gpus_held
from .notice_api import HANDLERS as NOTICE_HANDLERS
from .usage import HUB_SHUTDOWN

GRANTS_SCOPE = "custom:gpuhub:grants"
TEMPLATES = os.path.join(os.path.dirname(__file__), "templates", "hub")
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
    scopes[FLEET_SCOPE] = {
        "description": "See every GPU holder on the fleet page, stop their servers and "
        "cancel their jobs."
    }
    hub.custom_scopes = scopes
    handlers = list(hub.extra_handlers) if "extra_handlers" in hub else []
    handlers += [(path, handler) for path, handler in HANDLERS if (path, handler) not in handlers]
    hub.extra_handlers = handlers
    _quiet_hub_noise()
    # Searched before JupyterHub's own templates; an admin's own page.html listed earlier wins.
    paths = list(hub.template_paths) if "template_paths" in hub else []
    if TEMPLATES not in paths:
        paths.append(TEMPLATES)
    hub.template_paths = paths
    template_vars = dict(hub.template_vars) if "template_vars" in hub else {}
    template_vars["gpuhub_notices"] = notices_for
    hub.template_vars = template_vars
    _start_monitor_with_the_hub()


_DEPRECATED = "JupyterHub.extra_handlers is deprecated"
_FAILED_STOP = "Failed to stop user: %s"


class QuietHubNoise(logging.Filter):
    """Two lines of JupyterHub's log that tell an admin nothing, left out:

    * its deprecation warning about ``extra_handlers`` while gpuhub's handlers are the only
      ones there (an admin's own handlers still get it);
    * "Failed to stop user: ''" at shutdown: a server whose stop was already under way (an
      admin's, idle reclaim's, the REST API's) is stopped a second time by the hub's cleanup,
      and JupyterHub's ``User.stop`` then fails to forget it twice (a ``KeyError`` of the
      server's name). It is stopped; only the second forgetting failed.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _FAILED_STOP and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            return not isinstance(args[0], KeyError)
        if not record.getMessage().startswith(_DEPRECATED):
            return True
        try:
            from jupyterhub.app import JupyterHub

            handlers = JupyterHub.instance().extra_handlers if JupyterHub.initialized() else []
        except Exception:
            return True
        return not all(handler in HANDLERS for handler in handlers)


def _quiet_hub_noise() -> None:
    log = logging.getLogger("JupyterHub")
    if not any(isinstance(f, QuietHubNoise) for f in log.filters):
        log.addFilter(QuietHubNoise())


def _start_monitor_with_the_hub() -> None:
    """Start the GPU monitor once the hub is up, so ``/hub/metrics`` has gpuhub's figures
    before any page creates a spawner. The hub loads its config inside its event loop; the
    monitor needs a gpuhub spawner for its settings, and any user's default one serves."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # not inside a hub (a tool reading the config)

    async def start() -> None:
        from jupyterhub import orm
        from jupyterhub.app import JupyterHub

        while gpu_monitor.current() is None:
            await asyncio.sleep(1)
            if not JupyterHub.initialized():
                continue
            app = JupyterHub.instance()
            users = app.tornado_settings.get("users")
            if users is None or getattr(app, "db", None) is None:
                continue
            orm_user = app.db.query(orm.User).first()
            if orm_user is None:
                await asyncio.sleep(9)  # no users yet: nothing is held
                continue
            try:
                users[orm_user].spawner  # noqa: B018 - a gpuhub spawner starts the monitor
            except Exception as exc:
                logging.getLogger("gpuhub").debug("gpuhub: monitor not started yet: %s", exc)
            await asyncio.sleep(4)

    _STARTER.add(loop.create_task(start()))


_STARTER: set[asyncio.Task[None]] = set()


def notices_for(user: Any) -> list[dict[str, str]]:
    """Why the user's servers were stopped, for gpuhub's ``page.html`` (template_vars)."""
    if user is None:
        return []
    if gpu_monitor.current() is None:
        user.spawner  # noqa: B018 - a gpuhub spawner starts the monitor, which reads the store
    monitor = gpu_monitor.current()
    if monitor is None:
        return []
    return [notice_text(n) for n in monitor.store.notices_for(user.name, shown=True)]


def notice_text(notice: Any) -> dict[str, str]:
    """A notice as hub pages and ``GET /hub/api/gpuhub/notices/<user>`` show it."""
    when = datetime.fromtimestamp(notice.when, UTC)
    at = f"on {when:%Y-%m-%d at %H:%M} UTC"
    server = f"server {notice.server!r}" if notice.server else "server"
    if notice.kind == "job":
        # A workstation's job row is named after the server that started its processes.
        if notice.jobs and list(notice.jobs) != [notice.server]:
            what = f"job{'s' if len(notice.jobs) > 1 else ''} {', '.join(notice.jobs)}"
        else:
            what = f"job {notice.server!r}" if notice.server else "job"
        text = (
            f"Your {what} was cancelled {at} by {notice.by}: "
            f"{notice.reason.rstrip('.')}. Its GPUs are free again."
        )
    elif notice.by == HUB_SHUTDOWN:
        text = (
            f"Your {server} was waiting in line, {notice.reason}, when the hub shut down "
            f"{at}; it did not start and held no GPU. Start it again to join the line."
        )
    else:
        if notice.by == "idle":
            what = f"Your {server} was stopped {at} because {notice.reason}."
        else:
            what = f"Your {server} was stopped {at} by {notice.by}: {notice.reason.rstrip('.')}."
        text = f"{what} Your files are safe; start the server again when you need it."
    return {
        "key": notice.key,
        "server": notice.server,
        "when": when.isoformat(timespec="seconds"),
        "by": notice.by,
        "kind": notice.kind,
        "jobs": ",".join(notice.jobs),
        "text": text,
    }


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

    async def put(self, name: str, job: str) -> None:
        """Renew the grant of a job that waits in Kueue's queue (see the module docstring)."""
        self._require_scope()
        body = self.get_json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Send a JSON object: kind, gpus, gpu_type.")
        kind, gpus = body.get("kind"), body.get("gpus")
        if kind not in _KINDS:
            raise web.HTTPError(400, f"kind must be one of {', '.join(sorted(_KINDS))}.")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 100_000:
            raise web.HTTPError(400, "gpus must be a whole number of GPUs.")
        gpu_type = str(body.get("gpu_type") or "")[:200]
        user, ledger, _ = await self._ledger_for(name)
        if gpus > 0:
            ledger.grant(Grant(user.name, "job", job, gpus, gpu_type, time.time() + GRANT_SECONDS))
        self.set_status(204)
        self.finish()

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


class ReclaimHandler(APIHandler):
    """Idle clocks of a user's GPU servers, and "Keep my GPUs" (see the module docstring)."""

    def _allowed(self, name: str) -> None:
        current = self.current_user
        if current is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        if getattr(current, "name", None) == name and getattr(current, "kind", "user") == "user":
            return
        if (
            FLEET_SCOPE in self.expanded_scopes
            or f"admin:servers!user={name}" in (self.expanded_scopes)
            or "admin:servers" in self.expanded_scopes
        ):
            return
        raise web.HTTPError(403, f"Only {name} and GPU fleet admins may see this.")

    def _monitor(self) -> gpu_monitor.GPUMonitor | None:
        monitor = gpu_monitor.current()
        if monitor is None:
            user = self.find_user(self.current_user.name) if self.current_user else None
            if user is not None:
                user.spawner  # noqa: B018 - a gpuhub spawner starts the monitor
        return gpu_monitor.current()

    def get(self, name: str) -> None:
        self._allowed(name)
        monitor = self._monitor()
        now = time.time()
        servers: dict[str, Any] = {}
        if monitor is not None and monitor.rule is not None:
            for (user, kind, server), _ in monitor.tracks.items():
                if user != name or kind != "server":
                    continue
                found = monitor.clock_of(name, server)
                if found is not None:
                    servers[server] = found[1].as_json(monitor.rule, now)
        enabled = monitor is not None and monitor.rule is not None
        self.finish(json.dumps({"enabled": enabled, "servers": servers}))


class NoticesHandler(ReclaimHandler):
    """``GET /hub/api/gpuhub/notices/<user>``: why the user's servers were stopped and jobs
    cancelled (the user's server reads it to mark a cancelled local job's record)."""

    def get(self, name: str) -> None:
        self._allowed(name)
        monitor = self._monitor()
        found = monitor.store.notices_for(name) if monitor is not None else []
        self.finish(
            json.dumps(
                {
                    "notices": [
                        {
                            **notice_text(n),
                            "jobs": list(n.jobs),
                            "reason": n.reason,
                            "dismissed": n.dismissed,
                        }
                        for n in found
                    ]
                }
            )
        )


class KeepHandler(ReclaimHandler):
    """ "Keep my GPUs": restart the idle clock of one of the user's servers."""

    def post(self, name: str) -> None:
        self._allowed(name)
        body = self.get_json_body() or {}
        server = body.get("server", "") if isinstance(body, dict) else None
        if not isinstance(server, str):
            raise web.HTTPError(400, "Send a JSON object with the server's name.")
        monitor = self._monitor()
        if monitor is None or monitor.rule is None:
            raise web.HTTPError(409, "GPU reclaim is off on this hub.")
        now = time.time()
        refused = monitor.postpone(name, server, now)
        if refused is not None:
            self.set_status(409)
            self.finish(json.dumps({"status": 409, "message": refused}))
            return
        self.log.info("gpuhub: %s kept the GPUs of server %r", name, server)
        found = monitor.clock_of(name, server)
        assert found is not None
        self.finish(json.dumps(found[1].as_json(monitor.rule, now)))


HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    *FLEET_HANDLERS,
    *NOTICE_HANDLERS,
    (r"/api/gpuhub/reclaim/([^/]+)", ReclaimHandler),
    (r"/api/gpuhub/reclaim/([^/]+)/keep", KeepHandler),
    (r"/api/gpuhub/notices/([^/]+)", NoticesHandler),
    (r"/api/gpuhub/grants", GrantsHandler),
    (r"/api/gpuhub/grants/([^/]+)/([^/]+)", GrantsHandler),
    (r"/api/gpuhub/holdings/([^/]+)", HoldingsHandler),
]
