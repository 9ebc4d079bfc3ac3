"""Extra GPU-hours an admin grants, with a reason the user reads.

* ``POST /hub/api/gpuhub/budgets/<user>/grants`` body ``{"hours": 5, "reason": "thesis
  deadline", "group": "staff"?}`` -> ``201`` the user's budget as the holdings answer says it
  (``budgets[0]``). JupyterHub admins (scope ``admin:users`` for that user) and holders of
  ``custom:gpuhub:budgets`` (:data:`gpuhub.hub.web.access.WHO_MAY_GRANT`). ``group``,
  when given, must name the shared pool the user draws on (a check, not a choice).
* ``POST /hub/gpuhub/fleet/grant`` (the fleet page's form, with JupyterHub's XSRF token):
  the same, for an admin in the browser.

Both take the body through :func:`grant_body` and grant through
:meth:`gpuhub.hub.monitor.gpu_monitor.GPUMonitor.grant_hours`: the hours count for the
budget's current period, show in its ``grants`` and reach the user as a notice.
"""

from __future__ import annotations

import json
from typing import Any

from tornado import web

from gpuhub.core.budgets import hours_words
from gpuhub.core.options import as_given, json_number
from gpuhub.hub.monitor import gpu_monitor
from gpuhub.hub.web.access import WHO_MAY_GRANT, BoundedAPIHandler, may_grant
from gpuhub.hub.web.fleet import render_fleet
from gpuhub.hub.web.fleet_actions import MAX_REASON, ActionHandler, Refused

MAX_HOURS = 100_000.0


def grant_body(hours: Any, reason: Any, group: Any) -> tuple[float, str, str]:
    """``(hours, reason, group)`` checked: one sentence naming the field otherwise
    (``ValueError(field, sentence)``)."""
    number = json_number(hours)
    if number is None or not 0 < number <= MAX_HOURS:
        raise ValueError(
            "hours",
            f"hours must be a number of GPU-hours above 0 and at most {MAX_HOURS:g}, such as "
            f"5 or 0.5, not {as_given(hours)}.",
        )
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(
            "reason", "Give a reason for the extra GPU-hours: the user reads it in a notice."
        )
    reason = " ".join(reason.split())
    if len(reason) > MAX_REASON:
        raise ValueError(
            "reason", f"reason must be at most {MAX_REASON} characters; this one has {len(reason)}."
        )
    if group is None:
        group = ""
    if not isinstance(group, str) or len(group) > 255:
        raise ValueError("group", f"group must be a group's name, not {as_given(group)}.")
    return number, reason, group


def _form_number(text: str) -> Any:
    """A form's number field as a number; the text itself when it is none (refused, quoted)."""
    try:
        return float(text.strip())
    except ValueError:
        return text


class GrantHoursHandler(BoundedAPIHandler):
    """``POST /hub/api/gpuhub/budgets/<user>/grants`` (see the module docstring)."""

    SUPPORTED_METHODS: tuple[str, ...] = ("POST", "OPTIONS")

    async def post(self, user_name: str) -> None:
        if self.current_user is None:
            raise web.HTTPError(403, "Sign in, or send a token, to grant extra GPU-hours.")
        target = self.find_user(user_name)
        if not (may_grant(self, target) if target is not None else may_grant(self)):
            # Never confirm to someone who may not grant that a user exists.
            raise web.HTTPError(
                403,
                f"Only {WHO_MAY_GRANT} may grant extra GPU-hours; this token's user "
                f"{as_given(self.current_user.name)} is neither.",
            )
        body = self.get_json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(
                400, 'Send a JSON object: {"hours": 5, "reason": "...", "group": "..."}.'
            )
        try:
            hours, reason, group = grant_body(
                body.get("hours"), body.get("reason"), body.get("group")
            )
        except ValueError as exc:
            raise web.HTTPError(400, exc.args[1]) from None
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No user {as_given(user_name)} on this hub.")
        monitor = gpu_monitor.for_handler(self)
        if monitor is None:
            raise web.HTTPError(503, "gpuhub's GPU monitor is not running on this hub yet.")
        try:
            state = monitor.grant_hours(
                user.name,
                [g.name for g in user.groups],
                hours,
                reason,
                self.current_user.name,
                group,
            )
        except ValueError as exc:
            raise web.HTTPError(409 if not group else 400, str(exc)) from None
        self.set_status(201)
        self.finish(json.dumps(state.as_json()))


class FleetGrantHandler(ActionHandler):
    """``POST /hub/gpuhub/fleet/grant`` (form: user, hours, reason): the fleet page's form."""

    @web.authenticated
    async def post(self) -> None:
        try:
            await self.act()
        except Refused as refused:  # the page again, the form as it was sent
            await render_fleet(
                self,
                refused.status,
                error=refused.message,
                error_field=refused.field,
                grant_user=self.get_body_argument("user", "")[:255],
                grant_hours=self.get_body_argument("hours", "")[:40],
                grant_reason=self.get_body_argument("reason", "")[:MAX_REASON],
            )

    async def act(self) -> None:
        user = self.current_user
        if not may_grant(self):
            raise Refused(
                403,
                f"Only {WHO_MAY_GRANT} may grant extra GPU-hours; you ({user.name}) are "
                "neither, so ask one of them.",
                "grant-user",
            )
        monitor = gpu_monitor.for_handler(self)
        if monitor is None:
            raise Refused(503, "gpuhub's GPU monitor is not running on this hub yet.")
        name = self.get_body_argument("user", "").strip()
        try:
            hours, reason, _ = grant_body(
                _form_number(self.get_body_argument("hours", "")),
                self.get_body_argument("reason", ""),
                "",
            )
        except ValueError as exc:
            raise Refused(400, exc.args[1], f"grant-{exc.args[0]}") from None
        target = self.find_user(name) if name else None
        if target is None:
            raise Refused(404, f"No user {as_given(name)} on this hub.", "grant-user")
        if not may_grant(self, target):
            raise Refused(
                403,
                f"You may not grant {target.name} extra GPU-hours: {WHO_MAY_GRANT} may.",
                "grant-user",
            )
        try:
            monitor.grant_hours(
                target.name, [g.name for g in target.groups], hours, reason, user.name
            )
        except ValueError as exc:
            raise Refused(409, str(exc), "grant-user") from None
        await self._done(
            monitor,
            f"Granted {target.name} {hours_words(hours)} extra GPU-hours; they read why in a "
            "notice.",
        )


HANDLERS: list[tuple[str, Any]] = [
    (r"/api/gpuhub/budgets/([^/]+)/grants", GrantHoursHandler),
    (r"/gpuhub/fleet/grant", FleetGrantHandler),
]
