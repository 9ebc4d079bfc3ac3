"""An estimated start, through a real JupyterHub on a workstation with a simulated GPU.

alice holds the one GPU and leaves it idle; idle reclaim runs on seconds (warned after 3 s,
stopped 5 s later). bob asks for it and waits: his holding in the holdings answer carries an
estimate with its reasons, which name alice's reclaim clock without her name; his spawn
page says it in words, and the form tells carol when the GPU is likely free; he gets the
GPU before the estimate's ``by``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from harness.hub.process import Hub, spawn, start_hub, wait_ready
from tests.support.hub.progress import Progress
from tests.support.wait import hub_until

pytestmark = pytest.mark.e2e

ETA = """
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = "simulated:1"
c.LocalGPUSpawner.gpu_types = {"sim": {"display_name": "Simulated GPU", "devices": [0], "max_gpus": 1}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 1}
c.LocalGPUSpawner.gpu_queue_timeout = 300
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.LocalGPUSpawner.gpu_idle_reclaim = {"after": 3, "utilization_below": 0.05, "warn": 5}
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 2, "default": 0.5}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "4G", "default": "1G"}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
USERS = ("alice", "bob", "carol")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("eta-hub"), ETA)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}")
        yield hub
    finally:
        for name in USERS:
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def waiting_estimate(hub: Hub, user: str) -> dict[str, Any] | None:
    answer = hub.api("GET", f"/gpuhub/holdings/{user}")
    assert answer.status_code == 200, answer.text
    for holding in answer.json()["holdings"]:
        if holding["waiting"] and holding["estimate"]:
            return dict(holding["estimate"])
    return None


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_wait_carries_an_estimate_that_the_reclaim_clock_pulls_in(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "sim"}).status_code in (201, 202)
    wait_ready(hub, "alice")
    assert spawn(hub, "bob", {"gpus": 1, "gpu_type": "sim"}).status_code == 202
    asked = time.time()

    # alice's idle clock runs: bob's estimate names it, and it says when.
    def from_the_clock() -> dict[str, Any] | None:
        found = waiting_estimate(hub, "bob")
        if found and any("idle" in s for s in found["because"]):
            return found
        return None

    estimate = hub_until("bob's estimate names alice's idle GPU", from_the_clock, hub)
    assert "You are first in line for 1 Simulated GPU." in estimate["because"]
    assert all("alice" not in s for s in estimate["because"])
    likely, by = epoch(estimate["likely"]), epoch(estimate["by"])
    assert asked <= likely <= by <= asked + 3 + 5 + 60  # the clock, not a 2-hour guess
    assert estimate["latest"] is None  # an idle holder may be busy again: nothing is certain
    assert any("No later time is certain" in s for s in estimate["because"])

    bob = Progress(hub, "bob")
    hub_until("bob's page says when", lambda: bob.said("Likely to start around "), hub)
    # The form says when the type likely has a GPU free again, to someone who has not asked.
    page = hub.login("carol").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert re.search(r"0 of 1 free now; 1 person waiting; likely free around \d\d:\d\d UTC", page)

    wait_ready(hub, "bob")
    # Once held, the holding carries no estimate; it started (got the GPU) before ``by``.
    held = hub.api("GET", "/gpuhub/holdings/bob").json()["holdings"]
    assert held and all(h["estimate"] is None for h in held)
    assert held[0]["since"] <= by, f"bob got the GPU after the estimate's by {estimate['by']}"
