"""gpuhub's endpoints inside the hub process, where the GPU ledger lives.

The ledger (:mod:`gpuhub.hub.ledger.ledger`) is one per hub process: spawns are checked in the hub. So
that cluster jobs are checked by the same ledger under the same per-user lock, the jobs
service asks the hub for a *grant* before it creates anything:

* ``POST /hub/api/gpuhub/grants`` body ``{"user", "kind", "name", "gpus", "gpu_type"}``
  (plus ``"share"``, the GPUs a shared request counts as, as a fraction ``"1/2"``, and
  ``"gpu_memory"`` in bytes, for a shared GPU type: :mod:`gpuhub.core.sharing`)
  -> ``201 {"user", "name", "gpus", "quota", "held", "waiting"}``, or ``403 {"message"}``
  over quota or over the user's GPU-hour budget (the spawners' check, ``gpu_budget_refusal``).
  The grant counts until the workload's pods appear in the hub's pod watch (then they count)
  or ``GRANT_SECONDS`` pass.
* ``DELETE /hub/api/gpuhub/grants/<user>/<name>[?kind=<kind>]`` -> 204: the submit failed
  (or the job was cancelled), forget it.
* ``PUT /hub/api/gpuhub/grants/<user>/<name>`` body ``{"kind", "gpus", "gpu_type", "uid"}``
  (plus ``"queued": true`` while the job waits in Kueue's queue)
  -> 204: the service created the job's object (``uid``: its uid, a pipeline's KFP run id),
  so the ledger matches the job's pods to the grant by kind and uid, never by name; and,
  while the job still waits in Kueue's queue with no pods, keep counting it for another
  ``GRANT_SECONDS`` (no new quota check; the service renews every minute while the job is
  queued, so a queued job holds its place and a forgotten one lapses). A grant holds no
  GPU: until its pods are bound it is *waiting* (in Kueue's queue, or for a node).

These need the custom scope ``custom:gpuhub:grants`` (the chart gives it to the jobs
service's role).

What a user holds and GPU reclaim (:mod:`gpuhub.hub.monitor.gpu_monitor`), for tokens with access to the
user's servers (``access:servers`` or ``servers`` for that user: the user's session and
tokens, their server's own JUPYTERHUB_API_TOKEN, admins; see :data:`gpuhub.hub.web.access.SERVER_ACCESS_SCOPES`):
never for a token that only identifies the user, as OAuth gives every service they log in
to.

* ``GET /hub/api/gpuhub/holdings/<user>`` -> ``{"user", "budgets", "quota", "held", "waiting",
  "holdings": [{"kind", "name", "label", "gpus", "share", "gpu_memory", "text", "gpu_type",
  "devices", "device_names", "since", "processes", "jobs", "waiting", "stops_at",
  "stops_why", "estimate"}]}`` (``estimate``, on a waiting holding: ``{"likely", "by",
  "latest", "because"}``, :mod:`gpuhub.hub.monitor.eta`; ``stops_at``: when a holding that
  will be stopped stops, epoch seconds,
  and ``stops_why`` why, ``"budget"`` (a budget's grace), ``"idle"`` or ``"share"``; null
  for what nothing stops) (a share of a GPU:
  ``share`` what it counts as, ``gpu_memory`` its bytes, ``text`` "8 GB of GPU 3 (T4), 0.5
  GPU" as the fleet page says it; claimed through DRA, ``device_names`` its devices, "GPU 3
  (A100-SXM4-80GB) on a100-7"). ``held`` counts GPUs given; ``waiting`` those asked for by what waits for
  them (in line, in Kueue's queue), which count against the quota too; a holding's
  ``waiting`` says where it waits ("waiting in line"), null once held. ``budgets``: the
  user's GPU-hour budget (:meth:`gpuhub.hub.ledger.budget_usage.BudgetState.as_json`), [] when
  none applies. Also for
  ``custom:gpuhub:grants`` (the jobs service);
* ``GET /hub/api/gpuhub/notices/<user>`` -> ``{"notices": [{"kind": "server"|"job"|"warning",
  "server", "jobs": [job ids], "when", "by", "reason", "text"}]}``: why servers were stopped
  and jobs cancelled or ended, and which job holds are warned (the local jobs backend marks
  its records from it); also for ``custom:gpuhub:fleet``;
* ``GET /hub/api/gpuhub/reclaim/<user>`` -> ``{"enabled", "servers": {name: idle clock},
  "jobs": {server name: idle clock of its job hold}}``; also for ``custom:gpuhub:fleet``;
* ``POST /hub/api/gpuhub/reclaim/<user>/keep`` body ``{"server": name, "kind": "server" |
  "job"}`` -> the restarted clock, or ``409 {"message"}`` once ``max_postpones`` is used up.

Every endpoint answers a method it does not serve with 405 and a request without
credentials with 403.

Hub pages show why a user's server was reclaimed (``template_vars`` ``gpuhub_notices``,
rendered by gpuhub's ``page.html``, which extends JupyterHub's). Enable in ``jupyterhub_config.py`` (the Helm chart does)::

    from gpuhub import configure_hub
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
from fractions import Fraction
from typing import Any

from tornado import web

from gpuhub.core import words
from gpuhub.core.holdings import (
    Holding,
    QuotaExceeded,
    gpu_type_names,
    gpus_held,
    gpus_waiting,
    named,
)
from gpuhub.core.options import as_given
from gpuhub.core.policy import PolicyConfigError
from gpuhub.hub.ledger.capacity import FIRST_SYNC_WAIT
from gpuhub.hub.ledger.ledger import Grant, Ledger
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.usage import SHARE_OVERUSE
from gpuhub.hub.web.access import BoundedAPIHandler
from gpuhub.hub.web.budgets import HANDLERS as BUDGET_HANDLERS
from gpuhub.hub.web.fleet import BUDGETS_SCOPE, FLEET_SCOPE
from gpuhub.hub.web.fleet import HANDLERS as FLEET_HANDLERS
from gpuhub.hub.web.notices import HANDLERS as NOTICE_HANDLERS
from gpuhub.hub.web.notices import notice_text, notices_for, share_warning, warning_text
from gpuhub.jobs.model import KINDS

GRANTS_SCOPE = "custom:gpuhub:grants"
TEMPLATES = os.path.join(os.path.dirname(__file__), "templates", "hub")
# How long a job's grant counts while its pods are not in the watch yet: a pipeline step's
# pod appears after Kubeflow's driver pods, which can take minutes on a busy cluster.
GRANT_SECONDS = 600.0
_KINDS = set(KINDS)  # the job kinds a grant may be for


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
    scopes[BUDGETS_SCOPE] = {"description": "Grant users extra GPU-hours of their budgets."}
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


class GpuhubAPIHandler(BoundedAPIHandler):
    """What gpuhub's hub endpoints share: only their own methods (others answer 405 before
    anything else), 403 without credentials, bodies of at most ``MAX_BODY`` bytes, and
    one-sentence JSON errors that quote what was sent cut short."""

    SUPPORTED_METHODS: tuple[str, ...] = ("OPTIONS",)

    def _fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish(json.dumps({"status": status, "message": message}))

    def _caller(self) -> Any:
        caller = self.current_user
        if caller is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        return caller

    def _refuse(self, caller: Any, name: str, others: web.HTTPError) -> None:
        """The caller may not read ``name``'s GPUs: their own token lacks the scope (403,
        saying which), or it is someone else (``others``)."""
        if self.identifies_only(caller, name):
            raise web.HTTPError(
                403,
                f"This token only identifies {name}; reading or keeping their GPUs needs "
                f"access to their servers (scope access:servers!user={name}).",
            )
        raise others

    async def _ledger_for(self, name: str) -> tuple[Any, Ledger, int | None]:
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, f"No user {as_given(name)} on this hub (gpuhub ledger).")
        spawner = user.get_spawner("", replace_failed=True)
        ledger_of = getattr(spawner, "gpu_ledger", None)
        if ledger_of is None:
            raise web.HTTPError(
                409, "This hub's spawner keeps no GPU ledger (not a gpuhub spawner)."
            )
        # A job's grant changes holdings: it waits out the hub's first sync after a start.
        ledger = await ledger_of(wait=FIRST_SYNC_WAIT)
        return user, ledger, spawner.gpu_quota_limit()


def _queued(body: dict[str, Any]) -> bool:
    """A grant's ``"queued"`` (the job waits in Kueue's queue), checked (400 otherwise)."""
    queued = body.get("queued", False)
    if not isinstance(queued, bool):
        raise web.HTTPError(400, f"queued must be true or false, not {queued!r}.")
    return queued


def _grant_body(body: Any, fields: str) -> tuple[str, int, str, str, Fraction | None, int]:
    """``(kind, gpus, gpu_type, uid, share, gpu_memory)`` of a grant's JSON body, checked
    (400 otherwise)."""
    if not isinstance(body, dict):
        raise web.HTTPError(400, f"Send a JSON object: {fields}.")
    kind, gpus, uid = body.get("kind"), body.get("gpus"), body.get("uid", "")
    if kind not in _KINDS:
        raise web.HTTPError(
            400, f"kind must be one of {', '.join(sorted(_KINDS))}, not {as_given(kind)}."
        )
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 100_000:
        raise web.HTTPError(400, f"gpus must be a whole number of GPUs, not {as_given(gpus)}.")
    if not isinstance(uid, str) or len(uid) > 200:
        raise web.HTTPError(400, "uid must be the job's Kubernetes uid (or KFP run id).")
    share, memory = _share(body.get("share"), gpus), body.get("gpu_memory", 0)
    if isinstance(memory, bool) or not isinstance(memory, int) or not 0 <= memory < 2**63:
        raise web.HTTPError(400, f"gpu_memory must be a number of bytes, not {as_given(memory)}.")
    return kind, gpus, str(body.get("gpu_type") or "")[:200], uid, share, memory


def _share(value: Any, gpus: int) -> Fraction | None:
    """The GPUs a shared request counts as ("1/2"), at most its count of units; None: whole."""
    if value is None:
        return None
    try:
        share = Fraction(value) if isinstance(value, str) and len(value) <= 40 else None
    except (ValueError, ZeroDivisionError):
        share = None
    if share is None or not 0 < share <= gpus:
        raise web.HTTPError(
            400, f'share must be the GPUs a share counts as, such as "1/2", not {as_given(value)}.'
        )
    return share


async def _budget_refusal(user: Any, gpu_type: str, gpus: int) -> str | None:
    """The spawners' one budget check (``gpu_budget_refusal``) for a job's GPUs."""
    spawner = user.get_spawner("", replace_failed=True)
    check = getattr(spawner, "gpu_budget_refusal", None)
    if check is None:
        return None
    message: str | None = await check(gpu_type, gpus)
    return message


class GrantsHandler(GpuhubAPIHandler):
    """``POST /hub/api/gpuhub/grants``: a quota grant for a job about to be created."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST", "OPTIONS")

    def _require_scope(self) -> None:
        self._caller()
        if GRANTS_SCOPE not in self.expanded_scopes:
            raise web.HTTPError(403, f"This token lacks the {GRANTS_SCOPE} scope.")

    async def post(self) -> None:
        self._require_scope()
        body = self.get_json_body()
        fields = "user, kind, name, gpus, gpu_type"
        kind, gpus, gpu_type, uid, share, memory = _grant_body(body, fields)
        name, job = body.get("user"), body.get("name")
        if not isinstance(name, str) or not isinstance(job, str) or not job:
            raise web.HTTPError(400, "user and name must be strings.")
        user, ledger, limit = await self._ledger_for(name)
        over_budget = await _budget_refusal(user, gpu_type, gpus)
        if over_budget is not None:
            self.log.warning(
                "gpuhub: refused %s GPUs for %s's %s %s: over budget", gpus, name, kind, job
            )
            self._fail(403, over_budget)
            return
        async with ledger.lock(user.name):
            try:
                wanted = share if share is not None else Fraction(gpus)
                held = ledger.check(user.name, limit, wanted, what="job")
            except QuotaExceeded as exc:
                self.log.warning(
                    "gpuhub: refused %s GPUs for %s's %s %s: %s", gpus, name, kind, job, exc
                )
                self._fail(exc.status, exc.message)
                return
            if gpus > 0:
                expires = time.time() + GRANT_SECONDS
                ledger.grant(
                    Grant(user.name, "job", job, gpus, gpu_type, expires, kind, uid, share, memory)
                )
        self.set_status(201)
        self.finish(
            json.dumps(
                {
                    "user": user.name,
                    "name": job,
                    "gpus": gpus,
                    "quota": None if limit is None else words.as_number(limit),
                    "held": words.as_number(gpus_held(held)),
                    "waiting": words.as_number(gpus_waiting(held)),
                }
            )
        )


