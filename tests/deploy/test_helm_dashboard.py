"""The chart's Grafana dashboard: rendered as a ConfigMap the kube-prometheus-stack sidecar
loads, and every panel's PromQL accepted by a real Prometheus that has scraped gpuhub's
metric names (so a typo in a metric or a label fails here, not in someone's Grafana)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import Kube
from harness.helm import by_kind, make_chart, render, validate_all
from harness.paths import REPO
from tests.support.hub.prometheus import eventually, query, running_prometheus, serving_exposition

pytestmark = pytest.mark.skipif(
    not (REPO / "node_modules" / ".bin" / "helm").exists(),
    reason="helm from npm is not installed",
)

# What /hub/metrics serves (gpuhub.hub.monitor.metrics), one series each: the dashboard must find them.
HUB_METRICS = """\
# TYPE gpuhub_gpus gauge
gpuhub_gpus{gpu_type="A100",state="free"} 3
gpuhub_gpus{gpu_type="A100",state="held"} 5
# TYPE gpuhub_gpus_held gauge
gpuhub_gpus_held{user="ann",kind="server",gpu_type="A100"} 2
# TYPE gpuhub_gpu_seconds_total counter
gpuhub_gpu_seconds_total{user="ann",gpu_type="A100"} 7200
# TYPE gpuhub_gpu_utilization gauge
gpuhub_gpu_utilization{user="ann",server="",gpu="0"} 0.01
# TYPE gpuhub_idle_reclaims_total counter
gpuhub_idle_reclaims_total{gpu_type="A100"} 1
"""


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chart(tmp_path_factory.mktemp("chart"))


def dashboard(objects: list[dict[str, Any]]) -> dict[str, Any]:
    config_map = by_kind(objects, "ConfigMap", "gpuhub-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    return json.loads(config_map["data"]["gpuhub-gpus.json"])


@pytest.mark.e2e
def test_dashboard_config_map_renders_and_can_be_turned_off(chart: Path, module_kube: Kube) -> None:
    objects = render(chart)
    validate_all(module_kube, objects)
    board = dashboard(objects)
    titles = [p["title"] for p in board["panels"]]
    assert "GPUs free and held, per type" in titles and "Top holders now" in titles
    assert any("Idle GPU-hours" in t for t in titles) and "Idle reclaims per GPU type" in titles
    moved = render(chart, values={"grafanaDashboard": {"namespace": "monitoring"}})
    assert by_kind(moved, "ConfigMap", "gpuhub-grafana-dashboard")["metadata"]["namespace"] == (
        "monitoring"
    )
    off = render(chart, values={"grafanaDashboard": {"enabled": False}})
    assert not [o for o in off if o["metadata"]["name"] == "gpuhub-grafana-dashboard"]


@pytest.fixture(scope="module")
def hub_metrics() -> Iterator[str]:
    with serving_exposition(lambda: HUB_METRICS) as target:
        yield target


@pytest.mark.e2e
def test_every_panel_query_runs_on_prometheus(
    chart: Path, hub_metrics: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    board = dashboard(render(chart))
    expressions = [t["expr"] for p in board["panels"] for t in p["targets"]]
    names = {n for e in expressions for n in re.findall(r"\bgpuhub_[a-z_]+", e)}
    assert names == {
        "gpuhub_gpus",
        "gpuhub_gpus_held",
        "gpuhub_gpu_seconds_total",
        "gpuhub_gpu_utilization",
        "gpuhub_idle_reclaims_total",
    }
    scrape = {
        "job_name": "jupyterhub",
        "metrics_path": "/hub/metrics",
        "static_configs": [{"targets": [hub_metrics]}],
    }
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), [scrape]) as url:
        eventually(url, "gpuhub_idle_reclaims_total")
        for expr in expressions:
            query(url, expr)  # a parse error or unknown function is HTTP 400 here
        held = eventually(url, 'sum by (gpu_type) (gpuhub_gpus{state="held"})')
        assert held[0]["value"][1] == "5"
        top = eventually(url, "topk(10, sum by (user) (gpuhub_gpus_held))")
        assert top[0]["metric"] == {"user": "ann"}
