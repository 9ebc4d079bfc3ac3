"""The lab's own-bookings answer (gpuhub_lab.bookings), asked of a real JupyterHub with
bookings, as a user's server asks it: with a token scoped like the server's own. The user
sees their bookings and their group's, soonest first, never another's, even as a fleet admin;
a plain server (no hub) says so."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from gpuhub_lab.bookings import HubBookings, own_bookings
from harness.hub.process import Hub, start_hub
from tests.support.hub.bookings import CONFIG

pytestmark = pytest.mark.e2e

USERS = ("ann", "bob", "root")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("lab-bookings"), CONFIG)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}", json={"admin": name == "root"})
        hub.api("POST", "/groups/staff")
        hub.api("POST", "/groups/staff/users", json={"users": ["ann", "bob"]})
        yield hub
    finally:
        hub.stop()


def at(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat(timespec="seconds")


def token(hub: Hub, user: str, scopes: list[str] | None = None) -> str:
    body: dict[str, Any] = {"note": "lab bookings"}
    if scopes is not None:
        body["scopes"] = scopes
    answer = hub.api("POST", f"/users/{user}/tokens", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def book(hub: Hub, user: str, start: float, end: float, **fields: Any) -> dict[str, Any]:
    answer = requests.post(
        f"{hub.api_url}/gpuhub/bookings",
        headers={"Authorization": f"token {token(hub, user)}"},
        json={"gpu_type": "sim", "gpus": 1, "start": at(start), "end": at(end), **fields},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def lab_of(hub: Hub, user: str, groups: list[str]) -> HubBookings:
    """What the user's server would build: its environment, its token's scopes."""
    scopes = [f"users:activity!user={user}", f"access:servers!server={user}/"]
    return HubBookings(
        {
            "JUPYTERHUB_API_URL": hub.api_url,
            "JUPYTERHUB_API_TOKEN": token(hub, user, scopes),
            "JUPYTERHUB_USER": user,
            "JUPYTERHUB_BASE_URL": "/",
            "GPUHUB_GROUPS": json.dumps(groups),
        }
    )


def test_a_server_sees_its_users_bookings_and_their_groups_only(hub: Hub) -> None:
    later = book(hub, "ann", 5 * 3600, 6 * 3600, reason="paper deadline")
    group = book(hub, "root", 2 * 3600, 3 * 3600, **{"for": {"group": "staff"}})
    other = book(hub, "bob", 3600, 7200)

    ann = asyncio.run(lab_of(hub, "ann", ["staff"]).get())
    assert ann["available"] is True and ann["reason"] is None
    assert ann["book_url"] == "/hub/home"
    assert [b["id"] for b in ann["bookings"]] == [group["id"], later["id"]]
    assert ann["bookings"][1]["reason"] == "paper deadline"
    assert ann["bookings"][0]["for"] == {"group": "staff"}

    bob = asyncio.run(lab_of(hub, "bob", ["staff"]).get())
    assert [b["id"] for b in bob["bookings"]] == [other["id"], group["id"]]
    # A fleet admin reads every name on the hub, yet their lab shows only their own.
    root = asyncio.run(lab_of(hub, "root", []).get())
    assert root["available"] is True and root["bookings"] == []


def test_outside_a_hub_it_says_there_is_none() -> None:
    answer = asyncio.run(HubBookings({}).get())
    assert answer == {
        "available": False,
        "reason": "This server was not started by JupyterHub: no hub to ask.",
        "book_url": None,
        "bookings": [],
    }


def test_only_bookings_named_for_the_user_or_their_groups_are_kept() -> None:
    bookings = [
        {"id": "a", "for": {"user": "ann"}},
        {"id": "b", "for": {"group": "staff"}},
        {"id": "c", "for": {"group": "class"}},
        {"id": "d"},  # another's, its names withheld
        {"id": "e", "for": {"user": "bob"}},
        "junk",
    ]
    assert [b["id"] for b in own_bookings(bookings, "ann", {"staff"})] == ["a", "b"]
    assert own_bookings({"not": "a list"}, "ann", {"staff"}) == []
