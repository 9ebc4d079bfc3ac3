"""`python -m localk8s up --bare` (docs/cluster.md, "A bare cluster for scale runs"): only
etcd, kube-apiserver and kwok, whose nodes are nevertheless schedulable and run pods bound to
them by name; `down` leaves nothing behind. The scale benchmark (benchmarks/kube_cluster.py)
stands on this."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from localk8s import processes
from localk8s.kubeapi import wait_for
from localk8s.launcher import Launcher, down
from localk8s.nodes import schedulable

pytestmark = pytest.mark.e2e  # a real etcd, kube-apiserver and kwok


def test_a_bare_cluster_runs_kwok_pods_without_controllers(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump([{"name": "gpu-0", "allocatable": {"cpu": "8", "nvidia.com/gpu": 8}}])
    )
    root = tmp_path / "cluster"
    launcher = Launcher(root, nodes, gpus=4, quiet=True, bare=True)
    try:
        line = launcher.up()
        assert "bare: etcd, kube-apiserver and kwok only" in line, line
        state = json.loads((root / "state.json").read_text())
        assert set(state["pids"]) == {"etcd", "kube-apiserver", "kwok"}
        api = launcher.cluster.api()
        node = api.get("v1", "Node", "gpu-0")
        # Ready, and the not-ready taint the apiserver adds to a new node is lifted.
        assert schedulable(node) and node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert api.get("coordination.k8s.io/v1", "Lease", "gpu-0", "kube-node-lease") is None
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": "bench"},
            }
        )
        api.request(
            "POST",
            "/api/v1/namespaces/bench/pods",
            json={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "bound"},
                "spec": {
                    "nodeName": "gpu-0",
                    "containers": [{"name": "main", "image": "img:1"}],
                },
            },
        )
        wait_for(
            "kwok runs the bound pod",
            lambda: (
                (api.get("v1", "Pod", "bound", "bench") or {}).get("status", {}).get("phase")
                == "Running"
            ),
            timeout=60,
        )
    finally:
        down(root, quiet=True)
    assert not processes.marked(root)
