"""`make demo-k8s`, walked as a researcher would: its jupyterhub_config_k8s.py on the test
cluster, prepared by localk8s/demo.py (the chart's RBAC, Kueue's queue) in a namespace of
its own. Log in, get a GPU server that is a real pod, submit the notebook as a Job, a
PyTorchJob with two workers and a TFJob, and read back each run's output notebook and log."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import requests

from harness.hub.process import _env, free_port
from localk8s import demo
from localk8s.kubeapi import KubeAPI, KubeError

pytestmark = pytest.mark.e2e


@pytest.fixture
def demo_hub(kube_cluster_config: tuple[Path, KubeAPI, bool], tmp_path: Path) -> Iterator[str]:
    from harness import e2e

    e2e.require("the Kubernetes demo")
    _, api, local = kube_cluster_config
    if not local:
        pytest.skip("the Kubernetes demo runs on the local cluster's process node")
    namespace = f"demo-{secrets.token_hex(3)}"
    env = demo.prepare(api, tmp_path, namespace)
    port = free_port()
    while not all(_free(p) for p in (port + 1, port + 81, port + 2101)):
        port = free_port()
    log = open(tmp_path / "hub.log", "wb")  # noqa: SIM115 - closed below
    hub = subprocess.Popen(
        demo.hub_command(),
        cwd=tmp_path,
        env={**_env(), **env, "GPUHUB_DEMO_PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/hub/login", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert hub.poll() is None and time.monotonic() < deadline, (
                tmp_path / "hub.log"
            ).read_text()
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(hub.pid, signal.SIGTERM)
        hub.wait(30)
        log.close()
        for version, kind, name, ns in (
            ("v1", "Namespace", namespace, ""),
            ("kueue.x-k8s.io/v1beta2", "ClusterQueue", namespace, ""),
        ):
            with contextlib.suppress(KubeError):
                api.delete(version, kind, name, ns)


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _notebook() -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    first = nbformat.v4.new_code_cell("epochs = 1")
    first.metadata["tags"] = ["parameters"]
    nb.cells = [
        first,
        nbformat.v4.new_code_cell(
            "import os\nprint('epochs', epochs, 'on GPU', os.environ['CUDA_VISIBLE_DEVICES'])"
        ),
    ]
    return dict(json.loads(nbformat.writes(nb)))


def test_a_researchers_journey_on_the_kubernetes_demo(demo_hub: str) -> None:
    url = demo_hub
    session = requests.Session()
    session.get(f"{url}/hub/login", timeout=30)
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    login = session.post(
        f"{url}/hub/login",
        data={"username": "alice", "password": "gpuhub-demo", "_xsrf": xsrf},
        timeout=30,
    )
    assert login.status_code == 200, login.text
    form = session.get(f"{url}/hub/spawn", timeout=30).text
    assert "4 of 4 free now" in form and "Simulated GPU" in form
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    spawned = session.post(
        f"{url}/hub/spawn",
        data={
            "image": "notebook",
            "cpu": "1",
            "memory": "1G",
            "gpu_type": "sim",
            "gpus": "1",
            "_xsrf": xsrf,
        },
        timeout=60,
    )
    assert spawned.status_code == 200, spawned.text[-2000:]
    headers = {"X-XSRFToken": xsrf}
    deadline = time.monotonic() + 120
    while not (
        session.get(f"{url}/hub/api/users/alice", headers=headers, timeout=30)
        .json()["servers"]
        .get("", {})
        .get("ready")
    ):
        assert time.monotonic() < deadline, "alice's server did not start"
        time.sleep(0.5)
    token = session.post(
        f"{url}/hub/api/users/alice/tokens", headers=headers, json={"note": "journey"}, timeout=30
    ).json()["token"]
    api = f"{url}/user/alice"
    auth = {"Authorization": f"token {token}"}
    # The sidebar's source: the server knows its one GPU, and that it is simulated.
    assigned = requests.get(f"{api}/gpuhub/api/metrics", headers=auth, timeout=30).json()[
        "assigned"
    ]
    assert len(assigned["devices"]) == 1
    assert assigned["simulated"] is True
    uploaded = requests.put(
        f"{api}/api/contents/train.ipynb",
        headers=auth,
        json={"type": "notebook", "content": _notebook()},
        timeout=30,
    )
    assert uploaded.status_code == 201, uploaded.text
    kinds = requests.get(f"{api}/gpuhub/api/jobs/options", headers=auth, timeout=30).json()
    offered = {k["kind"] for k in kinds["kinds"] if k["available"]}
    assert {"job", "pytorchjob", "tfjob"} <= offered
    for kind, extra in (("job", {}), ("pytorchjob", {"workers": 2}), ("tfjob", {})):
        submitted = requests.post(
            f"{api}/gpuhub/api/jobs",
            headers=auth,
            json={
                "notebook": "train.ipynb",
                "kind": kind,
                "gpu_type": "sim",
                "gpus": 1,
                "parameters": {"epochs": 3},
                **extra,
            },
            timeout=60,
        )
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        deadline = time.monotonic() + 180
        while True:
            job = requests.get(f"{api}/gpuhub/api/jobs/{job_id}", headers=auth, timeout=30).json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, job
            time.sleep(1)
        assert job["status"] == "succeeded", job
        log = requests.get(f"{api}/gpuhub/api/jobs/{job_id}/logs", headers=auth, timeout=30).text
        assert re.search(r"epochs 3 on GPU \d", log), log[-2000:]
        output = requests.get(f"{api}/api/contents/{job['output']}", headers=auth, timeout=30)
        assert output.status_code == 200, output.text
        cells = output.json()["content"]["cells"]
        printed = "".join(o.get("text", "") for c in cells for o in c.get("outputs", []))
        assert "epochs 3 on GPU" in printed
