"""A share of a simulated GPU that uses more than it asked for, through a real JupyterHub
(issue 24, item 3): the hub's monitor warns the server at once (hub pages and the notices
API), then stops it like idle reclaim, saying why. Simulated GPUs count a process's resident
memory as its GPU memory; the grace period is seconds here."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from gpuhub.core.env import MACHINERY_ENV
from harness.hub.process import Hub, spawn, start_hub, wait_ready
from tests.support.hub.local import server_env, shared_gpu_hub_config, token_for

pytestmark = pytest.mark.e2e

CONFIG = shared_gpu_hub_config(4)
HOG = "b = bytearray(700 * 10**6); print('up', flush=True); import time; time.sleep(300)"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("overshare-hub"), CONFIG)
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, (
            f"{what} did not happen in {timeout}s\n{hub.log()[-4000:]}"
        )
        time.sleep(0.2)
    return found


def test_a_server_over_its_share_is_warned_then_stopped_saying_why(hub: Hub) -> None:
    started = spawn(hub, "alice", {"gpus": 1, "gpu_type": "shared", "gpu_memory": "400M"})
    assert started.status_code in (201, 202), started.text
    wait_ready(hub, "alice")
    token = token_for(hub, "alice")

    def notices() -> list[dict[str, Any]]:
        answer = requests.get(
            f"{hub.api_url}/gpuhub/notices/alice",
            headers={"Authorization": f"token {token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["notices"]

    # A notebook's process that takes 700 MB of the GPU (resident memory, simulated): it
    # runs with the server's environment, as its kernels do (less the mark of Jupyter's own
    # machinery, which gpuhub's server extension drops for them).
    env = {k: v for k, v in server_env(hub, "alice").items() if k != MACHINERY_ENV}
    hog = subprocess.Popen([sys.executable, "-c", HOG], env=env, stdout=subprocess.PIPE)
    try:
        assert hog.stdout is not None and hog.stdout.readline() == b"up\n"
        [warning] = wait_for(
            "the warning", lambda: [n for n in notices() if n["kind"] == "warning"], hub
        )
        assert "more than its 400 MB share of Simulated GPU, shared" in warning["text"]
        assert warning["by"] == "share" and "will be stopped on" in warning["text"]
        page = hub.login("alice").get(f"{hub.url}/hub/home", timeout=30).text
        assert "more than its 400 MB share" in page

        wait_for("the stop", lambda: not hub.user_model("alice")["servers"], hub, timeout=90)
        [notice] = [n for n in notices() if n["kind"] == "server"]
        assert "was stopped" in notice["text"] and "because its processes used" in notice["text"]
        assert "more than its 400 MB share" in notice["text"] and notice["by"] == "share"
        assert not [n for n in notices() if n["kind"] == "warning"]
    finally:
        hog.kill()
        hog.wait()
