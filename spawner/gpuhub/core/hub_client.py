"""The one client of the hub's gpuhub API (``/hub/api/gpuhub``, :mod:`gpuhub.hub.web.api`)
from a user's server or a job: the address and the token come from the environment JupyterHub
gives every server (``JUPYTERHUB_API_URL``, ``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_USER``,
``JUPYTERHUB_SERVER_NAME``).

:class:`HubClient` builds the per-user URLs (``/hub/api/gpuhub/<endpoint>/<user>[/...]``), sends
the server's own token, and reads the JSON answers: blocking (urllib, for threads and magics) or
on the event loop (tornado, for the lab's handlers). Either raises :class:`HubUnreachable` when
the hub does not answer at all; an answer with any status is returned as it is.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

log = logging.getLogger("gpuhub.core.hub_client")

TIMEOUT = 10.0  # seconds a call waits for the hub, unless told otherwise


class HubUnreachable(OSError):
    """The hub did not answer (refused, timed out, a broken connection); the message says how."""


@dataclass(frozen=True)
class HubAnswer:
    """The hub's answer: its status and body."""

    code: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON; None when there is none or it is not JSON."""
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


@dataclass(frozen=True)
class HubClient:
    """The hub's gpuhub API as one user's server calls it, with that server's token."""

    api_url: str  # JUPYTERHUB_API_URL, without a trailing "/"
    token: str
    user: str = ""  # whose server calls ("": a service, whose calls name no one user)
    server: str = ""  # this server's name ("" for the default server)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HubClient | None:
        """The client of the server whose environment this is; None outside JupyterHub (no
        hub address, token or user to ask with)."""
        env = os.environ if environ is None else environ
        api, token, user = (
            env.get("JUPYTERHUB_API_URL"),
            env.get("JUPYTERHUB_API_TOKEN"),
            env.get("JUPYTERHUB_USER"),
        )
        if not (api and token and user):
            return None
        return cls(api.rstrip("/"), token, user, env.get("JUPYTERHUB_SERVER_NAME", ""))

    def url(self, endpoint: str, *rest: str) -> str:
        """``<api>/gpuhub/<endpoint>/<user>[/<rest>...]``, each part quoted: every gpuhub
        endpoint a server calls is about its own user (a client without a user leaves it
        out)."""
        parts = (self.user, *rest) if self.user else rest
        return "/".join((self.api_url, "gpuhub", endpoint, *(quote(p, safe="") for p in parts)))

    def _headers(self, body: object) -> dict[str, str]:
        headers = {"Authorization": f"token {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def get_json(self, endpoint: str, *rest: str, timeout: float = TIMEOUT) -> Any:
        """``GET`` an endpoint and return its JSON. Blocking: call it in a thread. Raises
        ``OSError`` (an HTTP error status too) or ``ValueError`` (an answer that is not JSON)."""
        import urllib.request

        request = urllib.request.Request(self.url(endpoint, *rest), headers=self._headers(None))
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())

    async def call(
        self,
        method: str,
        endpoint: str,
        *rest: str,
        body: object = None,
        timeout: float = TIMEOUT,
    ) -> HubAnswer:
        """Call an endpoint on the event loop (``body`` is sent as JSON). Raises
        :class:`HubUnreachable` when the hub does not answer."""
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

        request = HTTPRequest(
            self.url(endpoint, *rest),
            method=method,
            headers=self._headers(body),
            body=None if body is None else json.dumps(body),
            request_timeout=timeout,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as exc:
            raise HubUnreachable(str(exc)) from exc
        return HubAnswer(response.code, response.body or b"")


def cancel_notice_for_job(
    job_id: str, environ: dict[str, str] | None = None, timeout: float = 3.0
) -> tuple[str, str] | None:
    """``(admin, reason)`` if the hub says an admin cancelled this server's user's job
    ``job_id`` from the fleet page (``GET /hub/api/gpuhub/notices/<user>`` with the server's
    own token); None otherwise, and when there is no hub to ask or it does not answer.
    Blocking: call it in a thread."""
    hub = HubClient.from_env(environ)
    if hub is None:
        return None
    try:
        data = hub.get_json("notices", timeout=timeout)
    except (OSError, ValueError) as exc:
        log.debug("gpuhub: cannot ask the hub about job %s: %s", job_id, exc)
        return None
    for notice in data.get("notices") or []:
        if notice.get("kind") == "job" and job_id in (notice.get("jobs") or []):
            return str(notice.get("by", "")), str(notice.get("reason", ""))
    return None
