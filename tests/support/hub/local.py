"""A real JupyterHub with LocalGPUSpawner as the tests configure it: the test hub's users,
groups and GPUs, the extension on each server, and the jobs API through the proxy."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import requests

from tests.support.hub.process import Hub
from tests.support.jupyter.server import SOURCE_PATHS


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
c.LocalGPUSpawner.gpu_queue_timeout = 0  # refuse at once (test_queue_local.py covers the line)
"""


def server_state(hub: Hub, name: str) -> dict[str, Any]:
    return hub.user_model(name)["servers"][""]["state"]


def server_env(hub: Hub, name: str) -> dict[str, str]:
    """The environment the single-user server really runs with, from /proc."""
    pid = server_state(hub, name)["pid"]
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


HOLD = "import os, time\nwhile os.path.exists('hold-the-gpu'):\n    time.sleep(0.2)\nprint('done')"
