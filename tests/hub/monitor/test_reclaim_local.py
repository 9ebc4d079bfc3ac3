"""GPU reclaim through a real JupyterHub, proxy and LocalGPUSpawner servers.

The GPUs are stand-ins whose utilization the test writes (tests/support/hub/standin_gpus.py); the
rule runs on seconds: warned after 3 s idle, stopped 5 s later. Each test uses its own
user, so what one leaves behind cannot decide another.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.hub.process import API_TOKEN, ROOT, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import LEDGER_READER, job_left_running, jobs_hub_config, token_for
from tests.support.hub.standin_gpus import write as set_utilization

pytestmark = pytest.mark.e2e

ADMIN = {"Authorization": f"token {API_TOKEN}"}
USERS = ("bob", "carol", "dave", "alice", "erin", "frank", "gina")
RECLAIM = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
c.JupyterHub.load_groups = {{"staff": {{"users": ["alice"]}},
                             "students": {{"users": ["bob", "carol", "dave", "erin", "frank", "gina"]}}}}
c.LocalGPUSpawner.gpu_devices = [0, 1, 2, 3]
c.LocalGPUSpawner.group_limits = {{"staff": {{"max_gpus": 4}}, "students": {{"max_gpus": 1}}}}
c.LocalGPUSpawner.gpu_idle_reclaim = {{
    "after": 3, "utilization_below": 0.05, "warn": 5,
    "exempt_groups": ["staff"], "max_postpones": 1,
}}
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_utilization_source = "tests.support.hub.standin_gpus.FileUtilization"
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reclaim-hub")
    set_utilization(path, dict.fromkeys(range(4), 0.0))
    return path


@pytest.fixture(scope="module")
def hub(workdir: Path) -> Iterator[Hub]:
    hub = start_hub(workdir, jobs_hub_config(workdir) + RECLAIM + LEDGER_READER)
    try:
        yield hub
    finally:
        for name in USERS:
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def reclaim_state(hub: Hub, user: str) -> dict[str, Any]:
    answer = hub.api("GET", f"/gpuhub/reclaim/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, (
            f"{what} did not happen in {timeout}s\n{hub.log()[-4000:]}"
        )
        time.sleep(0.2)


def gpus_of(hub: Hub, user: str) -> list[int]:
    server = hub.user_model(user)["servers"].get("")
    return list(((server or {}).get("state") or {}).get("gpus", []))


def start_with_a_gpu(hub: Hub, user: str) -> list[int]:
    answer = spawn(hub, user, {"gpus": 1})
    assert answer.status_code in (201, 202), answer.text
    wait_ready(hub, user)
    return gpus_of(hub, user)


def test_an_idle_server_is_warned_then_stopped_and_its_gpu_handed_out_again(
    hub: Hub, workdir: Path
) -> None:
    set_utilization(workdir, dict.fromkeys(range(4), 0.0))
    devices = start_with_a_gpu(hub, "bob")
    assert devices == [0]
    warned = wait_for(
        "the warning", lambda: reclaim_state(hub, "bob")["servers"].get("", {}).get("warned"), hub
    )
    assert warned
    state = reclaim_state(hub, "bob")["servers"].get("")
    assert state is None or state["seconds_left"] <= 5  # or already stopped
    wait_for("the stop", lambda: not hub.user_model("bob")["servers"], hub)
    # The GPU is free again: the next student gets device 0.
    set_utilization(workdir, {0: 0.6, 1: 0.0, 2: 0.0, 3: 0.0})
    assert start_with_a_gpu(hub, "carol") == [0]
    # bob's next visit says what happened, on the home and the spawn page.
    session = hub.login("bob")
    for page in ("home", "spawn"):
        html = session.get(f"{hub.url}/hub/{page}", timeout=30).text
        assert "gpuhub-notice" in html, page
        assert "Your server was stopped on" in html and "Your saved files are safe" in html
        assert "stayed below 5% utilization for 3 seconds" in html
    metrics = requests.get(f"{hub.url}/hub/metrics", headers=ADMIN, timeout=30).text
    assert 'gpuhub_idle_reclaims_total{gpu_type="NVIDIA GPU"} 1.0' in metrics, metrics[-3000:]
    # Starting the server again is reading the notice: it is gone afterwards.
    set_utilization(workdir, {0: 0.6, 1: 0.6, 2: 0.0, 3: 0.0})
    start_with_a_gpu(hub, "bob")
    wait_for(
        "the notice to go",
        lambda: "gpuhub-notice" not in session.get(f"{hub.url}/hub/home", timeout=30).text,
        hub,
    )
    stop(hub, "bob")


def test_a_busy_server_is_kept(hub: Hub, workdir: Path) -> None:
    # carol's GPU 0 is busy (set above); an unread GPU would count as busy too.
    if not hub.user_model("carol")["servers"]:
        set_utilization(workdir, {0: 0.6, 1: 0.0, 2: 0.0, 3: 0.0})
        start_with_a_gpu(hub, "carol")
    # The monitor's first look at a server that just started may still be to come.
    deadline = time.monotonic() + 30
    while reclaim_state(hub, "carol")["servers"].get("") is None:
        assert time.monotonic() < deadline, "the monitor never counted carol's server"
        time.sleep(0.2)
    deadline = time.monotonic() + 12  # longer than after + warn
    while time.monotonic() < deadline:
        state = reclaim_state(hub, "carol")["servers"].get("")
        assert state is not None and not state["warned"], state
        assert state["idle_seconds"] == 0
        time.sleep(0.5)
    assert hub.user_model("carol")["servers"][""]["ready"]
    stop(hub, "carol")


def test_keep_postpones_until_max_postpones_then_the_server_stops(hub: Hub, workdir: Path) -> None:
    set_utilization(workdir, dict.fromkeys(range(4), 0.0))
    start_with_a_gpu(hub, "dave")
    token = token_for(hub, "dave")

    def keep() -> requests.Response:
        return requests.post(
            f"{hub.api_url}/gpuhub/reclaim/dave/keep",
            json={"server": ""},
            headers={"Authorization": f"token {token}"},
            timeout=30,
        )

    def warned() -> bool:
        return bool(reclaim_state(hub, "dave")["servers"].get("", {}).get("warned"))

    wait_for("the first warning", warned, hub)
    kept = keep()
    assert kept.status_code == 200, kept.text
    assert kept.json()["warned"] is False and kept.json()["postpones_left"] == 0
    assert hub.user_model("dave")["servers"][""]["ready"]
    wait_for("the second warning", warned, hub)
    refused = keep()
    assert refused.status_code == 409
    assert "the most this hub allows" in refused.json()["message"]
    wait_for("the stop", lambda: not hub.user_model("dave")["servers"], hub)
    # Nobody else may keep (or read) dave's GPUs.
    other = requests.get(
        f"{hub.api_url}/gpuhub/reclaim/dave",
        headers={"Authorization": f"token {token_for(hub, 'erin')}"},
        timeout=30,
    )
    assert other.status_code == 403 and "Only dave" in other.json()["message"]


def test_an_exempt_group_is_never_reclaimed(hub: Hub, workdir: Path) -> None:
    set_utilization(workdir, dict.fromkeys(range(4), 0.0))
    answer = spawn(hub, "alice", {"gpus": 2})
    assert answer.status_code in (201, 202), answer.text
    wait_ready(hub, "alice")
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        assert reclaim_state(hub, "alice")["servers"] == {}  # no idle clock runs for staff
        time.sleep(0.5)
    assert hub.user_model("alice")["servers"][""]["ready"]
    stop(hub, "alice")


def test_a_cpu_only_server_is_never_reclaimed(hub: Hub) -> None:
    answer = spawn(hub, "erin", {"gpus": 0})
    assert answer.status_code in (201, 202), answer.text
    wait_ready(hub, "erin")
    time.sleep(1)  # a few monitor ticks
    assert reclaim_state(hub, "erin") == {"enabled": True, "servers": {}, "jobs": {}}
    stop(hub, "erin")


def reclaims_counted(hub: Hub) -> float:
    metrics = requests.get(f"{hub.url}/hub/metrics", headers=ADMIN, timeout=30).text
    found = re.search(r'gpuhub_idle_reclaims_total\{gpu_type="NVIDIA GPU"\} (\S+)', metrics)
    return float(found.group(1)) if found else 0.0


def test_reclaim_counts_and_notices_survive_a_hub_restart(hub: Hub, workdir: Path) -> None:
    set_utilization(workdir, dict.fromkeys(range(4), 0.0))
    start_with_a_gpu(hub, "frank")
    wait_for("the stop", lambda: not hub.user_model("frank")["servers"], hub)
    before = wait_for("the count", lambda: reclaims_counted(hub), hub)
    assert before >= 1
    hub.stop()
    restarted = start_hub(workdir, hub.config, port=hub.port)
    hub.proc = restarted.proc
    # The counter starts from the store, not from zero, so rate() sees no reset.
    assert wait_for("the counter after the restart", lambda: reclaims_counted(hub), hub) == before
    html = hub.login("frank").get(f"{hub.url}/hub/home", timeout=30).text
    assert "gpuhub-notice" in html and "stayed below 5% utilization" in html


def test_processes_a_stopped_server_left_are_reclaimed_like_a_server(
    hub: Hub, workdir: Path
) -> None:
    """gina's job outlives her server (a job hold): it shows on the hub's metrics with its
    processes, is warned when its GPU idles, may be kept once, and then its processes are
    ended and she reads why."""
    set_utilization(workdir, dict.fromkeys(range(4), 0.7))  # busy while it starts
    try:
        with job_left_running(hub, workdir, "gina", {"gpus": 1}) as job:
            ended_and_told(hub, workdir, job.token, job.job_id)
    finally:
        set_utilization(workdir, dict.fromkeys(range(4), 0.0))


def ended_and_told(hub: Hub, workdir: Path, token: str, job_id: str) -> None:
    """gina's job hold is seen with its processes, warned, kept once, then ended; named, as
    the fleet page names it, by her server and the job she knows, never by pids."""
    import html

    name = f"jobs of server 'default' ({job_id})"

    def hold() -> dict[str, Any] | None:
        found = hub.api("GET", "/gpuhub/holdings/gina").json()["holdings"]
        return next((h for h in found if h["kind"] == "job"), None)

    held = wait_for("the job hold", hold, hub)
    [device] = held["devices"]
    assert held["processes"], held
    pids = [p["pid"] for p in held["processes"]]

    def with_pid() -> str | None:
        text = requests.get(f"{hub.url}/hub/metrics", headers=ADMIN, timeout=30).text
        return text if f'pid="{pids[0]}"' in text else None

    metrics = wait_for("the hold's processes in the metrics", with_pid, hub)
    assert 'gpuhub_gpus_held{gpu_type="NVIDIA GPU",kind="job",user="gina"} 1.0' in metrics
    assert 'gpuhub_job_hold_process_info{command="' in metrics and 'user="gina"' in metrics

    set_utilization(workdir, {**dict.fromkeys(range(4), 0.7), device: 0.0})
    warned = wait_for(
        "the warning",
        lambda: reclaim_state(hub, "gina")["jobs"].get("", {}).get("warned"),
        hub,
    )
    assert warned
    notices = requests.get(
        f"{hub.api_url}/gpuhub/notices/gina",
        headers={"Authorization": f"token {token}"},
        timeout=30,
    ).json()["notices"]
    [warning] = [n for n in notices if n["kind"] == "warning"]
    assert warning["text"].startswith(f"Your {name}, left running when the server stopped")
    assert "will be ended" in warning["text"] and str(pids[0]) not in warning["text"]
    page = hub.login("gina").get(f"{hub.url}/hub/home", timeout=30).text
    assert "left running" in page and "will be ended" in page
    # "Keep my GPUs" works for a job hold too (once, as for a server here).
    kept = requests.post(
        f"{hub.api_url}/gpuhub/reclaim/gina/keep",
        json={"kind": "job", "server": ""},
        headers={"Authorization": f"token {token}"},
        timeout=30,
    )
    assert kept.status_code == 200 and kept.json()["warned"] is False, kept.text
    # Then it idles on: warned again, and its processes are ended.
    wait_for("the hold's end", lambda: hold() is None, hub, timeout=90)
    assert not any(_alive(pid) for pid in pids)
    session = hub.login("gina")

    def told() -> str | None:
        text = session.get(f"{hub.url}/hub/home", timeout=30).text
        return text if "were ended on" in text else None

    home_page = wait_for("the notice", told, hub)
    assert f"Your {name}, left running when the server stopped, were ended on" in html.unescape(
        home_page
    )
    assert "stayed below 5% utilization for 3 seconds" in home_page


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