class GrantHandler(GrantsHandler):
    """``PUT`` and ``DELETE /hub/api/gpuhub/grants/<user>/<job>``: bind a grant to the object
    it was for (its uid), renew a queued job's, or forget one."""

    SUPPORTED_METHODS: tuple[str, ...] = ("PUT", "DELETE", "OPTIONS")

    async def put(self, name: str, job: str) -> None:
        """Bind the grant to the created object, or renew that of a job waiting in Kueue's
        queue (see the module docstring); no new quota check."""
        self._require_scope()
        kind, gpus, gpu_type, uid, share, memory = _grant_body(
            self.get_json_body(), "kind, gpus, gpu_type, uid"
        )
        queued = _queued(self.get_json_body())
        user, ledger, _ = await self._ledger_for(name)
        if gpus > 0:
            expires = time.time() + GRANT_SECONDS
            ledger.grant(
                Grant(
                    user.name, "job", job, gpus, gpu_type, expires, kind, uid, share, memory, queued
                )
            )
        self.set_status(204)
        self.finish()

    async def delete(self, name: str, job: str) -> None:
        self._require_scope()
        kind = self.get_argument("kind", "")
        if kind and kind not in _KINDS:
            raise web.HTTPError(
                400, f"kind must be one of {', '.join(sorted(_KINDS))}, not {as_given(kind)}."
            )
        user, ledger, _ = await self._ledger_for(name)
        ledger.release_job_grant(user.name, job, kind or None)
        self.set_status(204)
        self.finish()


