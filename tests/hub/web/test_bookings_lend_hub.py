"""Before a booking starts, its free GPUs are lent only to work gone in time: through a real
JupyterHub on a workstation with two simulated GPUs, over REST.

The class books both GPUs from an hour on. eve's server, which has no set end and would
still hold a GPU then, waits: her holdings say so, with an estimate whose reasons name the
booking's end. dave, of the class, asks after her and gets a GPU at once (the booking's GPUs
are his); once the booking is cancelled, eve is served.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuhub.core.words import clock
from harness.hub.process import Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.bookings import CONFIG
from tests.support.wait import hub_until

pytestmark = pytest.mark.e2e

USERS = ("dave", "eve", "root")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("bookings-lend-hub"), CONFIG)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}", json={"admin": name == "root"})
        hub.api("POST", "/groups/class")
        hub.api("POST", "/groups/class/users", json={"users": ["dave"]})
        yield hub
    finally:
        for name in USERS:
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def at(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def waiting(hub: Hub, user: str) -> dict[str, Any] | None:
    """The user's waiting holding, once the monitor has estimated it."""
    answer = hub.api("GET", f"/gpuhub/holdings/{user}")
    assert answer.status_code == 200, answer.text
    for holding in answer.json()["holdings"]:
        if holding.get("waiting") and holding.get("estimate"):
            return dict(holding)
    return None


def test_a_server_waits_for_gpus_booked_later_and_the_booker_gets_them(hub: Hub) -> None:
    start = round(time.time()) + 3600
    end = start + 1800
    made = hub.api(
        "POST",
        "/gpuhub/bookings",
        json={
            "gpu_type": "sim",
            "gpus": 2,
            "start": at(start),
            "end": at(end),
            "for": {"group": "class"},
            "reason": "class",
        },
    )
    assert made.status_code == 201, made.text
    # Both GPUs are free, but eve's server would still hold one when the class starts.
    assert spawn(hub, "eve", {"gpus": 1}).status_code == 202
    held = hub_until("eve's wait is estimated", lambda: waiting(hub, "eve"), hub)
    estimate = held["estimate"]
    said = " ".join(estimate["because"])
    assert "2 Simulated GPUs are booked from " in said, said
    assert f"so a server waits for them until {clock(end, time.time())}." in said, said
    assert datetime.fromisoformat(estimate["likely"]).timestamp() >= end, estimate
    assert estimate["latest"] is None, estimate  # the class may hold them on after its end
    # dave, of the class, asks after eve and gets a GPU at once: the booking's GPUs are his.
    assert spawn(hub, "dave", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "dave")
    assert waiting(hub, "eve") is not None
    # With the booking cancelled, nothing holds the free GPU back from eve.
    assert hub.api("DELETE", f"/gpuhub/bookings/{made.json()['id']}").status_code == 204
    wait_ready(hub, "eve")
    stop(hub, "dave")
    stop(hub, "eve")
