"""What gpuhub's hub API endpoints share: who may reach a user's GPUs, and how much of what a
caller sent is taken and said back.

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

from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import check_scope_filter
from tornado import web

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
