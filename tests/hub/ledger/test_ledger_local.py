"""The GPU ledger on one workstation, through a real JupyterHub, proxy and servers.

Group limits held as a whole, ``gpu_quota`` across a default server, a named server and a
local job, a job's GPU held after its server stops and after a hub restart (then freed when
the job ends), and 20 concurrent spawns of one user never ending above the quota.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from harness.hub.process import JUPYTERHUB_MAJOR, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import (
    HOLD,
    LEDGER_READER,
    job_left_running,
    jobs_hub_config,
    token_for,
    user_api,
)
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.e2e

LEDGER = """
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 30
c.JupyterHub.cleanup_servers = False
c.JupyterHub.load_groups = {
    "staff": {"users": ["alice"]},
    "many-small": {"users": ["erin"]},
    "one-big": {"users": ["erin"]},
    "cpu-only": {"users": ["frank"]},
    "custom": {"users": ["frank"]},
}
c.LocalGPUSpawner.gpu_devices = [0, 1, 2, 3]
c.LocalGPUSpawner.images = {
    "base": {"display_name": "Base", "image": "registry.example.org/base:1", "default": True},
    "cpu": {"display_name": "CPU", "image": "registry.example.org/cpu:1"},
}
c.LocalGPUSpawner.custom_image_pattern = r"registry\\.example\\.org/[a-z0-9./-]+:[0-9]+"
c.LocalGPUSpawner.gpu_types = {
    "big": {"display_name": "Big GPU", "devices": [0, 1], "max_gpus": 2},
    "small": {"display_name": "Small GPU", "devices": [2, 3], "max_gpus": 2},
}
c.LocalGPUSpawner.group_limits = {
    "staff": {"max_gpus": 4},
    "many-small": {"max_gpus": 2, "gpu_types": ["small"]},
    "one-big": {"max_gpus": 1, "gpu_types": ["big"]},
    "cpu-only": {"max_gpus": 0, "images": ["cpu"]},
    "custom": {"max_gpus": 1, "images": ["base"], "custom_images": True},
}
c.LocalGPUSpawner.gpu_quota = {"default": 1, "groups": {"staff": 2}}
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ledger-hub")


def hub_config(workdir: Path) -> str:
    return jobs_hub_config(workdir) + LEDGER + LEDGER_READER


@pytest.fixture(scope="module")
def hub(workdir: Path) -> Iterator[Hub]:
    hub = start_hub(workdir, hub_config(workdir))
    try:
        yield hub
    finally:
        stop_all(hub)
        hub.stop()


def stop_all(hub: Hub) -> None:
    for name in ("alice", "erin", "frank"):
        model = hub.api("GET", f"/users/{name}")
        if model.status_code != 200:
            continue
        for server in model.json().get("servers", {}):
            hub.api(
                "DELETE", f"/users/{name}/servers/{server}" if server else f"/users/{name}/server"
            )
    for name in ("alice", "erin", "frank"):
        deadline = time.monotonic() + 60
        while hub.api("GET", f"/users/{name}").json().get("servers"):
            assert time.monotonic() < deadline, f"{name}'s servers did not stop"
            time.sleep(0.3)


