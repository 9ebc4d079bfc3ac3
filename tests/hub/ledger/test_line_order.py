"""The wait line on a workstation is first come, first served, through a real JupyterHub.

A request that finds GPUs free while others of its type wait joins the line behind them
(the line comes before the book); named servers running or waiting are capped by
``named_server_limit_per_user``, in the form as in the REST API; a spawn whose
``pre_spawn_hook`` fails leaves the line without telling the user the hub shut down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.hub.process import JUPYTERHUB_MAJOR, Hub, spawn, start_hub
from tests.support.hub.progress import Progress

pytestmark = pytest.mark.e2e

ORDER = """
c.JupyterHub.spawner_class = "gpu-local"
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 2
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = [0, 1]
c.LocalGPUSpawner.gpu_types = {"a6000": {"display_name": "RTX A6000", "devices": [0, 1], "max_gpus": 2}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 2}
c.LocalGPUSpawner.gpu_queue_timeout = 120
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 2, "default": 1}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "4G", "default": "1G"}


def refuse_some(spawner):
    if spawner.user.name == "hooked":
        raise RuntimeError("the site's pre-spawn check failed for hooked")


c.Spawner.pre_spawn_hook = refuse_some
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
USERS = ("alice", "bob", "carol", "dave", "hooked")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("order-hub"), ORDER)
    try:
        for name in USERS:
            hub.api("POST", f"/users/{name}")
        yield hub
    finally:
        for name in USERS:
            for server in hub.api("GET", f"/users/{name}").json().get("servers", {}):
                path = f"/users/{name}/servers/{server}" if server else f"/users/{name}/server"
                hub.api("DELETE", path)
        hub.stop()


@pytest.fixture(autouse=True)
def nobody_holds_anything(hub: Hub) -> Iterator[None]:
    """Each test starts with every server stopped, whatever the one before left."""
    yield
    for name in USERS:
        for server_name in hub.api("GET", f"/users/{name}").json().get("servers", {}):
            gone(hub, name, server_name)


def wait_until(what: str, check: Any, hub: Hub, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}\n{hub.log()[-3000:]}"
        time.sleep(0.25)
    return value


def server(hub: Hub, user: str, name: str = "") -> dict[str, Any]:
    return hub.user_model(user)["servers"].get(name) or {}


def gone(hub: Hub, user: str, name: str = "", *, remove: bool = False) -> None:
    """Stop a server; ``remove``: delete a named one too (JupyterHub 6 counts the named
    servers that exist against ``named_server_limit_per_user``)."""
    path = f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"
    hub.api("DELETE", path, **({"json": {"remove": True}} if remove else {}))
    wait_until(f"{user}/{name} stopped", lambda: not server(hub, user, name), hub)


def test_a_small_request_never_overtakes_a_bigger_one_waiting(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 1}).status_code in (201, 202)
    wait_until("alice ready", lambda: server(hub, "alice").get("ready"), hub)
    # bob wants both GPUs: one is free, so he waits first in line.
    assert spawn(hub, "bob", {"gpus": 2}).status_code == 202
    wait_until("bob waits", lambda: server(hub, "bob").get("pending") == "spawn", hub)
    # carol wants one, and one is free: she still waits, behind bob, and is told why.
    assert spawn(hub, "carol", {"gpus": 1}).status_code == 202
    carol = Progress(hub, "carol")
    wait_until(
        "carol is told she waits behind bob",
        lambda: (
            carol.said("you are 2nd in line; 1 of 2 are held")
            and carol.said("the line is first come, first served")
        ),
        hub,
    )
    assert server(hub, "carol").get("pending") == "spawn", server(hub, "carol")
    assert not server(hub, "carol").get("ready")
    page = hub.login("dave").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "1 of 2 free now; 2 people waiting" in page
    # alice stops: bob, first in line, takes both; carol goes on waiting.
    gone(hub, "alice")
    wait_until("bob ready", lambda: server(hub, "bob").get("ready"), hub)
    assert server(hub, "bob")["state"]["gpus"] == [0, 1]
    assert server(hub, "carol").get("pending") == "spawn"
    gone(hub, "bob")
    wait_until("carol ready", lambda: server(hub, "carol").get("ready"), hub)
    assert server(hub, "carol")["state"]["gpus"] == [0]
    gone(hub, "carol")


def test_named_servers_waiting_in_line_are_capped(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 2}).status_code in (201, 202)
    wait_until("alice ready", lambda: server(hub, "alice").get("ready"), hub)
    # dave's named servers wait for a GPU: two of them, the most this hub allows at once.
    for name in ("one", "two"):
        assert spawn(hub, "dave", {"gpus": 1}, name).status_code == 202
        wait_until(f"{name} waits", lambda n=name: server(hub, "dave", n).get("pending"), hub)
    # A third through the form (JupyterHub itself checks only the REST API's new servers).
    session = hub.login("dave")
    session.get(f"{hub.url}/hub/spawn/dave/three", timeout=30)
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    refused = session.post(
        f"{hub.url}/hub/spawn/dave/three",
        data={"gpus": "1", "gpu_type": "a6000", "_xsrf": xsrf},
        timeout=30,
        allow_redirects=False,
    )
    assert refused.status_code == 400, refused.status_code
    if JUPYTERHUB_MAJOR >= 6:
        # JupyterHub 6 checks a new named server itself, through the form too, counting the
        # servers that exist (stopped ones included); gpuhub's check remains for an existing
        # server started again, counting those running or waiting.
        assert "dave already has the maximum of 2 named servers" in refused.text
    else:
        assert "You already have 2 named servers running or waiting to start" in refused.text
    assert "three" not in hub.user_model("dave")["servers"]
    # One leaves the line and is deleted: a third may start (and waits in line in turn).
    gone(hub, "dave", "one", remove=True)
    assert spawn(hub, "dave", {"gpus": 1}, "three").status_code == 202
    for name in ("two", "three"):
        gone(hub, "dave", name, remove=True)
    gone(hub, "alice")


def test_a_failed_pre_spawn_hook_never_says_the_hub_shut_down(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 2}).status_code in (201, 202)
    wait_until("alice ready", lambda: server(hub, "alice").get("ready"), hub)
    # hooked's spawn is accepted into the line, then the site's hook refuses it.
    answer = spawn(hub, "hooked", {"gpus": 1})
    assert answer.status_code in (202, 500), answer.text
    wait_until("hooked's spawn ended", lambda: not server(hub, "hooked"), hub)
    home = hub.login("hooked").get(f"{hub.url}/hub/home", timeout=30).text
    assert "hub shut down" not in home and "gpuhub-notice" not in home
    # Nothing of it is left in the line either: the next GPU goes to the next in line.
    assert spawn(hub, "carol", {"gpus": 1}).status_code == 202
    page = hub.login("dave").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "0 of 2 free now; 1 person waiting" in page
    gone(hub, "alice")
    wait_until("carol ready", lambda: server(hub, "carol").get("ready"), hub)
    gone(hub, "carol")
