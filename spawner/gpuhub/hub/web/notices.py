"""What a user reads about their own stopped servers and cancelled jobs, and closing it: the
one home of notices in the hub.

The notices themselves (why a server was stopped, by whom) live in the usage store
(:class:`gpuhub.hub.monitor.usage.Notice`); here they are worded (:func:`notice_text`,
:func:`warning_text`, :func:`share_warning`), shown on hub pages (``template_vars``
``gpuhub_notices``: :func:`notices_for`, rendered by gpuhub's ``page.html``) and served:

* ``GET /hub/api/gpuhub/notices/<user>`` -> ``{"notices": [{"kind": "server"|"job"|"warning",
  "server", "jobs": [job ids], "when", "by", "reason", "text"}]}``: why servers were stopped
  and jobs cancelled or ended, and which job holds are warned (the local jobs backend marks
  its records from it). For whoever has access to the user's servers, and
  ``custom:gpuhub:fleet``; never a token that only identifies the user.
* ``POST /hub/api/gpuhub/notices/<user>/dismiss`` body ``{"key"}`` -> 204: the user closed the
  notice (its ``key`` from the notice); it stays closed, across hub restarts. For whoever
  has access to the user's servers, as reading the notices needs
  (:data:`gpuhub.hub.web.access.SERVER_ACCESS_SCOPES`: the hub page's button, with its XSRF
  token; their own token, their server's); never a token that only identifies them. 404
  when there is no such notice (the key quoted cut short), 413 for a body
  over 16 KiB.
* ``GET /hub/gpuhub/notices`` -> ``{"user", "notices": [...], "servers": {name: {"active",
  "ready", "pending"}}, "xsrf"}``: the logged-in user's open notices and whether each of
  their servers runs (or is being started or stopped: ``pending`` is ``"spawn"``,
  ``"stop"`` or null), for JupyterLab when its server is gone. A page (cookie) request, not an API
  one: JupyterLab, on the user's server's origin, has no hub XSRF token to send with a
  request; this hands it one (``xsrf``) for the dismiss above.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from jupyterhub.handlers.base import BaseHandler
from tornado import web

from gpuhub.core import words
from gpuhub.core.holdings import Holding, job_hold_name
from gpuhub.core.options import as_given
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.monitor.booking_watch import BOOKING
from gpuhub.hub.monitor.usage import BUDGET, HUB_SHUTDOWN, SHARE_OVERUSE
from gpuhub.hub.web.access import GpuhubAPIHandler


def notices_for(user: Any) -> list[dict[str, str]]:
    """Why the user's servers were stopped and jobs ended, and which of their job holds are
    about to be ended for idleness, for gpuhub's ``page.html`` (template_vars)."""
    if user is None:
        return []
    if gpu_monitor.current() is None:
        user.spawner  # noqa: B018 - a gpuhub spawner starts the monitor, which reads the store
    monitor = gpu_monitor.current()
    if monitor is None:
        return []
    warnings = [warning_text(h, deadline) for h, deadline in monitor.warnings_for(user.name)]
    warnings += [share_warning(*w) for w in monitor.share_warnings(user.name)]
    shown = monitor.store.notices_for(user.name, shown=True)
    return warnings + [notice_text(n) for n in shown]


# Every moment in a notice is written once, "27 Nov 2026, 00:58 UTC" (``at``), and its
# ``when`` is the same moment for machines: hub pages show it as a <time> the browser writes
# in the reader's zone (page.html), the lab likewise (its formatTime), from ``at`` and ``when``.


def _at(when: float) -> str:
    return f"on {words.moment_utc(when)}"


def warning_text(holding: Holding, deadline: float) -> dict[str, str]:
    """A job hold about to be ended for idleness, as hub pages show it, named as the fleet
    page names it (:func:`gpuhub.core.holdings.job_hold_name`). It has no ``key``: it goes by
    itself when the processes use their GPUs, are kept or are ended, so there is nothing to
    close."""
    gpus = f"{holding.gpus} GPU{'s' if holding.gpus != 1 else ''}"
    minutes = max(0, round((deadline - time.time()) / 60))
    text = (
        f"Your {holding.label}, left running when the server stopped, keep {gpus} idle; they "
        f"will be ended {_at(deadline)} (in about {minutes} min) unless they use the GPUs or "
        "you keep them (POST /hub/api/gpuhub/reclaim/"
        f'<you>/keep with {{"kind": "job", "server": {json.dumps(holding.name)}}}).'
    )
    return {
        "key": "",
        "server": holding.name,
        "when": datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds"),
        "at": words.moment_utc(deadline),
        "by": "idle",
        "kind": "warning",
        "jobs": ",".join(holding.jobs),
        "text": text,
    }


