"""A waiting server's estimated start, as the lab's holdings proxy (gpuhub_lab.holdings)
gives it from a real JupyterHub on a workstation with two simulated GPUs: bob holds both,
alice waits in line; her server's view of the hub (a token scoped like a server's) carries
the hub's estimate and, in ``estimate_text``, the very sentence her spawn page says."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from gpuhub_lab.holdings import HubHoldings
from harness.hub.process import Hub, spawn, start_hub, wait_ready
from tests.support.hub.progress import Progress
from tests.support.wait import hub_until

pytestmark = pytest.mark.e2e

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = "simulated:2"
c.LocalGPUSpawner.gpu_types = {"sim": {"display_name": "Simulated GPU", "devices": [0, 1], "max_gpus": 2}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 2}
c.LocalGPUSpawner.gpu_queue_timeout = 300
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 2, "default": 0.5}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "4G", "default": "1G"}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
USERS = ("alice", "bob")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("lab-estimate"), CONFIG)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}")
        yield hub
    finally:
        for name in USERS:
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def test_the_labs_holdings_say_the_spawn_pages_estimate(hub: Hub) -> None:
    assert spawn(hub, "bob", {"gpus": 2, "gpu_type": "sim"}).status_code in (201, 202)
    wait_ready(hub, "bob")
    assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "sim"}).status_code == 202
    page = Progress(hub, "alice")
    scopes = ["users:activity!user=alice", "access:servers!server=alice/"]
    made = hub.api("POST", "/users/alice/tokens", json={"note": "lab", "scopes": scopes})
    assert made.status_code == 201, made.text
    lab = HubHoldings(
        {
            "JUPYTERHUB_API_URL": hub.api_url,
            "JUPYTERHUB_API_TOKEN": made.json()["token"],
            "JUPYTERHUB_USER": "alice",
        },
        ttl=0,  # each look asks the hub afresh
    )

    def said_alike() -> dict[str, Any] | None:
        answer = asyncio.run(lab.get())
        assert answer["available"], answer
        for holding in answer["holdings"]:
            text = holding.get("estimate_text")
            if holding["waiting"] and text and page.said(text):
                return dict(holding)
        return None

    waiting = hub_until("alice's lab says what her spawn page says", said_alike, hub)
    assert waiting["estimate_text"].startswith("Likely to start around ")
    assert waiting["estimate"]["because"], waiting
    assert waiting["kind"] == "server" and waiting["gpus"] == 1
