"""The hub's files survive damage, through a real JupyterHub and LocalGPUSpawner servers.

A damaged ``gpuhub-ledger.json`` (``[]``, cut short, garbage, wrong types) never stops the
hub and never frees a GPU a live process uses: the file is kept aside, one log line names
both files, and the job holds are rebuilt from the processes that run. A write that fails
never reaches ``GET /hub/api/gpuhub/holdings``. A damaged ``gpuhub-usage.json`` leaves the
monitor, the fleet page and ``/hub/metrics`` running with what could be read.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.hub.process import API_TOKEN, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import LEDGER_READER, job_left_running, jobs_hub_config

pytestmark = pytest.mark.e2e

ADMIN = {"Authorization": f"token {API_TOKEN}"}
STATE = """
c.Authenticator.admin_users = {"root"}
c.LocalGPUSpawner.ledger_file = "state/gpuhub-ledger.json"
c.LocalGPUSpawner.gpu_usage_file = "state/gpuhub-usage.json"
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("state-hub")
    (path / "state").mkdir()
    return path


def config(workdir: Path) -> str:
    return jobs_hub_config(workdir) + STATE + LEDGER_READER


@pytest.fixture(scope="module")
def hub(workdir: Path) -> Iterator[Hub]:
    hub = start_hub(workdir, config(workdir))
    try:
        yield hub
    finally:
        for name in ("alice", "bob"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def restart(hub: Hub, workdir: Path) -> None:
    hub.stop()
    again = start_hub(workdir, config(workdir), port=hub.port)
    hub.proc = again.proc  # the module fixture stops whichever hub runs last


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}\n{hub.log()[-4000:]}"
        time.sleep(0.3)
    return found


def holdings(hub: Hub, user: str) -> list[dict[str, Any]]:
    answer = hub.api("GET", f"/gpuhub/holdings/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()["holdings"]


def job_holds(hub: Hub, user: str) -> list[tuple[str, list[int]]]:
    return [(h["name"], h["devices"]) for h in holdings(hub, user) if h["kind"] == "job"]


@pytest.fixture(scope="module")
def held_job(hub: Hub, workdir: Path) -> Iterator[Path]:
    """alice's job that outlives her server on GPU 0 (a job hold), until the flag goes."""
    with job_left_running(hub, workdir, "alice", {"gpus": 1}) as job:
        wait_for("the job hold", lambda: job_holds(hub, "alice") == [("", [0])], hub)
        yield job.flag


def ledger(workdir: Path) -> Path:
    return workdir / "state" / "gpuhub-ledger.json"


def test_a_damaged_ledger_never_stops_the_hub_nor_frees_a_gpu_a_process_uses(
    hub: Hub, workdir: Path, held_job: Path
) -> None:
    written = json.loads(ledger(workdir).read_text())
    assert [(j["user"], j["devices"]) for j in written["jobs"]] == [("alice", [0])]
    text = ledger(workdir).read_text()
    damages = {
        "an empty list": b"[]",
        "cut short": text[: len(text) // 2].encode(),
        "garbage": b"\x00\xffnot json at all",
        "wrong types": json.dumps(
            {"version": 2, "jobs": [{"user": "alice", "devices": "0", "processes": 1}]}
        ).encode(),
    }
    for what, damage in damages.items():
        before = set(workdir.glob("state/gpuhub-ledger.json.damaged-*"))
        hub.stop()
        ledger(workdir).write_bytes(damage)
        restart(hub, workdir)
        # The hub runs, and alice's process still holds GPU 0: rebuilt from what runs.
        assert job_holds(hub, "alice") == [("", [0])], what
        [aside] = set(workdir.glob("state/gpuhub-ledger.json.damaged-*")) - before
        assert aside.read_bytes() == damage, what
        lines = [line for line in hub.log().splitlines() if str(aside) in line]
        assert len(lines) == 1 and str(ledger(workdir)) in lines[0], (what, lines)
        assert "is damaged" in lines[0] and "alice's job 'default': GPUs [0]" in lines[0]
        # Nobody else gets GPU 0, and the hub wrote a good file again.
        assert spawn(hub, "bob", {"gpus": 1}).status_code in (201, 202)
        assert wait_ready(hub, "bob")["state"]["gpus"] == [1], what
        stop(hub, "bob")
        assert json.loads(ledger(workdir).read_text())["jobs"][0]["devices"] == [0]


def test_a_failed_write_never_reaches_holdings(hub: Hub, workdir: Path, held_job: Path) -> None:
    state = workdir / "state"
    saved = workdir / "state.saved"
    shutil.move(state, saved)
    state.write_text("a file where the hub's folder was: every write fails")
    try:
        held_job.unlink()  # the job ends: the hold is released, and the write fails
        wait_for("the hold's end", lambda: job_holds(hub, "alice") == [], hub)
        assert "cannot write the GPU ledger" in hub.log()
        for _ in range(3):
            assert hub.api("GET", "/gpuhub/holdings/alice").status_code == 200
    finally:
        state.unlink()
        shutil.move(saved, state)
    # The folder is back: the hub writes again on its own, within its retry interval.
    wait_for(
        "the ledger written again",
        lambda: json.loads(ledger(workdir).read_text())["jobs"] == [],
        hub,
        timeout=30,
    )


def metrics(hub: Hub) -> str:
    return requests.get(f"{hub.url}/hub/metrics", headers=ADMIN, timeout=30).text


def test_a_damaged_usage_file_keeps_the_monitor_running_with_what_can_be_read(
    hub: Hub, workdir: Path
) -> None:
    usage = workdir / "state" / "gpuhub-usage.json"
    root = hub.login("root")
    for damage, kept in (
        (
            {
                "version": 2,
                "totals": [["carol", "NVIDIA GPU", 7200.0], ["dan", "NVIDIA GPU", "x"]],
                "hourly": "not a list",
                "notices": [],
                "reclaims": {"NVIDIA GPU": 5},
            },
            'gpuhub_gpu_seconds_total{gpu_type="NVIDIA GPU",user="carol"} 7200.0',
        ),
        ([], "gpuhub_gpus_held"),
    ):
        before = set(workdir.glob("state/gpuhub-usage.json.damaged-*"))
        hub.stop()
        usage.write_text(json.dumps(damage))
        restart(hub, workdir)
        wait_for("gpuhub's metrics", lambda k=kept: k in metrics(hub), hub)
        assert "gpuhub_gpus{" in metrics(hub)
        page = root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30)
        assert page.status_code == 200, page.text[-2000:]
        [aside] = set(workdir.glob("state/gpuhub-usage.json.damaged-*")) - before
        assert json.loads(aside.read_text()) == damage
        lines = [line for line in hub.log().splitlines() if str(aside) in line]
        assert len(lines) == 1 and str(usage) in lines[0] and "is damaged" in lines[0]
