"""A real JupyterHub with LocalGPUSpawner as the tests configure it: the test hub's users,
groups and GPUs, the extension on each server, and the jobs API through the proxy."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from jupyter_client import BlockingKernelClient

from harness.hub.process import Hub, spawn, stop, wait_ready
from harness.jupyter.server import SOURCE_PATHS
from tests.support.jupyter.kernel import kernel_client
from tests.support.jupyter.notebooks import write_notebook


def jobs_hub_config(workdir: Path) -> str:
    server_config = workdir / "server-jobs_hub_config"
    server_config.mkdir(parents=True, exist_ok=True)
    extensions = {
        "gpuhub_lab": True,
        "jupyterlab": False,
        "jupyter_lsp": False,
        "jupyter_server_terminals": False,
        "notebook_shim": False,
    }
    (server_config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": extensions}})
    )
    environment = {
        "JUPYTER_CONFIG_DIR": str(server_config),
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        "PYTHONPATH": os.pathsep.join(SOURCE_PATHS),
    }
    return f"""
c.JupyterHub.spawner_class = "gpu-local"
c.JupyterHub.load_groups = {{"staff": {{"users": ["alice"]}}, "students": {{"users": ["bob"]}}}}
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.home_dir_template = {str(workdir / "users" / "{username}")!r}
c.LocalGPUSpawner.gpu_devices = [0, 1, 2]
c.LocalGPUSpawner.group_limits = {{"staff": {{"max_gpus": 3}}, "students": {{"max_gpus": 1}}}}
c.LocalGPUSpawner.default_limits = {{"max_gpus": 0}}
c.Spawner.environment = {environment!r}
c.Spawner.default_url = "/tree"
"""


# The tests' admin service may also read every user's holdings, as the jobs service does
# (GET /hub/api/gpuhub/holdings/<user>); add it after ``configure_hub(c)``.
LEDGER_READER = """
c.JupyterHub.load_roles.append(
    {"name": "gpuhub-ledger-reader", "services": ["gpuhub-test"], "scopes": ["custom:gpuhub:grants"]}
)
"""


def token_for(hub: Hub, name: str) -> str:
    answer = hub.api("POST", f"/users/{name}/tokens", json={"note": "jobs test"})
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]


def user_api(hub: Hub, user: str, token: str | None, method: str, path: str, **kwargs):
    headers = {"Authorization": f"token {token}"} if token else {}
    return requests.request(
        method,
        f"{hub.url}/user/{user}/gpuhub/api/jobs{path}",
        headers=headers,
        timeout=30,
        allow_redirects=False,
        **kwargs,
    )


LOCAL_HUB_CONFIG = """
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
c.LocalGPUSpawner.gpu_queue_timeout = 0  # refuse at once (test_line_local.py covers the line)
"""


def server_kernel(hub: Hub, user: str, path: str) -> BlockingKernelClient:
    """A kernel the user's own server starts for the notebook at ``path`` (as JupyterLab
    opens it, with the user's token), its client's channels started; the caller waits for
    it and stops the channels."""
    session = requests.post(
        f"{hub.url}/user/{user}/api/sessions",
        headers={"Authorization": f"token {token_for(hub, user)}"},
        json={"path": path, "type": "notebook", "kernel": {"name": "python3"}},
        timeout=60,
    ).json()
    return kernel_client(hub.workdir / "runtime" / f"kernel-{session['kernel']['id']}.json")


def shared_gpu_hub_config(grace: float, extra: str = "") -> str:
    """A workstation hub whose simulated GPU 0 is shared by memory (2 GB, shares from 100 MB)
    under the over-share watch, with ``grace`` seconds before an over-share stops a server."""
    return (
        LOCAL_HUB_CONFIG
        + extra
        + f"""
from gpuhub import configure_hub
configure_hub(c)
c.LocalGPUSpawner.gpu_devices = "simulated:2"
c.LocalGPUSpawner.gpu_types = {{
    "shared": {{
        "display_name": "Simulated GPU, shared",
        "devices": [0],
        "sharing": {{"memory": "2G", "min": "100M"}},
    }},
}}
c.LocalGPUSpawner.default_limits = {{"max_gpus": 1}}
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.LocalGPUSpawner.gpu_share_grace = {grace}
# Other tests' processes run on the same simulated GPUs side by side: only
# test_overshare_strays.py, on a GPU of its own, ends what proves no holder.
c.LocalGPUSpawner.gpu_share_end_unexplained = False
"""
    )


def server_state(hub: Hub, name: str) -> dict[str, Any]:
    return hub.user_model(name)["servers"][""]["state"]


def server_env(hub: Hub, name: str) -> dict[str, str]:
    """The environment the single-user server really runs with, from /proc."""
    pid = server_state(hub, name)["pid"]
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


HOLD = "import os, time\nwhile os.path.exists('hold-the-gpu'):\n    time.sleep(0.2)\nprint('done')"


@dataclass(frozen=True)
class LeftJob:
    """A local job that outlived its server (a job hold), and how to end it."""

    job_id: str
    token: str  # its user's
    flag: Path  # the job runs while this file exists


@contextmanager
def job_left_running(
    hub: Hub, workdir: Path, user: str, options: dict[str, Any]
) -> Iterator[LeftJob]:
    """``user``'s server (started with ``options``) runs :data:`HOLD` as a local job on one
    GPU and is stopped: the job's processes outlive it and keep that GPU (a job hold) until
    the flag file goes, at the latest when the block ends."""
    home = workdir / "users" / user
    write_notebook(home / "hold.ipynb", HOLD)
    flag = home / "hold-the-gpu"
    flag.write_text("")
    try:
        assert spawn(hub, user, options).status_code in (201, 202)
        wait_ready(hub, user)
        token = token_for(hub, user)
        job = user_api(hub, user, token, "POST", "", json={"notebook": "hold.ipynb", "gpus": 1})
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        deadline = time.monotonic() + 60
        while user_api(hub, user, token, "GET", f"/{job_id}").json()["status"] != "running":
            assert time.monotonic() < deadline, f"{user}'s job did not start"
            time.sleep(0.3)
        stop(hub, user)
        yield LeftJob(job_id, token, flag)
    finally:
        flag.unlink(missing_ok=True)