class HoldingsHandler(GpuhubAPIHandler):
    """``GET /hub/api/gpuhub/holdings/<user>``: what one user holds against their quota, for
    a token with access to their servers (their own, their server's) or the jobs service."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET", "OPTIONS")

    async def get(self, name: str) -> None:
        caller = self._caller()
        target = self.find_user(name)
        if GRANTS_SCOPE not in self.expanded_scopes and (
            target is None or not self.reaches_servers_of(target)
        ):
            # Never confirm to someone else that a user exists.
            self._refuse(
                caller,
                name,
                web.HTTPError(404, f"No user {as_given(name)} on this hub (gpuhub ledger)."),
            )
        user, ledger, limit = await self._ledger_for(name)
        try:
            held = ledger.holdings(user.name)
        except RuntimeError:  # the cluster has not answered yet
            raise web.HTTPError(503, "GPU holdings cannot be read right now.") from None
        try:
            names = gpu_type_names(user.get_spawner("").gpu_policy.gpu_types)
        except PolicyConfigError:  # an admin mistake is reported where the form renders
            names = {}
        held = [named(h, names) for h in held]
        monitor = gpu_monitor.current()
        stops = monitor.stops(user.name) if monitor is not None else {}
        self.finish(
            json.dumps(
                {
                    "user": user.name,
                    "budgets": await budgets_of(user),
                    "quota": None if limit is None else words.as_number(limit),
                    "held": words.as_number(gpus_held(held)),
                    "waiting": words.as_number(gpus_waiting(held)),
                    "holdings": [
                        {
                            "kind": h.kind,
                            "name": h.name,
                            "label": h.label,
                            "gpus": h.gpus,
                            # A share of a GPU: what it counts as, and its memory (bytes).
                            "share": None if h.share is None else words.as_number(h.share),
                            "gpu_memory": h.memory or None,
                            "text": h.gpus_text,
                            "gpu_type": h.gpu_type,
                            "devices": list(h.devices),
                            # Claimed through DRA: "GPU 3 (A100-SXM4-80GB) on a100-7".
                            "device_names": list(h.claimed),
                            "since": h.since,
                            "processes": [{"pid": p, "command": c} for p, c in h.processes],
                            "jobs": list(h.jobs),
                            "waiting": h.waiting_words or None,
                            # Will be stopped (a budget's grace, idle reclaim, a share
                            # over its memory): when (epoch seconds) and why; else null.
                            "stops_at": stops.get((h.user, h.kind, h.name), (None,))[0],
                            "stops_why": stops.get((h.user, h.kind, h.name), (None, None))[1],
                            # Waiting: when it likely starts, by when, at the latest,
                            # and why (gpuhub.hub.monitor.eta); null once held.
                            "estimate": estimate_of(monitor, h),
                        }
                        for h in held
                    ],
                }
            )
        )


def estimate_of(monitor: gpu_monitor.GPUMonitor | None, holding: Holding) -> Any:
    """A waiting holding's estimated start as JSON (docs/architecture.md, "When, not only
    where"); None once held, or before the monitor's first estimate."""
    if monitor is None or not holding.waiting:
        return None
    found = monitor.eta.estimates.get((holding.user, holding.kind, holding.name))
    return found.as_json() if found is not None else None