def share_warning(holding: Holding, deadline: float, text: str) -> dict[str, str]:
    """A server over its share of a GPU, to be stopped at ``deadline`` (gpuhub.hub.monitor.overshare);
    like a job hold's warning it goes by itself, so it has no ``key``."""
    return {
        "key": "",
        "server": holding.name,
        "when": datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds"),
        "at": words.moment_utc(deadline),
        "by": SHARE_OVERUSE,
        "kind": "warning",
        "jobs": "",
        "text": text,
    }


def notice_text(notice: Any) -> dict[str, str]:
    """A notice as hub pages and ``GET /hub/api/gpuhub/notices/<user>`` show it."""
    when = datetime.fromtimestamp(notice.when, UTC)
    at = _at(notice.when)
    server = f"server {notice.server!r}" if notice.server else "server"
    if notice.kind in ("budget", BOOKING):  # its reason is the whole sentence (a warning)
        text = notice.reason
    elif notice.kind == "job":
        if list(notice.jobs) == [notice.server]:  # a cluster job, by its id
            what, were, its = f"job {notice.server!r}", "was", "Its"
        else:
            # A workstation's job hold: named as the fleet page named it, by the server that
            # left its processes and the jobs they are.
            what, were, its = job_hold_name(notice.server, notice.jobs), "were", "Their"
        if notice.by in (BUDGET, BOOKING):
            text = (
                f"Your {what} {were} ended {at} because {notice.reason}. {its} GPUs are free again."
            )
        elif notice.by == "idle":
            text = (
                f"Your {what}, left running when the server stopped, {were} ended {at} "
                f"because {notice.reason}. {its} GPUs are free again."
            )
        else:
            text = (
                f"Your {what} {were} cancelled {at} by {notice.by}: "
                f"{notice.reason.rstrip('.')}. {its} GPUs are free again."
            )
    elif notice.by == HUB_SHUTDOWN:
        text = (
            f"Your {server} was waiting in line, {notice.reason}, when the hub shut down "
            f"{at}; it did not start and held no GPU. Start it again to join the line."
        )
    else:
        if notice.by in ("idle", SHARE_OVERUSE, BUDGET, BOOKING):
            what = f"Your {server} was stopped {at} because {notice.reason}."
        else:
            what = f"Your {server} was stopped {at} by {notice.by}: {notice.reason.rstrip('.')}."
        text = f"{what} Your saved files are safe; start the server again when you need it."
    return {
        "key": notice.public_key,
        "server": notice.server,
        "when": when.isoformat(timespec="seconds"),
        "at": words.moment_utc(notice.when),
        "by": notice.by,
        "kind": notice.kind,
        "jobs": ",".join(notice.jobs),
        "text": text,
    }


class NoticesHandler(GpuhubAPIHandler):
    """``GET /hub/api/gpuhub/notices/<user>``: why the user's servers were stopped and jobs
    cancelled or ended, and which job holds are warned (the user's server reads it to mark a
    cancelled local job's record)."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET", "OPTIONS")

    def get(self, name: str) -> None:
        self.require_holder_access(name)
        monitor = gpu_monitor.for_handler(self)
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


class DismissHandler(GpuhubAPIHandler):
    """``POST /hub/api/gpuhub/notices/<user>/dismiss``: close one notice for good, with the
    access reading the notices needs (access to the user's servers)."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST", "OPTIONS")

    def post(self, name: str) -> None:
        self.require_access(
            name,
            "closing their notices",
            # The same answer whether or not such a user exists.
            web.HTTPError(403, f"Only {as_given(name)} may close their own notices."),
        )
        target = self.find_user(name)
        assert target is not None  # require_access reached their servers
        body = self.get_json_body()
        key = body.get("key") if isinstance(body, dict) else None
        if not isinstance(key, str):
            raise web.HTTPError(
                400,
                f'Send a JSON object with the notice\'s "key" (a string), not {as_given(body)}.',
            )
        monitor = gpu_monitor.for_handler(self)
        if monitor is None or not monitor.store.dismiss(target.name, key):
            raise web.HTTPError(404, f"{target.name} has no notice {as_given(key)}.")
        self.set_status(204)
        self.finish()


class OwnNoticesHandler(BaseHandler):
    """``GET /hub/gpuhub/notices``: the logged-in user's open notices, as JSON."""

    @web.authenticated
    def get(self) -> None:
        name = self.current_user.name
        monitor = gpu_monitor.for_handler(self)
        found = monitor.store.notices_for(name, shown=True) if monitor is not None else []
        notices: list[dict[str, Any]] = [{**notice_text(n), "reason": n.reason} for n in found]
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        user = self.find_user(name)
        servers = {
            # pending: "spawn", "stop" or null; JupyterLab waits out a stop under way.
            server: {"active": bool(s.active), "ready": bool(s.ready), "pending": s.pending}
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
    (r"/api/gpuhub/notices/([^/]+)", NoticesHandler),
    (r"/api/gpuhub/notices/([^/]+)/dismiss", DismissHandler),
    (r"/gpuhub/notices", OwnNoticesHandler),
]
