"""gpuhub's endpoints inside the hub process, where the GPU ledger lives, and the one call
that wires them into a hub.

The ledger (:mod:`gpuhub.hub.ledger.ledger`) is one per hub process: spawns are checked in the
hub, and so that cluster jobs are checked by the same ledger under the same per-user lock,
the jobs service asks the hub for a grant before it creates anything. One module per
resource, as JupyterHub's ``apihandlers/`` (each ends in its ``HANDLERS``, gathered here):

* :mod:`gpuhub.hub.web.grants`: ``/hub/api/gpuhub/grants``, the jobs service's quota grants
  (``custom:gpuhub:grants``);
* :mod:`gpuhub.hub.web.holdings`: ``GET /hub/api/gpuhub/holdings/<user>``, what a user holds;
* :mod:`gpuhub.hub.web.reclaim`: ``/hub/api/gpuhub/reclaim/<user>`` and its ``/keep``, idle
  clocks and "Keep my GPUs";
* :mod:`gpuhub.hub.web.notices`: ``/hub/api/gpuhub/notices/<user>`` (and closing one), and
  the notices hub pages show;
* :mod:`gpuhub.hub.web.budgets`: extra GPU-hours; :mod:`gpuhub.hub.web.fleet` and
  :mod:`gpuhub.hub.web.fleet_actions`: the fleet page and its actions.

Who may call each is one check (:mod:`gpuhub.hub.web.access`): a user's GPU facts for tokens
with access to the user's servers (never for a token that only identifies the user, as
OAuth gives every service they log in to), gpuhub's own scopes for the rest. Every endpoint
answers a method it does not serve with 405 and a request without credentials with 403.

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
import logging
import os
from typing import Any

from tornado import web

from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.web.access import BUDGETS_SCOPE, FLEET_SCOPE, GRANTS_SCOPE
from gpuhub.hub.web.bookings import HANDLERS as BOOKING_HANDLERS
from gpuhub.hub.web.budgets import HANDLERS as BUDGET_HANDLERS
from gpuhub.hub.web.calendar import HANDLERS as CALENDAR_HANDLERS
from gpuhub.hub.web.calendar import home_calendar
from gpuhub.hub.web.fleet import HANDLERS as FLEET_HANDLERS
from gpuhub.hub.web.fleet_actions import HANDLERS as FLEET_ACTION_HANDLERS
from gpuhub.hub.web.grants import HANDLERS as GRANT_HANDLERS
from gpuhub.hub.web.holdings import HANDLERS as HOLDING_HANDLERS
from gpuhub.hub.web.notices import HANDLERS as NOTICE_HANDLERS
from gpuhub.hub.web.notices import notices_for
from gpuhub.hub.web.reclaim import HANDLERS as RECLAIM_HANDLERS

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates", "hub")


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
    template_vars["gpuhub_calendar"] = home_calendar  # the calendar on the home page
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


# Every hub endpoint of gpuhub, gathered from the module of each resource (as JupyterHub's
# apihandlers/ do): the API's and the pages'.
HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    *FLEET_HANDLERS,
    *FLEET_ACTION_HANDLERS,
    *NOTICE_HANDLERS,
    *BUDGET_HANDLERS,
    *RECLAIM_HANDLERS,
    *GRANT_HANDLERS,
    *HOLDING_HANDLERS,
    *BOOKING_HANDLERS,
    *CALENDAR_HANDLERS,
]
