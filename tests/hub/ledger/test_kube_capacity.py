"""gpuhub.hub.ledger.capacity: live GPU figures from a watch of the cluster's nodes and pods, exactly right.

The A100 and MIG nodes are kwok's (localk8s/nodes.yaml); the process node local-0 adds 4
simulated ``nvidia.com/gpu`` that no A100 selector matches."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio import client, config

from gpuhub.core.policy import Policy
from gpuhub.hub.ledger.capacity import CapacityUnavailable, ClusterCapacity
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from harness.cluster import A100_PRODUCT, GPU_TAINT, GPU_TOLERATION, KWOK_TOLERATION
from tests.support.wait import eventually

pytestmark = pytest.mark.e2e  # a real kube-apiserver, scheduler and kwok

TOLERATE_GPU = [GPU_TOLERATION, KWOK_TOLERATION]
A100_CONFIG = {
    "display_name": "NVIDIA A100 80GB",
    "resource_name": "nvidia.com/gpu",
    "node_selector": {"nvidia.com/gpu.product": A100_PRODUCT},
    "tolerations": TOLERATE_GPU,
    "max_gpus": 8,
}
POLICY = Policy.from_config(
    gpu_types={
        "a100": A100_CONFIG,
        "a100-1g": {
            "display_name": "A100 MIG 1g.10gb",
            "resource_name": "nvidia.com/mig-1g.10gb",
            "tolerations": TOLERATE_GPU,
            "max_gpus": 1,
        },
        # Misconfigured: no toleration for the GPU nodes' taint, so only the untainted
        # process node (4 simulated GPUs) serves it.
        "untolerated": {"display_name": "Untolerated", "resource_name": "nvidia.com/gpu"},
    }
)
TYPES = list(POLICY.gpu_types.values())
A100 = POLICY.gpu_types["a100"]


def gpu_pod(
    name: str, gpus: int, resource: str = "nvidia.com/gpu", node: str | None = None
) -> dict:
    spec: dict = {
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "resources": {"limits": {resource: str(gpus)}},
            }
        ],
        "tolerations": TOLERATE_GPU,
        "restartPolicy": "Never",  # so that a finished pod is Succeeded and frees its GPUs
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _unschedulable(kube, name: str) -> bool:
    """The scheduler said the pod fits nowhere."""
    pod = kube.get("Pod", name) or {}
    conditions = pod.get("status", {}).get("conditions") or []
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


@pytest.fixture
async def cache(kube_api):
    capacity = ClusterCapacity(client.CoreV1Api(kube_api), watch_timeout=5)
    assert await capacity.wait_ready(10)
    yield capacity
    await capacity.stop()


async def test_initial_figures_per_type(cache):
    assert cache.capacity(TYPES) == {
        "a100": GPUCapacity(free=16, total=16, largest_free=8),
        "a100-1g": GPUCapacity(free=7, total=7, largest_free=7),
        "untolerated": GPUCapacity(free=4, total=4, largest_free=4),
    }
    fit = cache.fit(A100, 4)
    assert (fit.nodes, fit.max_gpus, fit.max_cpu, fit.max_memory) == (2, 8, 64.0, 512 * 2**30)


async def test_pods_take_and_give_back_gpus(kube, kube_api, cache):
    v1 = client.CoreV1Api(kube_api)
    ns = kube.namespace
    await v1.create_namespaced_pod(ns, gpu_pod("three", 3, node="a100-0"))
    await v1.create_namespaced_pod(ns, gpu_pod("two", 2, node="a100-1"))
    await v1.create_namespaced_pod(ns, gpu_pod("slice", 1, "nvidia.com/mig-1g.10gb"))
    await eventually(
        lambda: cache.capacity(TYPES)["a100"] == GPUCapacity(free=11, total=16, largest_free=6)
    )
    await eventually(
        lambda: cache.capacity(TYPES)["a100-1g"] == GPUCapacity(free=6, total=7, largest_free=6)
    )
    # A pod that cannot be scheduled holds nothing.
    await v1.create_namespaced_pod(ns, gpu_pod("too-big", 8, node="a100-0"))
    await eventually(lambda: _unschedulable(kube, "too-big"))
    assert cache.capacity(TYPES)["a100"].free == 11
    # Finishing (Succeeded) and deletion give GPUs back.
    three = await asyncio.to_thread(kube.get, "Pod", "three")
    await asyncio.to_thread(kube.finish_pods, [three])
    # too-big then gets all 8 of a100-0's GPUs
    await eventually(
        lambda: cache.capacity(TYPES)["a100"] == GPUCapacity(free=6, total=16, largest_free=6)
    )
    await v1.delete_namespaced_pod("two", ns, grace_period_seconds=0)
    await eventually(
        lambda: cache.capacity(TYPES)["a100"] == GPUCapacity(free=8, total=16, largest_free=8)
    )


async def test_nodes_joining_leaving_and_cordoned(kube, kube_api, cache):
    """Nodes of this test's own join, one is cordoned, one leaves (the cluster's own A100
    nodes stay for the other tests)."""
    a100 = {"nvidia.com/gpu.product": A100_PRODUCT}
    big, small = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 4}, {"nvidia.com/gpu": 2}
    await asyncio.to_thread(kube.add_node, "a100-2", big, a100)
    await eventually(
        lambda: cache.capacity(TYPES)["a100"] == GPUCapacity(free=20, total=20, largest_free=8)
    )
    await asyncio.to_thread(kube.add_node, "a100-3", small, a100)
    await eventually(lambda: cache.capacity(TYPES)["a100"].total == 22)
    v1 = client.CoreV1Api(kube_api)
    await v1.patch_node("a100-3", {"spec": {"unschedulable": True}})
    await eventually(
        lambda: cache.capacity(TYPES)["a100"] == GPUCapacity(free=20, total=20, largest_free=8)
    )
    await asyncio.to_thread(kube.remove_node, "a100-2")
    await eventually(
        lambda: cache.capacity(TYPES)["a100"] == GPUCapacity(free=16, total=16, largest_free=8)
    )


async def test_snapshot_is_reused_until_something_changes(kube, kube_api, cache):
    first = cache.capacity(TYPES)
    assert cache.capacity(TYPES) is first
    await client.CoreV1Api(kube_api).create_namespaced_pod(kube.namespace, gpu_pod("one", 1))
    await eventually(lambda: cache.capacity(TYPES) is not first)


async def test_a_node_heartbeat_keeps_the_snapshot(kube, kube_api, cache):
    """A kubelet posts its node's status every few minutes (thousands of nodes: several a
    second); a heartbeat changes nothing the figures read, so the node's record stays as it
    was and the next form does not recompute. A change they read does.

    Other tests' namespaces end in the background and move the snapshot on their own, so the
    test watches the node's record rather than counting generations."""
    a100 = {"nvidia.com/gpu.product": A100_PRODUCT}
    for name in ("a100-beat", "a100-next"):
        await asyncio.to_thread(kube.add_node, name, {"nvidia.com/gpu": 2}, a100)
    await eventually(lambda: cache.capacity(TYPES)["a100"].total == 20)
    # The node lifecycle controller lifts a new node's not-ready taint a moment after it is
    # Ready: a change the figures read, which must be in before looking.
    await eventually(
        lambda: (
            not any(
                t["key"].startswith("node.kubernetes.io/")
                for name in ("a100-beat", "a100-next")
                for t in cache.nodes[name].taints
            )
        )
    )
    record = cache.nodes["a100-beat"]
    v1 = client.CoreV1Api(kube_api)
    # A minute on: kwok has just written a heartbeat of this second, and an equal one would
    # change nothing at all.
    now = (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    beat = {
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": now}]}
    }
    await v1.patch_node_status("a100-beat", beat)
    # Then a change the figures read (a label a GPU type could select) on the other node: the
    # nodes' watch delivers both in order, so once it is in, so is the heartbeat.
    generation = cache.generation
    await v1.patch_node("a100-next", {"metadata": {"labels": {"gpuhub.io/rack": "r1"}}})
    await eventually(lambda: cache.nodes["a100-next"].labels.get("gpuhub.io/rack") == "r1")
    assert cache.nodes["a100-beat"] is record
    assert cache.generation > generation


async def test_pods_without_gpus_keep_the_snapshot(kube, kube_api, cache):
    """Most of a cluster's pods, and of its pod events, hold no GPU; they do not make the next
    form recompute the figures, nor do a GPU pod's status updates after it is bound.

    Other tests' namespaces end in the background and move the snapshot on their own, so the
    test watches the pods' records; a later GPU pod marks when the earlier events are in (one
    watch delivers them in order)."""
    v1 = client.CoreV1Api(kube_api)
    ns = kube.namespace
    cpu = gpu_pod("cpu-only", 0, node="a100-0")
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    await v1.create_namespaced_pod(ns, cpu)
    await v1.create_namespaced_pod(ns, gpu_pod("one", 1, node="a100-0"))
    await eventually(lambda: (ns, "one") in cache.pods)
    record = cache.pods[(ns, "one")]
    for name in ("cpu-only", "one"):
        await eventually(
            lambda name=name: kube.get("Pod", name)["status"].get("phase") == "Running"
        )
    await v1.create_namespaced_pod(ns, gpu_pod("marker", 1, node="a100-1"))
    await eventually(lambda: (ns, "marker") in cache.pods)
    assert (ns, "cpu-only") not in cache.pods
    assert cache.pods[(ns, "one")] is record  # its status updates changed nothing counted
    assert cache.capacity(TYPES)["a100"].free == 14


async def test_recovers_from_dropped_watches_and_compaction(kube, kube_api, kube_faults):
    """Through the fault proxy: every open watch is cut, the next two requests for pods fail,
    and the watch history is compacted (a resumed watch gets 410 Gone); the cache lists
    again and is right."""
    faulty = await config.new_client_from_config(config_file=str(kube_faults.kubeconfig))
    capacity = ClusterCapacity(client.CoreV1Api(faulty), watch_timeout=5)
    try:
        assert await capacity.wait_ready(10)
        # Both watches (nodes, pods) are open through the proxy before the faults begin.
        await eventually(lambda: kube_faults.open_watches() >= 2)
        v1 = client.CoreV1Api(kube_api)
        # The next two requests for pods fail (resumed watches or lists alike); every watch
        # resumes from before the compaction.
        kube_faults.fail_requests(500, count=2, path="/api/v1/pods")
        await asyncio.to_thread(kube_faults.compact)
        assert await asyncio.to_thread(kube_faults.drop_watches, True) >= 2
        await v1.create_namespaced_pod(kube.namespace, gpu_pod("during", 2, node="a100-0"))
        await eventually(
            lambda: capacity.available and capacity.capacity(TYPES)["a100"].free == 14,
            timeout=20,
        )
    finally:
        await capacity.stop()
        await faulty.close()


async def test_lists_in_pages_where_lists_do_not_stream(kube, kube_api, kube_faults, cache):
    """An apiserver that cannot stream lists (before Kubernetes 1.27, or WatchList off)
    refuses ``sendInitialEvents`` with 422: the cache lists in pages instead, then watches,
    and its figures and holdings are the streaming cache's."""
    faulty = await config.new_client_from_config(config_file=str(kube_faults.kubeconfig))
    kube_faults.fail_requests(422, count=2, watch=True)  # the two kinds' streaming lists
    paged = ClusterCapacity(client.CoreV1Api(faulty), watch_timeout=5)
    try:
        assert await paged.wait_ready(10)
        assert not paged.stream_lists and cache.stream_lists
        assert paged.capacity(TYPES) == cache.capacity(TYPES)
        assert paged.holdings() == cache.holdings()
        v1 = client.CoreV1Api(kube_api)
        await v1.create_namespaced_pod(kube.namespace, gpu_pod("paged", 2, node="a100-1"))
        await eventually(lambda: (kube.namespace, "paged") in paged.pods)
        await eventually(lambda: (kube.namespace, "paged") in cache.pods)
        assert paged.capacity(TYPES) == cache.capacity(TYPES)
    finally:
        await paged.stop()
        await faulty.close()


async def test_unreachable_cluster_says_so(tmp_path):
    from harness.hub.process import free_port
    from localk8s.kubeapi import kubeconfig

    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(f"http://127.0.0.1:{free_port()}", tmp_path / "none", token="x"))
    api_client = await config.new_client_from_config(config_file=str(path))
    capacity = ClusterCapacity(client.CoreV1Api(api_client), request_timeout=2)
    try:
        assert not await capacity.wait_ready(1)
        with pytest.raises(CapacityUnavailable) as exc:
            capacity.capacity(TYPES)
        assert "Connect" in str(exc.value) or "connect" in str(exc.value)
    finally:
        await capacity.stop()
        await api_client.close()