async def budgets_of(user: Any) -> list[dict[str, Any]]:
    """The ``budgets`` of a holdings answer: the GPU-hour budget that applies to ``user``
    (docs/architecture.md, "GPU-hour budgets"); empty when none does."""
    spawner = user.get_spawner("", replace_failed=True)
    budget_json = getattr(spawner, "gpu_budget_json", None)
    found = await budget_json() if budget_json is not None else None
    return [found] if found is not None else []


class ReclaimHandler(GpuhubAPIHandler):
    """Idle clocks of a user's GPU servers and job holds (see the module docstring)."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET", "OPTIONS")

    def _allowed(self, name: str) -> None:
        caller = self._caller()
        if FLEET_SCOPE in self.expanded_scopes:
            return
        target = self.find_user(name)
        if target is not None and self.reaches_servers_of(target):
            return
        self._refuse(
            caller, name, web.HTTPError(403, f"Only {name} and GPU fleet admins may see this.")
        )

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


class NoticesHandler(ReclaimHandler):
    """``GET /hub/api/gpuhub/notices/<user>``: why the user's servers were stopped and jobs
    cancelled or ended, and which job holds are warned (the user's server reads it to mark a
    cancelled local job's record)."""

    def get(self, name: str) -> None:
        self._allowed(name)
        monitor = self._monitor()
        found = monitor.store.notices_for(name) if monitor is not None else []
        warned = monitor.warnings_for(name) if monitor is not None else []
        shares = monitor.share_warnings(name) if monitor is not None else []
        self.finish(
            json.dumps(
                {
                    "notices": [
                        {**warning_text(h, deadline), "jobs": [], "reason": "idle"}
                        for h, deadline in warned
                    ]
                    + [
                        {**share_warning(h, deadline, text), "jobs": [], "reason": SHARE_OVERUSE}
                        for h, deadline, text in shares
                    ]
                    + [
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
    """ "Keep my GPUs": restart the idle clock of one of the user's servers or job holds."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST", "OPTIONS")

    def post(self, name: str) -> None:
        self._allowed(name)
        body = self.get_json_body() or {}
        if not isinstance(body, dict):
            raise web.HTTPError(400, "Send a JSON object with the server's name.")
        server, kind = body.get("server", ""), body.get("kind", "server")
        if not isinstance(server, str):
            raise web.HTTPError(400, f"server must be the server's name, not {as_given(server)}.")
        if kind not in ("server", "job"):
            raise web.HTTPError(400, f'kind must be "server" or "job", not {as_given(kind)}.')
        monitor = self._monitor()
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
    *FLEET_HANDLERS,
    *NOTICE_HANDLERS,
    *BUDGET_HANDLERS,
    (r"/api/gpuhub/reclaim/([^/]+)", ReclaimHandler),
    (r"/api/gpuhub/reclaim/([^/]+)/keep", KeepHandler),
    (r"/api/gpuhub/notices/([^/]+)", NoticesHandler),
    (r"/api/gpuhub/grants", GrantsHandler),
    (r"/api/gpuhub/grants/([^/]+)/([^/]+)", GrantHandler),
    (r"/api/gpuhub/holdings/([^/]+)", HoldingsHandler),
]
