"""The fleet page's actions: stop a server (``POST /hub/gpuhub/fleet/stop``) or cancel a job
(``POST /hub/gpuhub/fleet/cancel``), with a reason the user reads.

Who may: the user on their own holdings, GPU fleet admins on anyone's
(:func:`gpuhub.hub.web.access.may_see_all`), with a reason for someone else's. A refusal
keeps the admin on the page (:func:`gpuhub.hub.web.fleet.render_fleet`), its sentence next to
the field it is about, with a 4xx status; what was done comes back as the hub's own sentence
(:data:`gpuhub.hub.web.fleet.OUTCOMES`).
"""

from __future__ import annotations

from typing import Any

from jupyterhub.handlers.base import BaseHandler
from tornado import web

from gpuhub.hub.monitor.gpu_monitor import GPUMonitor
from gpuhub.hub.web.access import may_see_all
from gpuhub.hub.web.fleet import OUTCOMES, fleet_cache, monitor_of, render_fleet

MAX_REASON = 500
MAX_TARGET = 600  # "user/name": JupyterHub's names are far shorter


class Refused(Exception):
    """A fleet action refused: the page says ``message`` (next to ``field`` when it names
    one of the page's fields) with HTTP ``status``."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


class ActionHandler(BaseHandler):
    """The fleet page's actions: a refusal keeps the admin on the fleet page, its sentence
    next to the field it is about (the reason) or above the table, with a 4xx status."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST",)

    async def act(self) -> None:
        raise NotImplementedError

    @web.authenticated
    async def post(self) -> None:
        try:
            await self.act()
        except Refused as refused:
            await render_fleet(
                self,
                refused.status,
                error=refused.message,
                error_field=refused.field,
                reason=self.get_body_argument("reason", "")[:MAX_REASON],
                target=self.get_body_argument("target", ""),
            )

    def render_template(self, name: str, sync: bool = False, **ns: Any) -> Any:
        if name == "404.html":  # JupyterHub's 404 page shows no message; ours is the point
            name = "error.html"
        return super().render_template(name, sync=sync, **ns)

    def _given_target(self) -> tuple[str, str, str]:
        """The row's button sends "user/name" (neither may contain a slash in JupyterHub);
        refusals quote it, so one longer than any holder's is refused unquoted."""
        target = self.get_body_argument("target", "")
        if len(target) > MAX_TARGET:
            raise Refused(
                400,
                f"target must name a holder as user/name, at most {MAX_TARGET} characters; "
                f"this one has {len(target)}.",
            )
        name, slash, item = target.partition("/")
        return name, slash, item

    def _given_reason(self, own: bool, what: str) -> str:
        """The reason given, or the refusal when another user's holding is stopped without."""
        reason = " ".join(self.get_body_argument("reason", "").split())[:MAX_REASON]
        if not own and not reason:
            raise Refused(
                400,
                f"Give a reason in the Reason field to {what}: they read it on their next "
                "visit to the hub.",
                "reason",
            )
        return reason

    async def _done(self, monitor: GPUMonitor, said: str) -> None:
        """Back to the page, once it shows the action's effect; the page says ``said`` to
        this admin alone (the link carries a token, never the text)."""
        await fleet_cache(monitor, self).up_to_date()
        done = OUTCOMES.record(self.current_user.name, said)
        self.redirect(f"{self.hub.base_url}gpuhub/fleet?done={done}", status=303)


class FleetStopHandler(ActionHandler):
    """``POST /hub/gpuhub/fleet/stop`` (form: target "user/server", reason): stop a server."""

    async def act(self) -> None:
        monitor = monitor_of(self)
        if monitor is None:
            raise Refused(503, "gpuhub's GPU monitor is not running on this hub yet.")
        name, _, server = self._given_target()
        own = name == self.current_user.name
        if not own and not may_see_all(self):
            raise Refused(403, "Only GPU fleet admins may stop other users' servers.")
        label = f"server {server!r}" if server else "server"
        reason = self._given_reason(own, f"stop {name}'s {label}")
        user = self.find_user(name)
        if user is None or server not in user.spawners or not user.spawners[server].active:
            raise Refused(404, f"{name} has no running server {server!r}.")
        why = reason or "you stopped it from the fleet page"
        stopped = await monitor.stop_server(
            user, server, why, by=self.current_user.name, notify=not own
        )
        if not stopped:
            raise Refused(409, "That server is starting or stopping already; try again.")
        whose = "your" if own else f"{name}'s"
        told = "" if own else "; they will read why on their next visit"
        await self._done(monitor, f"Stopped {whose} server {server or 'default'!r}{told}.")


class FleetCancelHandler(ActionHandler):
    """``POST /hub/gpuhub/fleet/cancel`` (form: target "user/job", reason): cancel a GPU job
    (:meth:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor.cancel_job`). The same rights and checks as stopping a
    server: the user's own job, or anyone's for fleet admins, with a reason."""

    async def act(self) -> None:
        from gpuhub.hub.monitor.cancel import CancelRefused

        monitor = monitor_of(self)
        if monitor is None:
            raise Refused(503, "gpuhub's GPU monitor is not running on this hub yet.")
        name, slash, job = self._given_target()
        if not name or not slash or "/" in job:  # a workstation's job hold may be named ""
            raise Refused(400, "target must name a job as user/job.")
        own = name == self.current_user.name
        if not own and not may_see_all(self):
            raise Refused(403, "Only GPU fleet admins may cancel other users' jobs.")
        reason = self._given_reason(own, f"cancel {name}'s job {job!r}")
        why = reason or "you cancelled it from the fleet page"
        track = monitor.tracks.get((name, "job", job))
        holding = track.holding if track is not None else monitor.waiting.get((name, "job", job))
        what = holding.label if holding is not None else f"job {job!r}"
        try:
            await monitor.cancel_job(name, job, why, by=self.current_user.name)
        except CancelRefused as exc:
            raise Refused(exc.status, exc.message) from None
        whose = "your" if own else f"{name}'s"
        told = "" if own else "; they will read why on their next visit"
        await self._done(monitor, f"Cancelled {whose} {what}{told}.")


HANDLERS: list[tuple[str, Any]] = [
    (r"/gpuhub/fleet/stop", FleetStopHandler),
    (r"/gpuhub/fleet/cancel", FleetCancelHandler),
]