def test_a_request_needs_one_group_that_allows_all_of_it(hub: Hub) -> None:
    # erin: up to 2 small GPUs (one group) or 1 big one (another); never 2 big ones.
    refused = spawn(hub, "erin", {"gpu_type": "big", "gpus": 2})
    assert refused.status_code == 400
    assert "at most 1 Big GPU" in refused.json()["message"]
    page = hub.login("erin").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "Big GPU" in page and "Small GPU" in page  # the form offers the union
    # The other direction: what one group allows on its own starts.
    assert spawn(hub, "erin", {"gpu_type": "small", "gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "erin")
    stop(hub, "erin")


def test_custom_images_obey_the_groups_image_limits(hub: Hub) -> None:
    # frank: "cpu" without GPUs, or "base"/custom images with 1 GPU; not cpu + GPU.
    mixed = spawn(hub, "frank", {"image": "cpu", "gpus": 1, "gpu_type": "small"})
    assert mixed.status_code == 400 and "None of your groups" in mixed.json()["message"]
    # Typing the reference of an image is that image: "cpu" + GPU stays refused.
    typed = spawn(hub, "frank", {"image": "registry.example.org/cpu:1", "gpus": 1})
    assert typed.status_code == 400, typed.text
    assert not hub.user_model("frank")["servers"]


def held_gpus(hub: Hub, user: str) -> list[int]:
    servers = hub.user_model(user)["servers"]
    return sorted(d for s in servers.values() for d in (s.get("state") or {}).get("gpus", []))


def test_quota_counts_default_and_named_servers_and_refuses_with_403(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "big"}).status_code in (201, 202)
    assert spawn(hub, "alice", {"gpus": 1, "gpu_type": "small"}, "second").status_code in (
        201,
        202,
    )
    wait_ready(hub, "alice")
    wait_ready(hub, "alice", "second")
    over = spawn(hub, "alice", {"gpus": 1, "gpu_type": "small"}, "third")
    assert over.status_code == 403, over.text
    message = over.json()["message"]
    assert "quota" in message and "2 of your quota of 2 GPUs" in message
    assert "server 'default': 1" in message and "server 'second': 1" in message
    assert "third" not in hub.user_model("alice")["servers"]
    form = hub.login("alice").get(f"{hub.url}/hub/spawn/alice/third", timeout=30).text
    assert "You hold 2 of your 2 GPUs" in form and "gpuhub-over-quota" in form
    # The lab asks the hub, with the server's own token, what alice holds where.
    alice = token_for(hub, "alice")
    mine = requests.get(
        f"{hub.url}/user/alice/gpuhub/api/holdings",
        headers={"Authorization": f"token {alice}"},
        timeout=30,
    )
    assert mine.status_code == 200, mine.text
    holdings = mine.json()
    assert holdings["available"] and holdings["quota"] == 2 and holdings["held"] == 2
    assert sorted(h["name"] for h in holdings["holdings"]) == ["", "second"]
    # Nobody else reads them from the hub.
    erin = token_for(hub, "erin")
    other = requests.get(
        f"{hub.api_url}/gpuhub/holdings/alice",
        headers={"Authorization": f"token {erin}"},
        timeout=30,
    )
    assert other.status_code == 404
    # A CPU-only server never counts.
    assert spawn(hub, "alice", {"gpus": 0}, "cpu").status_code in (201, 202)
    wait_ready(hub, "alice", "cpu")
    stop_all(hub)


def test_20_concurrent_spawns_never_end_above_the_quota(hub: Hub) -> None:
    def one(i: int) -> int:
        options = {"gpus": 1, "gpu_type": "small" if i % 2 else "big"}
        return spawn(hub, "alice", options, f"r{i}").status_code

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(one, range(20)))
    accepted = [c for c in codes if c in (201, 202)]
    assert len(accepted) == 2 and codes.count(403) == 18, codes
    deadline = time.monotonic() + 90
    while len(held_gpus(hub, "alice")) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert len(held_gpus(hub, "alice")) == 2
    stop_all(hub)


def test_a_jobs_gpu_stays_held_after_its_server_stops_and_a_hub_restart(
    hub: Hub, workdir: Path
) -> None:
    home = workdir / "users" / "alice"
    write_notebook(home / "hold.ipynb", HOLD)
    flag = home / "hold-the-gpu"
    flag.write_text("")
    try:
        hold_a_gpu_through_a_restart(hub, workdir, flag)
    finally:
        flag.unlink(missing_ok=True)  # the job ends, whatever happened


