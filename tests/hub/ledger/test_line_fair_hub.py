"""A fair line through a real JupyterHub on a workstation with simulated GPUs.

heavy uses both GPUs for a while; then carol and dave hold them, heavy asks for one and
waits, and light, who never used a GPU, asks after heavy. light goes first: heavy's spawn
page says so and why (without light's name), and when carol stops, light gets the GPU
while heavy waits on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests

from harness.hub.process import API_TOKEN, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.progress import Progress
from tests.support.wait import hub_until

pytestmark = pytest.mark.e2e

FAIR = """
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = "simulated:2"
c.LocalGPUSpawner.gpu_types = {"sim": {"display_name": "Simulated GPU", "devices": [0, 1], "max_gpus": 2}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 2}
c.LocalGPUSpawner.gpu_queue_timeout = 300
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.LocalGPUSpawner.line_order = "fair"
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 2, "default": 0.5}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "4G", "default": "1G"}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
USERS = ("heavy", "light", "carol", "dave")
# heavy's lead must outlast the seconds between heavy's and light's requests (each second
# waited counts as a GPU-second less used): half a minute of GPU time is far more than that gap.
HEAVY_USE = 30.0


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("fair-hub"), FAIR)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}")
        yield hub
    finally:
        for name in USERS:
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def gpu_seconds(hub: Hub, user: str) -> float:
    """``gpuhub_gpu_seconds_total`` of ``user``, all GPU types, from the hub's /hub/metrics."""
    text = requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    ).text
    pattern = rf'^gpuhub_gpu_seconds_total\{{[^}}]*user="{user}"[^}}]*\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))


def pending(hub: Hub, user: str) -> bool:
    return (hub.user_model(user)["servers"].get("") or {}).get("pending") == "spawn"


def test_who_used_least_goes_first_and_the_page_says_why(hub: Hub) -> None:
    # heavy runs on both GPUs until the hub has counted a minute of GPU time.
    assert spawn(hub, "heavy", {"gpus": 2}).status_code in (201, 202)
    wait_ready(hub, "heavy")
    hub_until("heavy has used GPUs", lambda: gpu_seconds(hub, "heavy") >= HEAVY_USE, hub)
    stop(hub, "heavy")
    # carol and dave hold both GPUs now.
    for user in ("carol", "dave"):
        assert spawn(hub, user, {"gpus": 1}).status_code in (201, 202)
        wait_ready(hub, user)
    # heavy asks first, light (no GPU time at all) after: light is first in line.
    assert spawn(hub, "heavy", {"gpus": 1}).status_code == 202
    heavy = Progress(hub, "heavy")
    hub_until("heavy waits", lambda: heavy.said("you are 1st in line"), hub)
    assert spawn(hub, "light", {"gpus": 1}).status_code == 202
    light = Progress(hub, "light")
    hub_until("light is first in line", lambda: light.said("you are 1st in line"), hub)
    said = hub_until(
        "heavy is told who went first and why",
        lambda: next((m for m in heavy.messages if "you are 2nd in line" in m), ""),
        hub,
    )
    assert re.search(
        r"The line favours who used least: you used [0-9.]+ GPU-hours recently "
        r"\(half-life 7 days\); 1 person who used less came after you and goes first\. "
        # the wait's estimated start, once the monitor has made one (hub/monitor/eta.py)
        r"(Likely to start around [^.]*\. )?"
        r"gpuhub waits until ",
        said,
    ), said
    assert "light" not in said  # nobody else's name for a user who is no admin
    assert not any("passed" in m or "favours" in m for m in light.messages)
    # A GPU comes back: light, first in line, takes it; heavy waits on.
    stop(hub, "carol")
    wait_ready(hub, "light")
    assert pending(hub, "heavy"), hub.user_model("heavy")
    # And heavy is next: dave stops, heavy starts.
    stop(hub, "dave")
    wait_ready(hub, "heavy")
