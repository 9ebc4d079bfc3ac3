"""Shared GPUs on the real cluster (issue 24, item 5): kwok nodes of this test advertise
HAMi's resources (``nvidia.com/gpu`` vGPU slots, ``nvidia.com/gpumem`` in MiB,
``nvidia.com/gpucores``) and time-slicing's (``nvidia.com/gpu.shared`` with GPU feature
discovery's labels). The pods GPUSpawner writes for shares are created through the API,
scheduled by the real scheduler onto those nodes and read back; the hub's watch counts their
memory, replicas and shares."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpuhub.core.holdings import gpus_counted, gpus_held
from gpuhub.core.sharing import MIB
from gpuhub.hub.ledger.capacity import ClusterCapacity
from tests.support.manifests import make_spawner, manifest
from tests.support.shared_gpus import GPU_TYPES, HAMI_NODE, TS_NODE, add_nodes
from tests.support.wait import eventually

pytestmark = [
    pytest.mark.e2e,  # a real kube-apiserver, scheduler and kwok
    # GPUSpawner is built as the manifest tests build it; no_cluster keeps the spawner's own
    # client off any cluster (the test's pods go through ``kube``).
    pytest.mark.usefixtures("no_cluster"),
]


async def written(server: str, options: dict[str, Any]) -> dict[str, Any]:
    """The pod GPUSpawner writes for alice's ``server`` with ``options``."""
    spawner = make_spawner(
        ["staff"], gpu_types=GPU_TYPES, group_limits={}, default_limits={"max_gpus": 2}
    )
    spawner.orm_spawner = SimpleNamespace(name=server, server=None)  # what Spawner.name reads
    spawner.user.settings = {}  # a named server: no limit on how many
    body = await manifest(spawner, options)
    body["metadata"]["name"] = f"jupyter-alice-{server}"
    return body


def running_on(kube: Any, name: str, node: str) -> dict[str, Any] | None:
    pod = kube.get("Pod", name) or {}
    placed = pod.get("spec", {}).get("nodeName") == node
    return pod if placed and pod.get("status", {}).get("phase") == "Running" else None


async def test_shares_run_on_hami_and_time_sliced_nodes_and_count_as_fractions(
    kube: Any, kube_api: Any
) -> None:
    await asyncio.to_thread(add_nodes, kube)
    cache = ClusterCapacity(client.CoreV1Api(kube_api), watch_timeout=5)
    assert await cache.wait_ready(10)
    try:
        policy_types = make_spawner(
            ["staff"], gpu_types=GPU_TYPES, group_limits={}, default_limits={"max_gpus": 2}
        ).gpu_policy.gpu_types
        types = list(policy_types.values())
        before = cache.capacity(types)
        assert before["t4-shared"].memory_total == 32768 * MIB
        assert before["t4-shared"].devices == 2 and before["a10-ts"].devices == 2

        pods = [
            await written("a", {"gpu_type": "t4-shared", "gpu_memory": "4Gi"}),
            await written("b", {"gpu_type": "t4-shared", "gpu_memory": "8Gi"}),
            await written("c", {"gpu_type": "a10-ts", "gpus": 2}),
        ]
        for body in pods:
            await asyncio.to_thread(kube.create, body)
        a = await asyncio.to_thread(
            kube.wait_for, lambda: running_on(kube, "jupyter-alice-a", HAMI_NODE), 60
        )
        b = await asyncio.to_thread(
            kube.wait_for, lambda: running_on(kube, "jupyter-alice-b", HAMI_NODE), 60
        )
        c = await asyncio.to_thread(
            kube.wait_for, lambda: running_on(kube, "jupyter-alice-c", TS_NODE), 60
        )
        # Read back through the API: one device plus its memory in MiB and cores (HAMi),
        # whole replicas (time-slicing), limits equal to requests, the share in the env.
        main = a["spec"]["containers"][0]
        assert main["resources"]["limits"] == {
            **{k: v for k, v in main["resources"]["limits"].items() if k in ("cpu", "memory")},
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": "4096",
            "nvidia.com/gpucores": "25",
        }
        assert main["resources"]["requests"]["nvidia.com/gpumem"] == "4096"
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["GPUHUB_GPU_SHARE"] == "1/4" and env["GPUHUB_GPU_MEMORY"] == str(4 << 30)
        sliced = c["spec"]["containers"][0]["resources"]["limits"]
        assert sliced["nvidia.com/gpu.shared"] == "2" and "nvidia.com/gpu" not in sliced
        assert b["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "50"

        # The hub's watch: memory left on the HAMi node, replicas on the time-sliced one,
        # and alice holding 1/4 + 1/2 + 2/4 of a GPU.
        def counted() -> bool:
            now = cache.capacity(types)
            return (
                now["t4-shared"].memory_free == (32768 - 4096 - 8192) * MIB
                and now["t4-shared"].largest_share == 16384 * MIB
                and (now["a10-ts"].free, now["a10-ts"].total) == (6, 8)
            )

        await eventually(counted)
        held = {h.name: h for h in cache.holdings("alice")}
        assert (held["a"].share, held["a"].memory) == (Fraction(1, 4), 4 << 30)
        assert (held["b"].share, held["b"].memory) == (Fraction(1, 2), 8 << 30)
        assert (held["c"].share, held["c"].memory) == (Fraction(1, 2), 0)
        assert gpus_held(held.values()) == Fraction(5, 4)

        # A share that no longer fits the node's memory waits: the scheduler counts HAMi's
        # memory resource as gpuhub asked for it (per node here; HAMi's own scheduler
        # extender also places it on one GPU, which kwok nodes do not model).
        for server in ("d", "e"):
            body = await written(server, {"gpu_type": "t4-shared", "gpu_memory": "16Gi"})
            await asyncio.to_thread(kube.create, body)
        await asyncio.to_thread(
            kube.wait_for, lambda: running_on(kube, "jupyter-alice-d", HAMI_NODE), 60
        )

        def unschedulable() -> bool:
            pod = kube.get("Pod", "jupyter-alice-e") or {}
            return any(
                c.get("reason") == "Unschedulable"
                for c in pod.get("status", {}).get("conditions") or []
            )

        await asyncio.to_thread(kube.wait_for, unschedulable, 60)
        await eventually(lambda: cache.capacity(types)["t4-shared"].memory_free == 4096 * MIB)
        # The quota counts a pending server's share too (as it counts pending servers'
        # GPUs), though it is not held: it waits for a node; the free memory above counts
        # scheduled pods only.
        # (e's first event may reach the hub a moment after d's binding counted above.)
        await eventually(lambda: gpus_counted(cache.holdings("alice")) == Fraction(13, 4))
        assert gpus_held(cache.holdings("alice")) == Fraction(9, 4)
    finally:
        await cache.stop()
