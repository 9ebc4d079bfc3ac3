"""Flow 3a end to end: a real JupyterHub starts a LocalGPUSpawner server, and jobs go through
the proxy to that server's jobs API (and its magics), with the hub's policy and the server's
own GPUs. The workstation has no GPU, so the hub is told the indices (docs/architecture.md)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from harness.hub.process import Hub, spawn_json, start_hub
from tests.support.hub.local import jobs_hub_config as config
from tests.support.hub.local import server_kernel, token_for, user_api
from tests.support.jupyter.kernel import run
from tests.support.jupyter.notebooks import read_outputs, write_notebook

pytestmark = pytest.mark.e2e


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
    # Whole GPUs: no share of a GPU's memory to run within.
    assert options["max_gpus"] == 1
    assert options["local"] == {"gpus": 1, "gpu_type": "gpu", "gpu_memory": None}

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
    client = server_kernel(hub, "bob", "demo.ipynb")
    try:
        client.wait_for_ready(timeout=60)
        run(client, "%load_ext gpuhub_lab")
        out = run(client, "%submit --wait")
        assert "Submitting demo.ipynb" in out.stdout and "succeeded" in out.stdout, out
        job_id = re.search(r"Submitted (\S+) ", out.stdout).group(1)  # type: ignore[union-attr]
        assert job_id in "".join(run(client, "%jobs").plain)
    finally:
        client.stop_channels()
