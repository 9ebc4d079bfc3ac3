"""GPU bookings through a real JupyterHub on a workstation with two simulated GPUs, over REST.

The rules and every refusal (400, 403, 404, 409, each with its sentence), names only for
those who may read them, a booking kept over a hub restart; and the line: with both GPUs
held and eve waiting, a booking for the class warns the newest holder, stops it at the
start with the booking named, and a member of the class gets the freed GPU at once, ahead
of eve.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from harness.hub.process import Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.bookings import CONFIG
from tests.support.wait import hub_until

pytestmark = pytest.mark.e2e

USERS = ("ann", "bob", "carol", "dave", "eve", "root")
GROUPS = {"staff": ["ann"], "class": ["dave"]}


class Hubs:
    """The hub under test, which the restart test replaces, and each user's token."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.tokens: dict[str, str] = {}

    def token(self, user: str) -> str:
        if user not in self.tokens:
            answer = self.hub.api("POST", f"/users/{user}/tokens", json={"note": "bookings"})
            assert answer.status_code == 201, answer.text
            self.tokens[user] = answer.json()["token"]
        return self.tokens[user]

    def call(
        self, user: str | None, method: str, path: str = "", **kwargs: Any
    ) -> requests.Response:
        headers = {"Authorization": f"token {self.token(user)}"} if user else {}
        return requests.request(
            method,
            f"{self.hub.api_url}/gpuhub/bookings{path}",
            headers=headers,
            timeout=30,
            **kwargs,
        )


@pytest.fixture(scope="module")
def hubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hubs]:
    workdir = tmp_path_factory.mktemp("bookings-hub")
    hubs = Hubs(start_hub(workdir, CONFIG))
    try:
        for name in USERS:
            hubs.hub.api("POST", f"/users/{name}", json={"admin": name == "root"})
        for group, members in GROUPS.items():
            hubs.hub.api("POST", f"/groups/{group}")
            hubs.hub.api("POST", f"/groups/{group}/users", json={"users": members})
        yield hubs
    finally:
        for name in USERS:
            hubs.hub.api("DELETE", f"/users/{name}/server")
        hubs.hub.stop()


