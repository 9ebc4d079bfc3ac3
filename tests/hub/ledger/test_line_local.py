"""Waiting in line for GPUs on a workstation, through a real JupyterHub, proxy and servers.

One GPU of each type: a second user's spawn waits and shows where they stand, a third waits
behind, a stopped wait leaves the line, the first in line starts within seconds of the GPU
coming back, a wait that runs out ends with a sentence; quota and never-fits are refused at
once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from harness.hub.process import Hub, start_hub
from tests.support.hub.progress import Progress

pytestmark = pytest.mark.e2e

QUEUE = """
c.JupyterHub.spawner_class = "gpu-local"
c.JupyterHub.allow_named_servers = True
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = [0, 1]
c.LocalGPUSpawner.gpu_types = {
    "a6000": {"display_name": "RTX A6000", "devices": [0], "max_gpus": 2},
    "slow": {"display_name": "Slow GPU", "devices": [1], "max_gpus": 1},
}
c.LocalGPUSpawner.default_limits = {"max_gpus": 2}
c.LocalGPUSpawner.gpu_quota = {"default": 1}
c.LocalGPUSpawner.gpu_queue_timeout = 30
# The REST API answers 202 (pending) after 1 s instead of JupyterHub's 10 s.
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 2, "default": 1}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "4G", "default": "1G"}
"""
USERS = ("alice", "bob", "carol", "dave")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("queue-hub"), QUEUE)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}")
        yield hub
    finally:
        for name in USERS:
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def spawn(hub: Hub, user: str, options: dict[str, Any], server: str = "") -> requests.Response:
    path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
    return hub.api("POST", path, data=json.dumps(options))


def wait_until(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.25)
    return value


def server(hub: Hub, user: str) -> dict[str, Any] | None:
    return hub.user_model(user)["servers"].get("")


def test_spawns_wait_in_line_and_start_when_the_gpu_comes_back(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
    wait_until("alice ready", lambda: (server(hub, "alice") or {}).get("ready"))

    # bob is accepted (202, pending) and waits; the spawn page says where he stands.
    assert spawn(hub, "bob", {"gpus": 1, "gpu_type": "a6000"}).status_code == 202
    bob = Progress(hub, "bob")
    wait_until(
        "bob is told he is first",
        lambda: bob.said("Waiting for 1 RTX A6000 GPU: you are 1st in line; 1 of 1 are held"),
    )
    assert spawn(hub, "carol", {"gpus": 1, "gpu_type": "a6000"}).status_code == 202
    carol = Progress(hub, "carol")
    wait_until("carol is second", lambda: carol.said("you are 2nd in line"))
    page = hub.login("dave").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "0 of 1 free now; 2 people waiting" in page

    # carol stops waiting: she leaves the line, and nothing of hers is left.
    assert hub.api("DELETE", "/users/carol/server").status_code in (202, 204)
    wait_until("carol's wait ended", lambda: server(hub, "carol") is None)
    assert "1 person waiting" in hub.login("dave").get(f"{hub.url}/hub/spawn", timeout=30).text

    # alice stops: the line gives bob GPU 0 within seconds (it is served every second), past
    # JupyterHub's own start_timeout if need be; then his server starts, however long that
    # takes on a busy machine (not the line's to answer for).
    stopped = time.monotonic()
    hub.stop_server("alice")
    wait_until("bob's page saw the GPU assigned", lambda: bob.said("GPU 0 (RTX A6000) assigned"))
    assert time.monotonic() - stopped < 30
    wait_until("bob ready", lambda: (server(hub, "bob") or {}).get("ready"), timeout=90)
    assert server(hub, "bob")["state"]["gpus"] == [0]


def test_a_wait_that_runs_out_ends_with_a_sentence(hub: Hub) -> None:
    if server(hub, "bob") is None:
        assert spawn(hub, "bob", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
        wait_until("bob ready", lambda: (server(hub, "bob") or {}).get("ready"))
    assert spawn(hub, "dave", {"gpus": 1, "gpu_type": "a6000"}).status_code == 202
    dave = Progress(hub, "dave")
    wait_until("dave's wait ended", lambda: dave.end, timeout=90)
    assert dave.end.get("failed"), dave.end
    assert "Waited 30 seconds in line for 1 RTX A6000 GPU" in dave.end["message"]
    wait_until("dave has no server", lambda: server(hub, "dave") is None)
    assert server(hub, "bob")["state"]["gpus"] == [0]  # nobody got bob's GPU


def test_quota_and_never_fits_are_refused_at_once(hub: Hub) -> None:
    if server(hub, "bob") is None:
        assert spawn(hub, "bob", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
        wait_until("bob ready", lambda: (server(hub, "bob") or {}).get("ready"))
    # Over quota is never queued: 403 at once.
    over = spawn(hub, "bob", {"gpus": 1, "gpu_type": "slow"}, "second")
    assert over.status_code == 403 and "quota" in over.json()["message"]
    # More than the type has could never start: 400 at once, not a wait.
    never = spawn(hub, "carol", {"gpus": 2, "gpu_type": "a6000"})
    assert never.status_code == 400
    assert "has 1 RTX A6000 GPU, so a server with 2 could never start" in never.json()["message"]
    # Waiting counts against the quota: carol waits for the A6000, then may not take the other.
    # 202, but JupyterHub 6 answers 201 for a server whose previous spawn was just refused
    # (it answers for the spawner object it replaced): the line is what counts.
    assert spawn(hub, "carol", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
    wait_until("carol in line", lambda: (server(hub, "carol") or {}).get("pending") == "spawn")
    other = spawn(hub, "carol", {"gpus": 1, "gpu_type": "slow"}, "other")
    assert other.status_code == 403, other.text
    assert "waiting in line" in other.json()["message"]
    hub.api("DELETE", "/users/carol/server")
    wait_until("carol's wait ended", lambda: server(hub, "carol") is None)


@pytest.mark.browser
def test_the_spawn_page_shows_where_you_stand_in_line(hub: Hub) -> None:
    """In a real browser: the pending page says the place in line, then the GPU, then lab."""
    from tests.support.browser.chromium import artifact, chromium

    for name in ("bob", "carol"):
        if server(hub, name) is not None:
            hub.stop_server(name)
    assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
    wait_until("alice ready", lambda: (server(hub, "alice") or {}).get("ready"))
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 800})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "dave")
        page.goto(f"{hub.url}/hub/spawn")
        page.fill("#gpuhub-gpus", "1")
        page.check("input[name=gpu_type][value=a6000]")
        page.click("button[type=submit]")
        page.wait_for_url("**/hub/spawn-pending/dave**", timeout=60_000)
        line = page.get_by_text("you are 1st in line")
        line.first.wait_for(timeout=30_000)
        page.screenshot(path=str(artifact("spawn-waiting-in-line.png")), full_page=True)
        hub.stop_server("alice")
        page.wait_for_url("**/user/dave/**", timeout=90_000)
    assert server(hub, "dave")["state"]["gpus"] == [0]
    hub.stop_server("dave")


def test_a_hub_restart_ends_a_wait_with_a_sentence_and_hands_out_no_gpu_twice(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The line lives in the hub process: its shutdown ends the waits, and the next visit
    says so; after the restart, the GPU goes to one server only."""
    workdir = tmp_path_factory.mktemp("queue-restart")
    config = QUEUE + (
        "c.LocalGPUSpawner.gpu_monitor_interval = 0.5\n"
        "from gpuhub.hub.web.api import configure_hub\nconfigure_hub(c)\n"
    )
    hub = start_hub(workdir, config)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}")
        assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
        wait_until("alice ready", lambda: (server(hub, "alice") or {}).get("ready"))
        assert spawn(hub, "bob", {"gpus": 1, "gpu_type": "a6000"}).status_code == 202
        bob = Progress(hub, "bob")
        wait_until("bob in line", lambda: bob.said("you are 1st in line"))
    finally:
        hub.stop()  # SIGTERM: JupyterHub stops every server, the waiting one too

    hub = start_hub(workdir, config)
    try:
        assert server(hub, "bob") is None
        home = hub.login("bob").get(f"{hub.url}/hub/home", timeout=30).text
        assert (
            "Your server was waiting in line, 1st in line for 1 RTX A6000 GPU, when the hub "
            in (home)
        )
        assert "it did not start and held no GPU. Start it again to join the line." in home
        # Nothing of the old line is left: bob and carol ask again, one gets the GPU, one waits.
        assert spawn(hub, "bob", {"gpus": 1, "gpu_type": "a6000"}).status_code in (201, 202)
        wait_until("bob ready", lambda: (server(hub, "bob") or {}).get("ready"))
        assert server(hub, "bob")["state"]["gpus"] == [0]
        assert spawn(hub, "carol", {"gpus": 1, "gpu_type": "a6000"}).status_code == 202
        wait_until("carol waits", lambda: (server(hub, "carol") or {}).get("pending") == "spawn")
        # Once bob's server runs again, the notice has done its work.
        session = hub.login("bob")
        wait_until(
            "the notice is gone",
            lambda: "waiting in line" not in session.get(f"{hub.url}/hub/home", timeout=30).text,
        )
    finally:
        for name in ("bob", "carol"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()
