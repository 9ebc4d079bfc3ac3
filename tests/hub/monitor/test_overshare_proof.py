"""Whose GPU memory is whose on a shared GPU, through a real JupyterHub and real processes
(issue 31, item 1): a process counts for a server only on proof (its launch's signed grant,
run as the server's OS account), never on what it says of itself (``JUPYTERHUB_USER``).

bob and carol each hold 400 MB of the same simulated GPU (simulated GPUs count a process's
resident memory as its GPU memory). carol's process that says it is bob's is carol's: she is
warned, bob never. Memory no holder proves (carol's process without its grant, bob's grant
copied into another OS account's process) is charged to nobody: the fleet page and
``/hub/metrics`` show it to the admin. The grace period is long: nothing is stopped here
(test_overshare_hub.py covers the stop).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpuhub.core.env import LAUNCH_ENV, MACHINERY_ENV
from harness.hub.process import API_TOKEN, Hub, spawn, start_hub, wait_ready
from tests.support.hub.local import server_env, shared_gpu_hub_config, token_for

pytestmark = pytest.mark.e2e

CONFIG = shared_gpu_hub_config(3600, '\nc.Authenticator.admin_users = {"root"}')
USERS = ("bob", "carol")
HOG = "b = bytearray(700 * 10**6); print('up', flush=True); import time; time.sleep(300)"
GPU = "GPU 0 (Simulated GPU, shared): "
NOBODY = 65534  # another OS account than the one the hub's servers run as


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("overshare-proof-hub"), CONFIG)
    try:
        for user in USERS:
            options = {"gpus": 1, "gpu_type": "shared", "gpu_memory": "400M"}
            assert spawn(hub, user, options).status_code in (201, 202)
        for user in USERS:
            wait_ready(hub, user)
        yield hub
    finally:
        for user in USERS:
            hub.api("DELETE", f"/users/{user}/server")
        hub.stop()


@pytest.fixture(scope="module")
def tokens(hub: Hub) -> dict[str, str]:
    return {user: token_for(hub, user) for user in USERS}


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, (
            f"{what} did not happen in {timeout}s\n{hub.log()[-4000:]}"
        )
        time.sleep(0.2)
    return found


def warnings(hub: Hub, tokens: dict[str, str], user: str) -> list[dict[str, Any]]:
    answer = requests.get(
        f"{hub.api_url}/gpuhub/notices/{user}",
        headers={"Authorization": f"token {tokens[user]}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return [n for n in answer.json()["notices"] if n["kind"] == "warning"]


def unexplained(hub: Hub) -> float:
    """``gpuhub_gpu_memory_unexplained_bytes`` of GPU 0 in ``/hub/metrics`` (-1: absent)."""
    text = requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    ).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpuhub_gpu_memory_unexplained_bytes" and sample.labels["gpu"] == "0":
                return float(sample.value)
    return -1.0


def unexplained_pids(hub: Hub) -> set[int]:
    """The processes the fleet page shows the admin on GPU 0 as proving no holder."""
    page = hub.login("root").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    if GPU not in page:
        return set()
    line = page[page.index(GPU) :].split("</li>")[0]
    assert "nobody&#39;s share is charged for it" in line, line
    named = line.split(" used by process")[1].split(", which prove")[0].lstrip("es ")
    return {int(pid) for pid in named.split(", ")}


@pytest.fixture
def calm(hub: Hub, tokens: dict[str, str]) -> None:
    """Nobody is warned when a test starts (an earlier test's process has gone)."""
    wait_for(
        "the warnings to lift",
        lambda: not any(warnings(hub, tokens, u) for u in USERS),
        hub,
    )


def hog(env: dict[str, str], **popen: Any) -> subprocess.Popen[bytes]:
    """A process that takes 700 MB of GPU 0 (resident memory, simulated) and keeps it."""
    python = popen.pop("python", sys.executable)
    proc = subprocess.Popen([python, "-c", HOG], env=env, stdout=subprocess.PIPE, **popen)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


def kernel_env(hub: Hub, user: str) -> dict[str, str]:
    """What a kernel of ``user``'s server runs with (less Jupyter's machinery mark, which
    gpuhub's server extension drops for the processes it starts)."""
    return {k: v for k, v in server_env(hub, user).items() if k != MACHINERY_ENV}


def test_a_process_that_says_it_is_bobs_counts_for_its_own_server(
    hub: Hub, tokens: dict[str, str], calm: None
) -> None:
    env = {**kernel_env(hub, "carol"), "JUPYTERHUB_USER": "bob", "JUPYTERHUB_SERVER_NAME": ""}
    proc = hog(env)
    try:
        [warning] = wait_for("carol's warning", lambda: warnings(hub, tokens, "carol"), hub)
        assert "more than its 400 MB share of Simulated GPU, shared" in warning["text"]
        assert warnings(hub, tokens, "bob") == []
        # Her memory is hers: it is not among what no holder explains.
        assert proc.pid not in unexplained_pids(hub)
    finally:
        proc.kill()
        proc.wait()


def test_memory_no_holder_proves_is_the_admins_never_a_users(
    hub: Hub, tokens: dict[str, str], calm: None
) -> None:
    """carol's process without the grant her server gave it (and saying it is bob's)."""
    env = {k: v for k, v in kernel_env(hub, "carol").items() if k != LAUNCH_ENV}
    proc = hog({**env, "JUPYTERHUB_USER": "bob"})
    try:
        wait_for(
            "the fleet page's unexplained memory", lambda: proc.pid in unexplained_pids(hub), hub
        )
        used = psutil.Process(proc.pid).memory_info().rss
        wait_for("the unexplained memory in /hub/metrics", lambda: unexplained(hub) >= used, hub)
        # Nobody's share is charged for it: neither carol, whose it is, nor bob.
        assert warnings(hub, tokens, "carol") == [] and warnings(hub, tokens, "bob") == []
        # Only fleet admins see it.
        assert GPU not in hub.login("bob").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    finally:
        proc.kill()
        proc.wait()


def test_a_grant_copied_into_another_os_account_proves_nothing(
    hub: Hub, tokens: dict[str, str], calm: None
) -> None:
    """bob's whole environment, his signed grant included, in a process of another OS
    account (the hub's servers all run as the hub's own here)."""
    if os.geteuid() != 0:
        pytest.skip("starting a process as another OS account needs root")
    proc = hog(kernel_env(hub, "bob"), python="/usr/bin/python3", user=NOBODY, cwd="/")
    try:
        wait_for(
            "the fleet page's unexplained memory", lambda: proc.pid in unexplained_pids(hub), hub
        )
        assert warnings(hub, tokens, "bob") == []
    finally:
        proc.kill()
        proc.wait()
