"""What gpuhub's hub endpoints share: who may do what (its scopes and the one check of them),
and how much of what a caller sent is taken and said back.

* **gpuhub's scopes** (registered by :func:`gpuhub.hub.web.api.configure_hub`):
  :data:`GRANTS_SCOPE` (the jobs service asks for quota grants), :data:`FLEET_SCOPE` (see
  every GPU holder, stop and cancel theirs) and :data:`BUDGETS_SCOPE` (grant extra GPU-hours,
  as JupyterHub admins may: :data:`WHO_MAY_GRANT`). An API handler states who may call it
  with :meth:`GpuhubAPIHandler.require_scope` or :meth:`GpuhubAPIHandler.require_access`;
  a page asks :func:`may_see_all` and :func:`may_grant`.

* **Access to a user's servers** (:data:`SERVER_ACCESS_SCOPES`, JupyterHub's own scopes with
  their filters): the user's session and full tokens, their server's own token, admins;
  never another user's access to one server its owner shared with them. A
  token with identify scopes only (``read:users:name``, what OAuth gives every service a user
  logs in to) reaches nothing here: not their holdings, notices, reclaim clocks, "Keep my
  GPUs", nor closing their notices.
* **Bounded input and answers**: a body over :data:`MAX_BODY` bytes is refused (413) before
  it is parsed, and a refusal quotes what it was given as every refusal does, cut short
  (:func:`gpuhub.core.options.as_given`), so nobody gets a megabyte said back to them.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import check_scope_filter
from tornado import web

from gpuhub.core.options import as_given
from gpuhub.hub.ledger.capacity import FIRST_SYNC_WAIT
from gpuhub.hub.ledger.ledger import Ledger

GRANTS_SCOPE = "custom:gpuhub:grants"
FLEET_SCOPE = "custom:gpuhub:fleet"
# Extra GPU-hours of users' budgets (``POST /hub/api/gpuhub/budgets/<user>/grants`` and the
# fleet page's form): JupyterHub admins (``admin:users``) and holders of this scope.
BUDGETS_SCOPE = "custom:gpuhub:budgets"
WHO_MAY_GRANT = f"JupyterHub admins and holders of the scope {BUDGETS_SCOPE}"
SERVER_ACCESS_SCOPES = ("access:servers", "servers")
# Bytes of JSON any gpuhub endpoint takes: its bodies are a handful of short fields.
MAX_BODY = 16 * 1024


class BoundedAPIHandler(APIHandler):
    """JupyterHub's API handler with gpuhub's bounds and access checks."""

    async def prepare(self) -> None:
        await super().prepare()
        size = len(self.request.body or b"")
        if size > MAX_BODY:
            raise web.HTTPError(
                413,
                f"The request body is {size} bytes; gpuhub's endpoints take a JSON object of "
                f"at most {MAX_BODY} bytes.",
            )

    def reaches_servers_of(self, user: Any) -> bool:
        """Whether this request reaches ``user``'s GPU facts, which are user-wide (holdings
        with the budget and its grant reasons, notices, idle clocks, closing notices):
        access to all of the user's servers (``access:servers!user=``, admins), or a token
        of the user's own that reaches one of their servers (their server's own
        ``access:servers!server=user/name``). Access to one server that its owner shared
        (JupyterHub's sharing gives another user ``access:servers!server=bob/x``) reaches
        that server, never its owner's facts."""
        for scope in SERVER_ACCESS_SCOPES:
            found = self.parsed_scopes.get(scope)
            if found is None:
                continue
            if check_scope_filter(found, user, "user"):
                return True
            prefix = f"{user.name}/"
            if (
                isinstance(found, dict)
                and any(s.startswith(prefix) for s in found.get("server", ()))
                and self._is_user(user)
            ):
                return True  # the user's own server's token
        return False

    def _is_user(self, user: Any) -> bool:
        """Whether the caller is ``user`` themselves (not another user, nor a service)."""
        caller = self.current_user
        return getattr(caller, "kind", "") == "user" and getattr(caller, "name", None) == user.name

    def identifies_only(self, caller: Any, name: str) -> bool:
        """Whether the caller is ``name`` themselves, with a token that lacks access to
        their servers (it says so, rather than "someone else's")."""
        return getattr(caller, "kind", "") == "user" and caller.name == name


class GpuhubAPIHandler(BoundedAPIHandler):
    """What gpuhub's hub endpoints share: only their own methods (others answer 405 before
    anything else), 403 without credentials, the one scope check, bodies of at most
    ``MAX_BODY`` bytes, and one-sentence JSON errors that quote what was sent cut short."""

    SUPPORTED_METHODS: tuple[str, ...] = ("OPTIONS",)

    def _fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish(json.dumps({"status": status, "message": message}))

    def require_caller(self) -> Any:
        """The caller; 403 without credentials."""
        caller = self.current_user
        if caller is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        return caller

    def require_scope(self, scope: str) -> Any:
        """The caller, who must hold ``scope`` (403 saying which otherwise)."""
        caller = self.require_caller()
        if scope not in self.expanded_scopes:
            raise web.HTTPError(403, f"This token lacks the {scope} scope.")
        return caller

    def require_access(
        self, name: str, doing: str, others: web.HTTPError, scope: str | None = None
    ) -> Any:
        """The caller, who must reach ``name``'s GPU facts (:meth:`reaches_servers_of`) or
        hold ``scope``: else 403 saying the missing scope when it is ``name``'s own token
        that only identifies them (``doing``: what it needs access for), ``others``
        when it is someone else."""
        caller = self.require_caller()
        if scope is not None and scope in self.expanded_scopes:
            return caller
        target = self.find_user(name)
        if target is not None and self.reaches_servers_of(target):
            return caller
        if self.identifies_only(caller, name):
            raise web.HTTPError(
                403,
                f"This token only identifies {name}; {doing} needs access to their servers "
                f"(scope access:servers!user={name}).",
            )
        raise others

    def require_holder_access(self, name: str) -> Any:
        """The caller, who reaches ``name``'s servers or is a GPU fleet admin: who may read
        or keep a user's GPUs (their idle clocks, "Keep my GPUs", their notices)."""
        return self.require_access(
            name,
            "reading or keeping their GPUs",
            web.HTTPError(403, f"Only {name} and GPU fleet admins may see this."),
            scope=FLEET_SCOPE,
        )

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


def may_see_all(handler: BaseHandler) -> bool:
    """Whether ``handler``'s caller sees every GPU holder (and may stop or cancel theirs):
    JupyterHub admins and holders of :data:`FLEET_SCOPE`."""
    user = handler.current_user
    return bool(getattr(user, "admin", False)) or FLEET_SCOPE in handler.expanded_scopes


def may_grant(handler: BaseHandler, user: Any = None) -> bool:
    """Whether ``handler``'s caller may grant extra GPU-hours (to ``user``, a hub user;
    None: to anyone at all): :data:`WHO_MAY_GRANT`."""
    if BUDGETS_SCOPE in handler.expanded_scopes:
        return True
    if user is None:
        return "admin:users" in handler.parsed_scopes
    orm_user = getattr(user, "orm_user", user)
    return bool(handler.get_scope_filter("admin:users")(orm_user, kind="user"))
