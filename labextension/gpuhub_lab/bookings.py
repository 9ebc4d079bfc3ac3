"""``GET /gpuhub/api/bookings``: this user's own GPU bookings not yet ended, soonest first.

Response::

    {"available": bool, "reason": str|null, "book_url": str|null,
     "bookings": [{"id", "gpu_type", "gpu_type_name", "gpus", "start", "end",
                   "for": {"user": name} | {"group": name}, "booked_by", "reason"}]}

The hub's bookings (``GET /hub/api/gpuhub/bookings``, docs/architecture.md "When, not only
where") list every booking not yet ended; this keeps only those for this user or one of their
groups (``GPUHUB_GROUPS``, set by the spawner), so the sidebar's card shows the user's next
booking and never another's, even to a fleet admin. ``book_url`` is where to book: the hub's
home page and its calendar. Asked with this server's own ``JUPYTERHUB_API_TOKEN``, like the
holdings (:mod:`gpuhub_lab.holdings`); one answer is shared for a few seconds, so many polling
tabs cost one hub request per period. Outside JupyterHub the answer says there is no hub.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Collection, Mapping
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from gpuhub.core.hub_client import HubClient, HubUnreachable
from gpuhub.jobs.policy_env import read_policy_env
from gpuhub_lab.hub_answer import SharedHubAnswer

SETTINGS_KEY = "gpuhub_bookings"
TTL = 15.0  # seconds an answer is shared: bookings change seldom


def _unavailable(reason: str, book_url: str | None = None) -> dict[str, Any]:
    return {"available": False, "reason": reason, "book_url": book_url, "bookings": []}


def own_bookings(bookings: object, user: str, groups: Collection[str]) -> list[dict[str, Any]]:
    """The bookings (the hub's JSON) for ``user`` or one of ``groups``, in the hub's order
    (soonest first). Those the hub names no one for (another's, to this user) are left out."""
    mine = []
    for booking in bookings if isinstance(bookings, list) else []:
        if not isinstance(booking, dict):
            continue
        whom = booking.get("for")
        if not isinstance(whom, dict):
            continue
        if whom.get("user") == user or (whom.get("group") and whom.get("group") in groups):
            mine.append(booking)
    return mine


def _groups(environ: Mapping[str, str]) -> frozenset[str]:
    """The user's groups as the spawner wrote them; none when they cannot be read."""
    try:
        return frozenset(read_policy_env(environ)[1])
    except ValueError:
        return frozenset()


class HubBookings(SharedHubAnswer):
    """Asks the hub's bookings, at most once per ``ttl``, whatever the number of callers."""

    def __init__(self, environ: Mapping[str, str] | None = None, ttl: float = TTL) -> None:
        env = os.environ if environ is None else environ
        hub = HubClient.from_env(env)
        self.user = hub.user if hub is not None else ""
        # The bookings endpoint is the hub's, not one user's: no user in its path.
        super().__init__(None if hub is None else dataclasses.replace(hub, user=""), ttl)
        self.groups = _groups(env)
        base = env.get("JUPYTERHUB_BASE_URL") or "/"
        self.book_url = url_path_join(base, "hub/home") if hub is not None else None

    def _unavailable(self, reason: str) -> dict[str, Any]:
        return _unavailable(reason, self.book_url)

    async def _ask(self, hub: HubClient) -> dict[str, Any]:
        try:
            response = await hub.call("GET", "bookings")
        except HubUnreachable:
            return _unavailable(
                "The hub did not answer; your bookings are shown again soon.", self.book_url
            )
        if response.code == 404:
            return _unavailable("This hub takes no GPU bookings.")
        data = response.json()
        if response.code != 200 or not isinstance(data, dict):
            return _unavailable("The hub cannot say what you booked right now.", self.book_url)
        return {
            "available": True,
            "reason": None,
            "book_url": self.book_url,
            "bookings": own_bookings(data.get("bookings"), self.user, self.groups),
        }


class BookingsHandler(APIHandler):
    auth_resource = "gpuhub"  # Jupyter's authorizer decides who may read it

    @web.authenticated
    @authorized
    async def get(self) -> None:
        source: HubBookings = self.settings[SETTINGS_KEY]
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(await source.get()))


def setup_bookings(server_app: Any) -> None:
    web_app = server_app.web_app
    web_app.settings[SETTINGS_KEY] = HubBookings()
    route = url_path_join(web_app.settings["base_url"], "gpuhub/api/bookings")
    web_app.add_handlers(".*$", [(route, BookingsHandler)])
