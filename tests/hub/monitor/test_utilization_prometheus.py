"""Kubernetes mode's utilization: a real Prometheus scrapes a stand-in dcgm-exporter that
serves per-pod samples, and the hub's PrometheusUtilization reads them for the holdings the
pod watch makes of gpuhub's own pods (both label spellings: ``pod`` with honorLabels, and
``exported_pod`` without)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from gpuhub.hub.monitor.utilization import PrometheusUtilization
from gpuhub.k8s.inventory import pod_holding
from tests.support.hub.prometheus import eventually, running_prometheus, serving_exposition

# What dcgm-exporter serves with Kubernetes pod mapping on (GPU Operator defaults).
EXPOSITION = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",modelName="NVIDIA A100",container="notebook",namespace="gpuhub",pod="jupyter-ann"} 3
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1",modelName="NVIDIA A100",container="notebook",namespace="gpuhub",pod="jupyter-ann"} 1
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c",Hostname="n1",modelName="NVIDIA A100",container="main",namespace="gpuhub",pod="train-bob-1"} 88
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d",Hostname="n1",modelName="NVIDIA A100",container="main",namespace="other",pod="jupyter-ann"} 50
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",Hostname="n1",modelName="NVIDIA A100",container="notebook",namespace="gpuhub",pod="jupyter-ann"} 1024
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",Hostname="n1",modelName="NVIDIA A100",container="notebook",namespace="gpuhub",pod="jupyter-ann"} 512
DCGM_FI_DEV_FB_USED{gpu="2",UUID="GPU-c",Hostname="n1",modelName="NVIDIA A100",container="main",namespace="gpuhub",pod="train-bob-1"} 30000
"""


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    with serving_exposition(lambda: EXPOSITION) as target:
        yield target


def pod(name: str, labels: dict[str, str], notes: dict[str, str], gpus: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "gpuhub",
            "labels": labels,
            "annotations": notes,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
        },
        "status": {"phase": "Running"},
    }


SERVER = pod(
    "jupyter-ann",
    {"component": "singleuser-server", "hub.jupyter.org/username": "ann"},
    {"hub.jupyter.org/username": "ann", "hub.jupyter.org/servername": ""},
    2,
)
JOB = pod(
    "train-bob-1",
    {"app.kubernetes.io/managed-by": "gpuhub", "gpuhub.io/job-id": "train-1"},
    {"gpuhub.io/username": "bob"},
    1,
)


@pytest.mark.e2e
@pytest.mark.parametrize("honor_labels", [True, False])
def test_samples_per_pod_from_dcgm_through_prometheus(
    exporter: str, tmp_path_factory: pytest.TempPathFactory, honor_labels: bool
) -> None:
    scrape = {
        "job_name": "dcgm-exporter",
        "honor_labels": honor_labels,
        "static_configs": [
            # Prometheus' own target labels, as a ServiceMonitor gives the exporter's pod.
            {"targets": [exporter], "labels": {"namespace": "gpu-operator", "pod": "dcgm-x"}}
        ],
    }
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), [scrape]) as url:
        eventually(url, "DCGM_FI_DEV_FB_USED")
        holdings = [pod_holding(SERVER), pod_holding(JOB)]
        assert all(h is not None for h in holdings)
        source = PrometheusUtilization(url=url)
        samples = asyncio.run(source.sample([h for h in holdings if h is not None]))
    server = samples[("ann", "server", "")]
    assert [(s.gpu, s.utilization, s.memory_used) for s in server] == [
        ("jupyter-ann/0", 0.03, 1024 << 20),
        ("jupyter-ann/1", 0.01, 512 << 20),
    ]  # the same pod name in another namespace is someone else's
    assert [(s.utilization, s.memory_used) for s in samples[("bob", "job", "train-1")]] == [
        (0.88, 30000 << 20)
    ]


def test_no_prometheus_url_means_nothing_is_known() -> None:
    holding = pod_holding(SERVER)
    assert holding is not None
    assert asyncio.run(PrometheusUtilization(url="").sample([holding])) == {}