async def test_spawner_counts_only_nodes_its_pods_may_use(kube, monkeypatch):
    """GPUSpawner's figures and refusals apply the admin's spawner-wide node selector too."""
    from types import SimpleNamespace

    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import kube_config
    from kubespawner import clients as kubespawner_clients
    from tornado.web import HTTPError
    from traitlets.config import Config

    from gpuhub import GPUSpawner
    from gpuhub.hub.ledger.capacity import shared_capacity
    from gpuhub.hub.spawn_options import apply_gpuhub_options

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kube.kubeconfig))
    default = Configuration.get_default_copy()
    kubespawner_clients.load_config.cache_clear()
    await asyncio.to_thread(
        kube.add_node,
        "research-a100",
        {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 4},
        {"nvidia.com/gpu.product": A100_PRODUCT, "pool": "research"},
        [GPU_TAINT],
    )
    config = Config()
    config.GPUSpawner.gpu_types = {"a100": {**A100_CONFIG, "max_gpus": 16}}
    config.GPUSpawner.default_limits = {"max_gpus": 16}
    config.GPUSpawner.node_selector = {"pool": "research"}
    user = SimpleNamespace(name="alice", id=1, url="/user/alice/", groups=[])
    spawner = GPUSpawner(_mock=True, user=user, config=config)
    try:
        figures, note = await spawner.gpu_capacity()
        assert (figures, note) == ({"a100": GPUCapacity(free=4, total=4, largest_free=4)}, "")
        with pytest.raises(HTTPError) as refused:
            await apply_gpuhub_options(spawner, {"gpu_type": "a100", "gpus": 6})
        assert refused.value.status_code == 400
        assert "the most on one node is 4" in refused.value.jupyterhub_message
    finally:
        await shared_capacity(spawner.api).stop()
        kubespawner_clients.load_config.cache_clear()
        Configuration.set_default(default)
