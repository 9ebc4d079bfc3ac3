"""pytest fixtures for a simulated (or, with ``GPUHUB_TEST_KUBECONFIG``, a real) cluster.

``kubesim``      a fresh :class:`~tests.kubesim.sim.KubeSimThread` per test, with the nodes of
                 the ``kubesim_nodes`` fixture (override it in a test module to shape the
                 cluster); ``.url``, ``.kubeconfig`` (a file), and the controls in the README.
``kubesim_nodes`` the default cluster: ``DEFAULT_NODES``.
``kube_api``     an async ``kubernetes_asyncio`` ApiClient for the ``kubesim`` cluster.
``kube_cluster`` a :class:`Cluster` for end-to-end tests: kubesim, or the real cluster named by
                 ``GPUHUB_TEST_KUBECONFIG`` (then ``.sim`` is None and tests that need
                 kubesim's controls call ``cluster.require_sim()``, which skips).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .sim import KubeSimThread

A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

# A small GPU cluster: one CPU node, two 8-GPU A100 nodes (tainted as the GPU operator does),
# and one A100 node split into seven MIG 1g.10gb slices.
DEFAULT_NODES: list[dict[str, Any]] = [
    {"name": "cpu-0", "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}},
    *(
        {
            "name": f"a100-{n}",
            "labels": {"nvidia.com/gpu.product": A100_PRODUCT, "nvidia.com/gpu.count": "8"},
            "taints": [GPU_TAINT],
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": 110, "nvidia.com/gpu": 8},
        }
        for n in range(2)
    ),
    {
        "name": "a100-mig-0",
        "labels": {
            "nvidia.com/gpu.product": f"{A100_PRODUCT}-MIG-1g.10gb",
            "nvidia.com/mig.strategy": "mixed",
        },
        "taints": [GPU_TAINT],
        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": 110, "nvidia.com/mig-1g.10gb": 7},
    },
]


@pytest.fixture
def kubesim_nodes() -> list[dict[str, Any]]:
    return [dict(n) for n in DEFAULT_NODES]


@pytest.fixture
def kubesim(tmp_path: Path, kubesim_nodes: list[dict[str, Any]]) -> Iterator[KubeSimThread]:
    sim = KubeSimThread(kubesim_nodes, kubeconfig=tmp_path / "kubeconfig")
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
async def kube_api(kubesim: KubeSimThread) -> AsyncIterator[Any]:
    from kubernetes_asyncio import config

    client = await config.new_client_from_config(config_file=str(kubesim.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@dataclass
class Cluster:
    kubeconfig: Path
    namespace: str
    sim: KubeSimThread | None

    @property
    def real(self) -> bool:
        return self.sim is None

    def require_sim(self) -> KubeSimThread:
        if self.sim is None:
            pytest.skip("needs kubesim's controls; GPUHUB_TEST_KUBECONFIG points at a real cluster")
        return self.sim


@pytest.fixture
def kube_cluster(request: pytest.FixtureRequest) -> Cluster:
    real = os.environ.get("GPUHUB_TEST_KUBECONFIG")
    if real:
        return Cluster(Path(real), os.environ.get("GPUHUB_TEST_NAMESPACE", "default"), None)
    sim = request.getfixturevalue("kubesim")
    return Cluster(sim.kubeconfig, "default", sim)


@contextmanager
def hub_cluster(path: Path) -> Iterator[KubeSimThread]:
    """kubesim with the default nodes, running ``jupyterhub-singleuser`` pods as local
    processes, and ``KUBECONFIG`` pointing at it for the hubs a test starts (restored after)."""
    previous = os.environ.get("KUBECONFIG")
    sim = KubeSimThread(DEFAULT_NODES, kubeconfig=path)
    sim.run_locally({"jupyterhub-singleuser"})
    os.environ["KUBECONFIG"] = str(path)
    try:
        yield sim
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        sim.stop()