def hold_a_gpu_through_a_restart(hub: Hub, workdir: Path, flag: Path) -> None:
    assert spawn(hub, "alice", {"gpus": 2, "gpu_type": "big"}).status_code in (201, 202)
    wait_ready(hub, "alice")
    token = token_for(hub, "alice")
    job = user_api(hub, "alice", token, "POST", "", json={"notebook": "hold.ipynb", "gpus": 1})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    deadline = time.monotonic() + 60
    while user_api(hub, "alice", token, "GET", f"/{job_id}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    time.sleep(2)  # the kernel is up and holding the GPU

    stop(hub, "alice")
    # GPU 0 is the job's; GPU 1 came back. Only one big GPU is free for anybody now.
    page = hub.login("alice").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "1 of 2 free now" in page
    # The job counts against alice's quota of 2: a 2-GPU server would make 3.
    over = spawn(hub, "alice", {"gpus": 2, "gpu_type": "small"})
    assert over.status_code == 403 and "jobs" in over.json()["message"], over.text

    # A hub restart keeps the job's GPU held (same database and ledger file).
    hub.stop()
    again = start_hub(workdir, hub_config(workdir), port=hub.port)
    try:
        page = again.login("alice").get(f"{again.url}/hub/spawn", timeout=30).text
        assert "1 of 2 free now" in page
        assert spawn(again, "alice", {"gpus": 2, "gpu_type": "big"}).status_code == 403
        # The job ends: its GPU comes back within a moment.
        flag.unlink()
        deadline = time.monotonic() + 60
        while (code := spawn(again, "alice", {"gpus": 2, "gpu_type": "big"}).status_code) == 403:
            assert time.monotonic() < deadline, "the job's GPU was not freed"
            time.sleep(0.5)
        assert code in (201, 202)
        wait_ready(again, "alice")
        assert held_gpus(again, "alice") == [0, 1]
    finally:
        stop_all(again)
        hub.proc = again.proc  # the module fixture stops whichever hub runs last
        hub.port = again.port


def test_no_server_name_stands_for_a_job_hold(hub: Hub, workdir: Path) -> None:
    """The book once keyed a server "alice/<name>" and its job hold "alice/<name>#jobs": a
    server named "#jobs" shared the default server's job hold key, and stopping it freed a
    GPU a job still used. Keys are structured now: that name is just another server.
    (JupyterHub 6 refuses such names for new servers; ones created under 5.x still start.)"""
    with job_left_running(hub, workdir, "alice", {"gpus": 1, "gpu_type": "big"}):
        assert holds(hub, "alice") == [("job", "", [0])]
        for name in ("#jobs", "x#jobs"):
            path = f"/users/alice/servers/{quote(name, safe='')}"
            started = hub.api("POST", path, json={"gpus": 1, "gpu_type": "big"})
            if JUPYTERHUB_MAJOR >= 6:
                assert started.status_code == 400, started.text
                assert "Invalid server_name" in started.json()["message"]
                assert holds(hub, "alice") == [("job", "", [0])], name
                continue
            assert started.status_code in (201, 202), started.text
            wait_ready(hub, "alice", name)
            assert holds(hub, "alice") == [("job", "", [0]), ("server", name, [1])]
            hub.api("DELETE", path)
            deadline = time.monotonic() + 60
            while name in hub.user_model("alice")["servers"]:
                assert time.monotonic() < deadline, f"{name} did not stop"
                time.sleep(0.3)
            assert holds(hub, "alice") == [("job", "", [0])], name
        # GPU 0 stays the job's: the next big GPU anybody gets is 1.
        assert spawn(hub, "erin", {"gpus": 1, "gpu_type": "big"}).status_code in (201, 202)
        wait_ready(hub, "erin")
        assert held_gpus(hub, "erin") == [1]
        stop(hub, "erin")
    deadline = time.monotonic() + 60
    while holds(hub, "alice"):
        assert time.monotonic() < deadline, "the job hold did not end with its job"
        time.sleep(0.3)


def holds(hub: Hub, user: str) -> list[tuple[str, str, list[int]]]:
    answer = hub.api("GET", f"/gpuhub/holdings/{user}")
    assert answer.status_code == 200, answer.text
    return sorted((h["kind"], h["name"], h["devices"]) for h in answer.json()["holdings"])
