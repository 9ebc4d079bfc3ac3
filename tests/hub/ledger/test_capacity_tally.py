"""The capacity cache keeps each GPU type's figures by deltas (gpuhub.hub.ledger.tally): after any
sequence of node and pod events, they equal the figures made from scratch from the same
cluster. Random sequences of the watch events a cluster sends (nodes come, change, are
cordoned and go; pods are bound, finish and go) over whole, time-sliced and HAMi types."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpuhub.core.policy import GPUType
from gpuhub.core.sharing import Sharing
from gpuhub.hub.ledger.capacity import ClusterCapacity

GIB = 2**30
TOLERATE = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
TYPES = [
    GPUType("a100", "A100", node_selector={"gpu": "a100"}, tolerations=TOLERATE),
    GPUType("any", "Any GPU"),  # no selector: every node with nvidia.com/gpu, untainted
    GPUType(
        "a10-shared",
        "A10 time-sliced",
        resource_name="nvidia.com/gpu.shared",
        node_selector={"gpu": "a10"},
        tolerations=TOLERATE,
        sharing=Sharing(replicas=4),
    ),
    GPUType(
        "t4-hami",
        "T4 shared",
        resource_name="nvidia.com/gpu",
        node_selector={"gpu": "t4"},
        tolerations=TOLERATE,
        sharing=Sharing(
            memory=16 * GIB,
            min=GIB,
            max=16 * GIB,
            default=4 * GIB,
            memory_resource="nvidia.com/gpumem",
            cores_resource="nvidia.com/gpucores",
        ),
    ),
]


def node(name: str, rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["a100", "a10", "t4", "none"])
    allocatable: dict[str, str] = {"cpu": "64", "memory": "512Gi"}
    labels = {"kubernetes.io/hostname": name}
    if kind != "none":
        labels["gpu"] = kind
    if kind == "a100":
        allocatable["nvidia.com/gpu"] = str(rng.choice([4, 8]))
    elif kind == "a10":
        allocatable["nvidia.com/gpu.shared"] = str(4 * rng.choice([1, 2]))
    elif kind == "t4":
        allocatable["nvidia.com/gpu"] = "40"
        if rng.random() < 0.8:  # HAMi says the memory; else it is not known
            allocatable["nvidia.com/gpumem"] = str(4 * 15360)
        if rng.random() < 0.5:
            labels["nvidia.com/gpu.count"] = "4"
    taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] if rng.random() < 0.7 else []
    ready = "True" if rng.random() < 0.9 else "False"
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": rng.random() < 0.1},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(name: str, node_name: str, rng: random.Random) -> dict[str, Any]:
    resource = rng.choice(["nvidia.com/gpu", "nvidia.com/gpu.shared"])
    limits = {resource: str(rng.randint(1, 4))}
    if resource == "nvidia.com/gpu" and rng.random() < 0.5:
        limits["nvidia.com/gpumem"] = str(rng.choice([1024, 4096, 8192]))
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
        "status": {"phase": rng.choice(["Running", "Running", "Pending", "Succeeded"])},
    }


def fresh(nodes: dict[str, Any], pods: dict[str, Any]) -> ClusterCapacity:
    """A cache that saw the cluster as it is now, at once."""
    cache = ClusterCapacity(None)
    for obj in nodes.values():
        cache._apply("nodes", {"type": "ADDED", "object": obj})
    for obj in pods.values():
        cache._apply("pods", {"type": "ADDED", "object": obj})
    cache.synced = {"nodes": True, "pods": True}
    return cache


@pytest.mark.parametrize("seed", range(12))
def test_deltas_equal_figures_made_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCapacity(None)
    cache.synced = {"nodes": True, "pods": True}
    nodes: dict[str, Any] = {}
    pods: dict[str, Any] = {}
    cache.capacity(TYPES)  # tallies exist from the start: every event below is a delta
    for step in range(400):
        roll = rng.random()
        if roll < 0.15 or not nodes:
            name = f"n{rng.randint(0, 30)}"
            nodes[name] = node(name, rng)
            cache._apply("nodes", {"type": "MODIFIED", "object": nodes[name]})
        elif roll < 0.2:
            name = rng.choice(sorted(nodes))
            cache._apply("nodes", {"type": "DELETED", "object": nodes.pop(name)})
        elif roll < 0.75:
            name = f"p{rng.randint(0, 80)}"
            pods[name] = pod(name, rng.choice([*sorted(nodes), "unseen"]), rng)
            cache._apply("pods", {"type": "MODIFIED", "object": pods[name]})
        elif pods:
            name = rng.choice(sorted(pods))
            cache._apply("pods", {"type": "DELETED", "object": pods.pop(name)})
        if step % 25 == 0:
            assert cache.capacity(TYPES) == fresh(nodes, pods).capacity(TYPES), step
    assert cache.capacity(TYPES) == fresh(nodes, pods).capacity(TYPES)
