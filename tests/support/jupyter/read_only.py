"""A Jupyter authorizer that lets a user read and nothing more: how an admin gives someone
read-only access to a server (JupyterHub's own authorizer is meant to be replaced so). Set
``c.ServerApp.authorizer_class`` to :class:`ReadOnlyAuthorizer`'s dotted name."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.authorizer import Authorizer

DOTTED = "tests.support.jupyter.read_only.ReadOnlyAuthorizer"


class ReadOnlyAuthorizer(Authorizer):
    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return action == "read"
