"""Flow 3a end to end: a real JupyterHub starts a LocalGPUSpawner server, and jobs go through
the proxy to that server's jobs API (and its magics), with the hub's policy and the server's
own GPUs. The workstation has no GPU, so the hub is told the indices (docs/architecture.md)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from jupyter_client import BlockingKernelClient

from tests.lab.test_jobs_magics import run
from tests.support.hub.process import Hub, spawn_json, start_hub
from tests.support.jupyter.notebooks import read_outputs, write_notebook
from tests.support.jupyter.server import SOURCE_PATHS

pytestmark = pytest.mark.e2e


def config(workdir: Path) -> str:
    server_config = workdir / "server-config"
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


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("jobs-hub")
    hub = start_hub(workdir, config(workdir))
    try:
        yield hub
    finally:
        for name in ("alice", "bob"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


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


def test_jobs_on_a_spawned_server_use_the_hubs_policy_and_its_gpus(hub: Hub) -> None:
    home = hub.workdir / "users" / "bob"
    write_notebook(
        home / "train.ipynb",
        "import os\nprint('epochs', epochs, 'gpus', repr(os.environ['CUDA_VISIBLE_DEVICES']))",
        parameters="epochs = 1",
    )
    assert spawn_json(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    hub.wait_for_server("bob")
    gpu = hub.user_model("bob")["servers"][""]["state"]["gpus"][0]
    bob = token_for(hub, "bob")

    options = user_api(hub, "bob", bob, "GET", "/options").json()
    assert options["max_gpus"] == 1 and options["local"] == {"gpus": 1, "gpu_type": "gpu"}

    over = user_api(hub, "bob", bob, "POST", "", json={"notebook": "train.ipynb", "gpus": 2})
    assert over.status_code == 400 and "at most 1" in over.json()["message"]

    created = user_api(
        hub,
        "bob",
        bob,
        "POST",
        "",
        json={"notebook": "train.ipynb", "gpus": 1, "parameters": {"epochs": 5}},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    deadline = time.monotonic() + 90
    while (job := user_api(hub, "bob", bob, "GET", f"/{job_id}").json())["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert (job["status"], job["owner"], job["gpu"]) == ("succeeded", "bob", "1 x NVIDIA GPU"), job
    assert f"epochs 5 gpus '{gpu}'" in read_outputs(home / job["output"])

    # Nobody else sees or cancels bob's jobs: the hub refuses them at bob's server.
    alice = token_for(hub, "alice")
    assert user_api(hub, "bob", alice, "GET", "").status_code == 403
    assert user_api(hub, "bob", alice, "DELETE", f"/{job_id}").status_code == 403
    assert user_api(hub, "bob", None, "GET", "").status_code in (302, 403)


def test_magics_in_a_spawned_server_use_its_hub_token(hub: Hub) -> None:
    home = hub.workdir / "users" / "bob"
    write_notebook(home / "demo.ipynb", "print('demo')")
    if not hub.user_model("bob")["servers"]:
        assert spawn_json(hub, "bob", {"gpus": 1}).status_code in (201, 202)
        hub.wait_for_server("bob")
    bob = token_for(hub, "bob")
    session = requests.post(
        f"{hub.url}/user/bob/api/sessions",
        headers={"Authorization": f"token {bob}"},
        json={"path": "demo.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
        timeout=60,
    ).json()
    connection = hub.workdir / "runtime" / f"kernel-{session['kernel']['id']}.json"
    client = BlockingKernelClient(connection_file=str(connection))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        run(client, "%load_ext gpuhub_lab")
        out = run(client, "%submit --wait")
        assert "Submitting demo.ipynb" in out.stdout and "succeeded" in out.stdout, out
        job_id = re.search(r"Submitted (\S+) ", out.stdout).group(1)  # type: ignore[union-attr]
        assert job_id in "".join(run(client, "%jobs").plain)
    finally:
        client.stop_channels()
