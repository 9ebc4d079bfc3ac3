"""Work that leaves a workstation server's process tree still holds its GPU (issue 39).

A kernel starts a worker through a process that exits at once (a double fork: the worker is
no descendant of the server any more), drops every ``GPUHUB_*`` marker from its environment
and sets ``CUDA_VISIBLE_DEVICES`` to "" (it could set it back before CUDA starts). When the
server stops, the worker is still one of its survivors: it stays in the kernel's session,
and in the server's cgroup where the machine gives the hub one even after a new session.
Its GPU stays held as a job hold (and so charged) until the worker ends. Through a real hub.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuhub.hub import cgroups
from harness.hub.process import Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import LEDGER_READER, jobs_hub_config, server_kernel, server_state
from tests.support.jupyter.kernel import run
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.e2e

PLACE, WHY = cgroups.find(required=True)

SURVIVORS = """
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
c.JupyterHub.cleanup_servers = False
"""

# Run in the kernel: a launcher starts the worker and exits, so the worker is re-parented
# (a double fork); the worker's environment has no GPUHUB_* and no visible GPU.
ESCAPE = """
import os, subprocess, sys
env = {{k: v for k, v in os.environ.items() if not k.startswith("GPUHUB_")}}
env["CUDA_VISIBLE_DEVICES"] = ""
worker = "import os, time\\nwhile os.path.exists({flag!r}):\\n    time.sleep(0.2)"
launcher = (
    "import subprocess, sys\\n"
    f"p = subprocess.Popen([sys.executable, '-c', {{worker!r}}], stdin=subprocess.DEVNULL, "
    f"stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session={new_session})\\n"
    "print(p.pid)"
)
out = subprocess.run([sys.executable, "-c", launcher], env=env, capture_output=True, text=True)
print("worker", out.stdout.strip())
"""


def start(tmp_path_factory: pytest.TempPathFactory, limits: str) -> Hub:
    workdir = tmp_path_factory.mktemp("survivors-hub")
    config = jobs_hub_config(workdir) + SURVIVORS + LEDGER_READER
    return start_hub(workdir, config + f"c.LocalGPUSpawner.enforce_limits = {limits}\n")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """No cgroups: only the sessions keep the worker."""
    hub = start(tmp_path_factory, "False")
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


@pytest.fixture(scope="module")
def cgroup_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """Each server in a cgroup of its own: a new session stays in it."""
    if PLACE is None:
        pytest.skip(f"a new session leaves no trace but a cgroup: {WHY}")
    hub = start(tmp_path_factory, "True")
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


def job_holds(hub: Hub) -> list[dict[str, Any]]:
    answer = hub.api("GET", "/gpuhub/holdings/alice")
    assert answer.status_code == 200, answer.text
    return [h for h in answer.json()["holdings"] if h["kind"] == "job"]


@pytest.mark.parametrize(
    ("hub_name", "new_session"),
    [("hub", False), ("cgroup_hub", True)],
    ids=["double-fork-session", "double-fork-new-session-cgroup"],
)
def test_a_worker_that_left_the_server_keeps_its_gpu_held_until_it_ends(
    request: pytest.FixtureRequest, hub_name: str, new_session: bool
) -> None:
    hub: Hub = request.getfixturevalue(hub_name)
    home = hub.workdir / "users" / "alice"
    flag = home / f"escape-{int(new_session)}"
    write_notebook(home / "escape.ipynb", "print(1)")
    assert spawn(hub, "alice", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "alice")
    flag.write_text("")
    worker = 0
    try:
        client = server_kernel(hub, "alice", "escape.ipynb")
        try:
            client.wait_for_ready(timeout=60)
            code = ESCAPE.format(flag=str(flag), new_session=new_session)
            shown = run(client, code)
            worker = int(shown.stdout.split("worker", 1)[1].split()[0])
        finally:
            client.stop_channels()
        environ = Path(f"/proc/{worker}/environ").read_bytes().decode()
        assert "GPUHUB_" not in environ and "\0CUDA_VISIBLE_DEVICES=\0" in f"\0{environ}"
        server = psutil.Process(server_state(hub, "alice")["pid"])
        assert worker not in [p.pid for p in server.children(recursive=True)]

        stop(hub, "alice")
        deadline = time.monotonic() + 60
        while not (holds := job_holds(hub)):
            assert time.monotonic() < deadline, hub.log()[-3000:]
            time.sleep(0.3)
        [hold] = holds
        assert hold["gpus"] == 1 and worker in [p["pid"] for p in hold["processes"]], hold

        flag.unlink()  # the worker ends: its GPU comes back
        deadline = time.monotonic() + 60
        while job_holds(hub):
            assert time.monotonic() < deadline, "the worker's GPU was not released"
            time.sleep(0.3)
    finally:
        flag.unlink(missing_ok=True)
