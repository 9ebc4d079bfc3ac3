"""LocalGPUSpawner end to end: a real JupyterHub, the real proxy, real single-user servers.

The workstation here has no GPU, so the hub is told the indices (``gpu_devices``), which is
what docs/architecture.md offers when NVML is unavailable; the allocator and CUDA_VISIBLE_DEVICES are real.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.hub.process import Hub, spawn_json, start_hub

pytestmark = pytest.mark.e2e

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.JupyterHub.load_groups = {
    "staff": {"users": ["alice"]},
    "students": {"users": ["bob", "carol", "dave"]},
}
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = [0, 1, 2]
c.LocalGPUSpawner.images = {"default": {"display_name": "Default <b>env</b>", "image": "local"}}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 4, "default": 1}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "8G", "default": "1G"}
c.LocalGPUSpawner.group_limits = {"staff": {"max_gpus": 3}, "students": {"max_gpus": 1}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 0}
c.LocalGPUSpawner.gpu_queue_timeout = 0  # refuse at once (test_queue_local.py covers the line)
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("local-hub"), CONFIG)
    try:
        yield hub
    finally:
        for name in ("alice", "bob", "carol", "dave"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


@pytest.fixture(autouse=True)
def no_servers_left(hub: Hub) -> Iterator[None]:
    yield
    for name in ("alice", "bob", "carol", "dave"):
        model = hub.api("GET", f"/users/{name}")
        if model.status_code == 200 and model.json().get("servers"):
            hub.stop_server(name)


def server_state(hub: Hub, name: str) -> dict[str, Any]:
    return hub.user_model(name)["servers"][""]["state"]


def server_env(hub: Hub, name: str) -> dict[str, str]:
    """The environment the single-user server really runs with, from /proc."""
    pid = server_state(hub, name)["pid"]
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def csrf_post(session: requests.Session, url: str, data: dict[str, str]) -> requests.Response:
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    return session.post(url, data={**data, "_xsrf": xsrf}, allow_redirects=False, timeout=60)


def test_spawn_through_the_form_and_come_back_to_prefilled_choices(hub: Hub) -> None:
    session = hub.login("alice")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200
    assert 'name="gpus"' in page.text and 'max="3"' in page.text
    assert "Default &lt;b&gt;env&lt;/b&gt;" in page.text  # admin display names are escaped
    assert "3 of 3 free now" in page.text

    response = csrf_post(
        session,
        f"{hub.url}/hub/spawn",
        {"image": "default", "cpu": "2", "memory": "2G", "gpus": "2", "gpu_type": "gpu"},
    )
    assert response.status_code == 302, response.text
    hub.wait_for_server("alice")
    assert server_env(hub, "alice")["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert server_state(hub, "alice")["gpus"] == [0, 1]
    lab = session.get(f"{hub.url}/user/alice/lab", timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text

    hub.stop_server("alice")
    again = session.get(f"{hub.url}/hub/spawn", timeout=30).text
    assert re.search(r'name="cpu"[^>]*value="2"', again)
    assert re.search(r'name="memory"[^>]*value="2G"', again)
    assert re.search(r'name="gpus"[^>]*value="2"', again)


def test_refused_form_rerenders_with_the_message_and_values(hub: Hub) -> None:
    session = hub.login("bob")
    response = csrf_post(
        session,
        f"{hub.url}/hub/spawn",
        {"cpu": "1", "memory": "1G", "gpus": "2", "gpu_type": "gpu"},
    )
    assert response.status_code == 400
    assert "You may use at most 1" in response.text
    assert re.search(r'name="gpus"[^>]*value="2"', response.text)
    assert not hub.user_model("bob")["servers"]
    # The hub log says it once, as a warning: a refusal is not the hub's error.
    log = hub.log_path.read_text()
    refused = [line for line in log.splitlines() if "You may use at most 1" in line]
    assert any(" Refused options for bob: " in line for line in refused), refused
    assert not any(line.startswith("[E") for line in refused), refused
    assert "Traceback" not in log


BAD_OPTIONS = [
    ({"cpu": 64}, "cpu"),
    ({"cpu": "two"}, "cpu"),
    ({"memory": "1T"}, "memory"),
    ({"memory": ["8G"]}, "memory"),
    ({"gpus": 2}, "gpus"),
    ({"gpus": "1; rm -rf /"}, "gpus"),
    ({"gpus": 1, "gpu_type": "h100"}, "gpu_type"),
    ({"image": "x:1; rm -rf /"}, "image"),
    ({"image": "docker.io/evil/miner:latest"}, "image"),
    ({"gpu": 1}, "gpu"),
]


@pytest.mark.parametrize(("options", "field"), BAD_OPTIONS)
def test_rest_refusals_are_400_naming_the_field(
    hub: Hub, options: dict[str, Any], field: str
) -> None:
    response = spawn_json(hub, "bob", options)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert field.split("_")[0] in message.lower() and "." in message
    assert not hub.user_model("bob")["servers"]


def test_users_get_disjoint_gpus_and_a_third_waits_for_one(hub: Hub) -> None:
    assert spawn_json(hub, "alice", {"gpus": 2}).status_code in (201, 202)
    assert spawn_json(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    hub.wait_for_server("alice")
    hub.wait_for_server("bob")
    alice = set(server_state(hub, "alice")["gpus"])
    bob = set(server_state(hub, "bob")["gpus"])
    assert len(alice) == 2 and len(bob) == 1 and not alice & bob
    assert server_env(hub, "bob")["CUDA_VISIBLE_DEVICES"] == str(next(iter(bob)))

    refused = spawn_json(hub, "carol", {"gpus": 1})
    assert refused.status_code == 409
    assert "0 of 3 are free now" in refused.json()["message"]
    assert not hub.user_model("carol")["servers"]

    # A CPU-only server still starts, and sees no GPU.
    assert spawn_json(hub, "dave", {"gpus": 0}).status_code in (201, 202)
    hub.wait_for_server("dave")
    assert server_env(hub, "dave")["CUDA_VISIBLE_DEVICES"] == ""

    hub.stop_server("bob")
    assert spawn_json(hub, "carol", {"gpus": 1}).status_code in (201, 202)
    hub.wait_for_server("carol")
    assert set(server_state(hub, "carol")["gpus"]) == bob


def test_allocations_survive_a_hub_restart(tmp_path: Path) -> None:
    config = CONFIG + "\nc.JupyterHub.cleanup_servers = False\n"
    first = start_hub(tmp_path, config)
    try:
        assert spawn_json(first, "alice", {"gpus": 2}).status_code in (201, 202)
        first.wait_for_server("alice")
        held = server_state(first, "alice")["gpus"]
    finally:
        first.stop()
    # Same database, same proxy port: the hub finds alice's server still running.
    second = start_hub(tmp_path, config, port=first.port)
    try:
        model = second.wait_for_server("alice")
        assert model["servers"][""]["state"]["gpus"] == held
        refused = spawn_json(second, "bob", {"gpus": 1})
        assert refused.status_code in (201, 202), refused.text
        second.wait_for_server("bob")
        assert server_state(second, "bob")["gpus"] == [2]  # not one of alice's
        assert spawn_json(second, "carol", {"gpus": 1}).status_code == 409
    finally:
        for name in ("alice", "bob"):
            second.api("DELETE", f"/users/{name}/server")
            second.wait_for_server(name, ready=False)
        second.stop()
        shutil.rmtree(tmp_path / "gpuhub-users", ignore_errors=True)
