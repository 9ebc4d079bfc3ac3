"""gpuhub's metrics in JupyterHub's /hub/metrics, scraped by a real Prometheus (Debian's
package) and read back with PromQL; GPU-seconds keep counting across a hub restart."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.hub.process import API_TOKEN, ROOT, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import jobs_hub_config
from tests.support.hub.prometheus import eventually, running_prometheus
from tests.support.hub.standin_gpus import write as set_utilization

pytestmark = pytest.mark.e2e

CONFIG = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
c.JupyterHub.load_groups = {{"students": {{"users": ["bob", "carol"]}}}}
c.LocalGPUSpawner.gpu_devices = [0, 1, 2, 3]
c.LocalGPUSpawner.gpu_types = {{
    "a100": {{"display_name": "A100", "devices": [0, 1], "max_gpus": 2}},
    "t4": {{"display_name": "T4", "devices": [2, 3], "max_gpus": 2}},
}}
c.LocalGPUSpawner.group_limits = {{"students": {{"max_gpus": 2}}}}
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_utilization_source = "tests.support.hub.standin_gpus.FileUtilization"
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("metrics-hub")
    set_utilization(path, {0: 0.25, 1: 0.75, 2: 0.0, 3: 0.0})
    return path


@pytest.fixture(scope="module")
def hub(workdir: Path) -> Iterator[Hub]:
    hub = start_hub(workdir, jobs_hub_config(workdir) + CONFIG)
    try:
        yield hub
    finally:
        for name in ("bob", "carol"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


@pytest.fixture(scope="module")
def prometheus(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    scrape = {
        "job_name": "jupyterhub",
        "metrics_path": "/hub/metrics",
        "authorization": {"type": "token", "credentials": API_TOKEN},
        "static_configs": [{"targets": [f"127.0.0.1:{hub.port}"]}],
    }
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), [scrape]) as url:
        yield url


def scraped(hub: Hub) -> str:
    answer = requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    )
    assert answer.status_code == 200
    return answer.text


def test_prometheus_answers_promql_for_gpuhubs_metrics(hub: Hub, prometheus: str) -> None:
    assert spawn(hub, "bob", {"gpus": 2, "gpu_type": "a100"}).status_code in (201, 202)
    assert spawn(hub, "carol", {"gpus": 1, "gpu_type": "t4"}).status_code in (201, 202)
    wait_ready(hub, "bob")
    wait_ready(hub, "carol")
    held = eventually(prometheus, 'gpuhub_gpus_held{user="bob",kind="server",gpu_type="A100"} == 2')
    assert held[0]["value"][1] == "2"
    free = eventually(prometheus, 'gpuhub_gpus{gpu_type="T4",state="free"} == 1')
    assert free and eventually(prometheus, 'gpuhub_gpus{gpu_type="A100",state="held"} == 2')
    total = eventually(prometheus, 'sum(gpuhub_gpus{state="held"}) == 3')
    assert total[0]["value"][1] == "3"
    utilization = eventually(prometheus, 'gpuhub_gpu_utilization{user="bob",server=""}')
    assert sorted((r["metric"]["gpu"], r["value"][1]) for r in utilization) == [
        ("0", "0.25"),
        ("1", "0.75"),
    ]
    # GPU-seconds grow at the rate of the GPUs held: 2 for bob.
    rate = eventually(
        prometheus, 'rate(gpuhub_gpu_seconds_total{user="bob",gpu_type="A100"}[10s]) > 1.5'
    )
    assert float(rate[0]["value"][1]) < 2.5
    assert eventually(prometheus, "sum(gpuhub_gpu_seconds_total) > 0")
    stop(hub, "carol")


def test_gpu_seconds_survive_a_hub_restart(hub: Hub, workdir: Path) -> None:
    def bob_seconds() -> float | None:
        found = re.search(
            r'gpuhub_gpu_seconds_total\{gpu_type="A100",user="bob"\} (\S+)', scraped(hub)
        )
        return float(found.group(1)) if found else None

    def until_counted(what: str) -> float:
        deadline = time.monotonic() + 60
        while not (seconds := bob_seconds()):
            assert time.monotonic() < deadline, f"{what}: " + scraped(hub)[-3000:]
            time.sleep(0.5)
        return seconds

    # Bob holds GPUs whether or not the module's first test ran before this one.
    if spawn(hub, "bob", {"gpus": 2, "gpu_type": "a100"}).status_code in (201, 202):
        wait_ready(hub, "bob")
    before = until_counted("bob's GPU-seconds before the restart")
    stop(hub, "bob")
    hub.stop()
    restarted = start_hub(workdir, hub.config, port=hub.port)
    hub.proc = restarted.proc
    # The metric's HELP line shows before the usage file is read: wait for bob's own series.
    assert until_counted("bob's GPU-seconds after the restart") >= before > 0