def at(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat(timespec="seconds")


def body(**fields: Any) -> dict[str, Any]:
    return {"gpu_type": "sim", "gpus": 1, "start": at(3600), "end": at(5400), **fields}


def refused(answer: requests.Response, status: int, said: str) -> None:
    assert answer.status_code == status, answer.text
    assert said in answer.json()["message"], answer.json()["message"]


def test_rules_refusals_names_and_a_restart(hubs: Hubs, tmp_path_factory: Any) -> None:
    made = hubs.call("ann", "POST", json=body(reason="paper deadline"))
    assert made.status_code == 201, made.text
    mine = made.json()
    assert mine["for"] == {"user": "ann"} and mine["booked_by"] == "ann" and mine["id"]
    # Everyone signed in sees what is booked when; names and reasons only ann and admins.
    seen = {user: hubs.call(user, "GET").json()["bookings"] for user in ("ann", "bob", "root")}
    assert seen["ann"] == seen["root"] == [mine]
    assert seen["bob"] == [
        {k: mine[k] for k in ("id", "gpu_type", "gpu_type_name", "gpus", "start", "end")}
    ]
    refused(hubs.call(None, "GET"), 403, "Sign in")
    # Bad input: one sentence naming the field, what it should be and what it was.
    refused(hubs.call("ann", "POST", data=b"{nope"), 400, "Send a JSON object")
    refused(hubs.call("ann", "POST", json=body(colour="red")), 400, 'Unknown field "colour"')
    refused(
        hubs.call("ann", "POST", json=body(gpus=0)),
        400,
        "gpus must be a whole number of 1 or more, not 0.",
    )
    refused(
        hubs.call("ann", "POST", json=body(gpu_type="a100")),
        400,
        'gpu_type must be one of this hub\'s GPU types ("sim"), not "a100".',
    )
    refused(
        hubs.call("ann", "POST", json=body(start="2026-12-01T10:00")),
        400,
        "start must be an ISO-8601 time with its zone",
    )
    refused(hubs.call("ann", "POST", json=body(end=at(1800))), 400, "end must come after start")
    refused(
        hubs.call("ann", "POST", json=body(start=at(-600))), 400, "start must not lie in the past"
    )
    refused(hubs.call("ann", "POST", json=body(end=at(3600 * 4))), 400, "at most 2 hours")
    refused(
        hubs.call("ann", "POST", json=body(gpus=2)),
        400,
        "gpus must be at most 1 under your group's booking rule; given 2.",
    )
    # What the sender may not book: 403.
    refused(
        hubs.call("bob", "POST", json=body()),
        403,
        "You are in no group that may book GPUs (groups with a booking rule: staff).",
    )
    refused(
        hubs.call("ann", "POST", json=body(**{"for": {"user": "bob"}})),
        403,
        'You may book only for yourself, not for "bob".',
    )
    refused(
        hubs.call("ann", "POST", json=body(**{"for": {"group": "staff"}})),
        403,
        "Only fleet admins may book for a group",
    )
    refused(hubs.call(None, "POST", json=body()), 403, "Sign in")
    # A conflict: the class wants both GPUs while ann has one; 409 names what is in the way.
    both = body(gpus=2, **{"for": {"group": "class"}})
    answer = hubs.call("root", "POST", json=both)
    refused(
        answer,
        409,
        "Only 1 of 2 Simulated GPUs can still be booked then: 1 Simulated GPU booked for ann from ",
    )
    # An admin service (JupyterHub's admin role) books for a group too, and cancels it.
    by_service = hubs.hub.api(
        "POST",
        "/gpuhub/bookings",
        json=body(start=at(7200), end=at(9000), **{"for": {"group": "class"}}),
    )
    assert by_service.status_code == 201, by_service.text
    assert by_service.json()["for"] == {"group": "class"}
    assert hubs.hub.api("DELETE", f"/gpuhub/bookings/{by_service.json()['id']}").status_code == 204
    # Cancelling: another's 403, unknown 404.
    refused(hubs.call("bob", "DELETE", f"/{mine['id']}"), 403, "Only whoever made booking")
    refused(hubs.call("ann", "DELETE", "/b-nothere"), 404, 'There is no booking "b-nothere".')
    # The booking outlives the hub.
    hub = hubs.hub
    hub.stop()
    hubs.hub = start_hub(hub.workdir, CONFIG, port=hub.port)
    assert hubs.call("root", "GET").json()["bookings"] == [mine]
    assert hubs.call("ann", "DELETE", f"/{mine['id']}").status_code == 204
    assert hubs.call("root", "GET").json()["bookings"] == []


def notices(hubs: Hubs, user: str) -> list[dict[str, Any]]:
    answer = hubs.hub.api("GET", f"/gpuhub/notices/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()["notices"]


def pending(hubs: Hubs, user: str) -> bool:
    return (hubs.hub.user_model(user)["servers"].get("") or {}).get("pending") == "spawn"


def test_the_class_gets_the_booked_gpu_at_once_ahead_of_an_earlier_waiter(hubs: Hubs) -> None:
    hub = hubs.hub
    for user in ("bob", "carol"):  # both GPUs held, carol's the newer
        assert spawn(hub, user, {"gpus": 1}).status_code in (201, 202)
        wait_ready(hub, user)
    assert spawn(hub, "eve", {"gpus": 1}).status_code == 202  # eve waits in line
    hub_until("eve waits", lambda: pending(hubs, "eve"), hub)
    # The class books one GPU from a few seconds from now: carol is warned, then stopped.
    starts = time.time() + 20
    made = hubs.call(
        "root", "POST", json=body(start=at(20), end=at(1800), **{"for": {"group": "class"}})
    )
    assert made.status_code == 201, made.text
    booking = made.json()["id"]
    warned = hub_until(
        "carol is warned",
        lambda: [n for n in notices(hubs, "carol") if n["kind"] == "booking"],
        hub,
    )
    assert booking in warned[0]["text"] and "will be stopped on" in warned[0]["text"]
    # Her holding says when and why it stops, as a reclaim's does: her lab counts down to it
    # and saves her open notebooks before.
    [held] = [h for h in holdings(hubs, "carol") if h["kind"] == "server"]
    assert held["stops_why"] == "booking", held
    assert abs(held["stops_at"] - starts) <= 2, (held["stops_at"], starts)
    assert not [n for n in notices(hubs, "bob") if n["kind"] == "booking"]
    stopped = hub_until(
        "carol is stopped at the start, the booking named",
        lambda: [
            n for n in notices(hubs, "carol") if n["by"] == "booking" and n["kind"] == "server"
        ],
        hub,
    )
    assert f"(booking {booking})" in stopped[0]["text"], stopped[0]["text"]
    assert "is booked from" in stopped[0]["text"]
    assert not [n for n in notices(hubs, "carol") if n["kind"] == "booking"]  # the warning went
    # The freed GPU is the class's: eve, who came first, waits on; dave gets it at once.
    assert pending(hubs, "eve")
    assert spawn(hub, "dave", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "dave")
    assert pending(hubs, "eve"), hub.user_model("eve")
    # ann books one for herself from a little later and asks now: her wait starts by her
    # booking's start at the latest, and then she passes eve too (bob makes way).
    start = time.time() + 40
    own = hubs.call("ann", "POST", json=body(start=at(40), end=at(3600)))
    assert own.status_code == 201, own.text
    assert spawn(hub, "ann", {"gpus": 1}).status_code == 202
    estimate = hub_until("ann's wait is estimated", lambda: waiting_estimate(hubs, "ann"), hub)
    latest = datetime.fromisoformat(estimate["latest"]).timestamp()
    assert start - 2 <= latest <= start + 120, estimate
    assert "your booking from" in estimate["because"][-1], estimate
    wait_ready(hub, "ann", timeout=150)
    assert [n for n in notices(hubs, "bob") if n["by"] == "booking" and n["kind"] == "server"]
    assert pending(hubs, "eve"), hub.user_model("eve")
    # With the bookings cancelled, eve is next as ever.
    for user, made_id in (("root", booking), ("ann", own.json()["id"])):
        assert hubs.call(user, "DELETE", f"/{made_id}").status_code == 204
    stop(hub, "dave")
    wait_ready(hub, "eve")


def holdings(hubs: Hubs, user: str) -> list[dict[str, Any]]:
    answer = hubs.hub.api("GET", f"/gpuhub/holdings/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()["holdings"]


def waiting_estimate(hubs: Hubs, user: str) -> dict[str, Any] | None:
    for holding in holdings(hubs, user):
        if holding.get("waiting") and holding.get("estimate"):
            return holding["estimate"]
    return None
