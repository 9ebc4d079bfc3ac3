"""``GET /gpuhub/api/metrics`` in a real Jupyter server, with real kernels, and ``%gpu``.

The server runs the NVML stand-in (``GPUSampler.nvml_module``) fed from a scenario file the
test rewrites, so it can put the real kernel's real process ids "on the GPU".
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from harness import fake_nvml as fake
from harness.jupyter.server import JupyterServer, jupyter_server
from harness.paths import REPO
from tests.support.jupyter.kernel import ready_kernel_client

pytestmark = pytest.mark.e2e

GIB = 2**30


class Rig:
    def __init__(self, server: JupyterServer, scenario_path: Path) -> None:
        self.server = server
        self.scenario_path = scenario_path

    def set_scenario(self, scenario: fake.Scenario) -> None:
        tmp = self.scenario_path.with_suffix(".tmp")
        tmp.write_text(scenario.to_json())
        tmp.replace(self.scenario_path)  # atomic: the sampler never reads half a file

    def metrics(self, **params: Any) -> dict[str, Any]:
        response = self.server.api("GET", "gpuhub/api/metrics", params=params)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("application/json")
        return response.json()

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            data = self.metrics()
            if predicate(data):
                return data
            if time.monotonic() > deadline:
                raise AssertionError(f"metrics never matched: {json.dumps(data)[:2000]}")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("metrics-server")
    root = tmp / "root"
    (root / "sub").mkdir(parents=True)
    scenario_path = tmp / "nvml.json"
    scenario_path.write_text(fake.a100s(2, utilization=30).to_json())
    env = {"PYTHONPATH": str(REPO), "GPUHUB_FAKE_NVML": str(scenario_path)}
    config = (
        "c.GPUSampler.nvml_module = 'harness.fake_nvml'\n"
        "c.GPUSampler.interval = 0.25\n"
        "c.GPUSampler.history_seconds = 30\n"
    )
    with jupyter_server(root, tmp, env=env, config=config) as server:
        yield Rig(server, scenario_path)


def test_metrics_need_jupyter_auth(rig: Rig):
    import requests

    response = requests.get(rig.server.url + "gpuhub/api/metrics", timeout=10)
    assert response.status_code == 403


def test_shape_history_and_since(rig: Rig):
    rig.set_scenario(fake.a100s(2, utilization=30, memory_used=4 * GIB))
    data = rig.wait_for(lambda d: d["available"] and len(d["history"]) >= 2)
    assert data["reason"] is None and data["interval"] == 0.25 and data["source"] == "nvml"
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    gpu = data["gpus"][0]
    assert set(gpu) >= {
        "index", "uuid", "name", "utilization", "memory_used", "memory_total",
        "temperature", "power", "mig", "processes",
    }  # fmt: skip
    assert gpu["utilization"] == 30 and gpu["memory_used"] == 4 * GIB
    last = data["history"][-1]["time"]
    newer = rig.metrics(since=last)["history"]
    assert all(entry["time"] > last for entry in newer)
    assert len(newer) < len(data["history"])


@pytest.mark.parametrize("since", ["yesterday", "nan", "inf"])
def test_bad_since_is_refused_with_one_sentence(rig: Rig, since: str):
    response = rig.server.api("GET", "gpuhub/api/metrics", params={"since": since})
    assert response.status_code == 400
    assert response.json()["message"] == "since must be a time in seconds since the epoch."


def _kernel_pid(server: JupyterServer, kernel_id: str) -> int:
    marker = f"kernel-{kernel_id}.json"
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if any(marker in part for part in child.cmdline()):
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no process for kernel {kernel_id}")


def _client(server: JupyterServer, kernel_id: str) -> BlockingKernelClient:
    return ready_kernel_client(server.runtime_dir / f"kernel-{kernel_id}.json")


def _run(client: BlockingKernelClient, code: str) -> list[dict[str, Any]]:
    """Execute ``code``; return its output messages (stream, display_data, error...)."""
    outputs: list[dict[str, Any]] = []
    reply = client.execute_interactive(
        code, timeout=60, output_hook=lambda msg: outputs.append(msg)
    )
    assert reply["content"]["status"] in ("ok", "error")
    return outputs


@pytest.fixture(scope="module")
def session(rig: Rig) -> Iterator[dict[str, Any]]:
    response = rig.server.api(
        "POST",
        "api/sessions",
        json={
            "path": "sub/train.ipynb",
            "name": "train.ipynb",
            "type": "notebook",
            "kernel": {"name": "python3"},
        },
    )
    assert response.status_code == 201, response.text
    model = response.json()
    kernel_id = model["kernel"]["id"]
    client = _client(rig.server, kernel_id)
    try:
        yield {"kernel_id": kernel_id, "client": client}
    finally:
        client.stop_channels()
        rig.server.api("DELETE", f"api/sessions/{model['id']}")


def test_gpu_memory_is_mapped_to_the_kernel_and_its_notebook(rig: Rig, session: dict[str, Any]):
    kernel_id = session["kernel_id"]
    kernel_pid = _kernel_pid(rig.server, kernel_id)
    # A child of the kernel (a DataLoader worker, say) counts as the notebook's too.
    out = _run(
        session["client"],
        "import subprocess; _p = subprocess.Popen(['sleep', '120']); print(_p.pid)",
    )
    child_pid = int("".join(m["content"].get("text", "") for m in out).strip())
    stranger = psutil.Process()  # the test process: on the GPU, but no kernel of this server
    scenario = fake.a100s(2, utilization=80)
    scenario.gpus[1].processes = [
        fake.FakeProcess(kernel_pid, 3 * GIB),
        fake.FakeProcess(child_pid, 1 * GIB),
        fake.FakeProcess(stranger.pid, 2 * GIB),
    ]
    rig.set_scenario(scenario)
    data = rig.wait_for(
        lambda d: any(p["path"] for g in d["gpus"] for p in g["processes"]), timeout=15
    )
    processes = {p["pid"]: p for p in data["gpus"][1]["processes"]}
    assert processes[kernel_pid] == {
        "pid": kernel_pid, "memory_used": 3 * GIB, "kernel_id": kernel_id, "path": "sub/train.ipynb",
    }  # fmt: skip
    assert processes[child_pid]["kernel_id"] == kernel_id
    assert processes[child_pid]["path"] == "sub/train.ipynb"
    assert processes[stranger.pid]["kernel_id"] is None and processes[stranger.pid]["path"] is None
    _run(session["client"], "_p.kill()")


def test_gpu_magic_in_a_real_kernel_shows_this_notebook(rig: Rig, session: dict[str, Any]):
    kernel_pid = _kernel_pid(rig.server, session["kernel_id"])
    scenario = fake.a100s(1, utilization=12)
    scenario.gpus[0].name = "NVIDIA <b>Test</b> GPU"
    scenario.gpus[0].processes = [fake.FakeProcess(kernel_pid, 5 * GIB)]
    rig.set_scenario(scenario)
    rig.wait_for(lambda d: d["gpus"] and d["gpus"][0]["processes"])
    out = _run(session["client"], "%load_ext gpuhub_lab\n%gpu")
    results = [m["content"]["data"] for m in out if m["msg_type"] == "execute_result"]
    assert results, out
    html = results[0]["text/html"]
    text = results[0]["text/plain"]
    assert "NVIDIA &lt;b&gt;Test&lt;/b&gt; GPU" in html and "<b>Test" not in html  # escaped
    assert "5.0 GiB: this notebook" in html
    assert "utilization 12%" in text
    errors = [m for m in _run(session["client"], "%gpu --bogus") if m["msg_type"] == "error"]
    assert errors and "does not understand" in errors[0]["content"]["evalue"]
    out = _run(session["client"], "%gpu --watch 2")
    views = [
        m["content"]["data"]
        for m in out
        if m["msg_type"] == "display_data"
        and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]
    assert views, out  # a live ipywidgets view, refreshed from a thread for 2 s
