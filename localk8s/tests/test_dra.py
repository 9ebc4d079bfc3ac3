"""The local cluster speaks DRA (docs/cluster.md, "GPUs through DRA"): the simulated NVIDIA
driver's ResourceSlices, allocated by the real kube-scheduler and released by the real
controller-manager, and the process node running a pod on the devices it was allocated.

The kwok test publishes its own nodes' slices through the same code as ``make cluster``
does, so what it allocates is not shared with tests running beside it."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import (
    GPU_TAINT,
    GPU_TOLERATION,
    KWOK_TOLERATION,
    PROCESS_NODE_SELECTOR,
    Kube,
)
from localk8s import dra
from localk8s.nodes import DEFAULT_NODES_FILE, load_dra

pytestmark = pytest.mark.e2e  # a real kube-apiserver, scheduler, controller-manager and kwok

RESOURCE = dra.RESOURCE_API
GiB = 2**30


def template(name: str, device_class: str, **exactly: Any) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}
                    ]
                }
            }
        },
    }


def cel(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


def claiming_pod(name: str, claim_template: str, script: str = "sleep 600", **spec: Any) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim_template}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", script],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            **spec,
        },
    }


def claim_of(kube: Kube, pod: str) -> str:
    """The name of the claim made for ``pod`` from its template."""

    def named() -> str:
        status = (kube.get("Pod", pod) or {}).get("status", {})
        return next(
            (s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []), ""
        )

    return kube.wait_for(named)


def allocated(kube: Kube, claim: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The results of ``claim``'s allocation, once it is allocated and reserved."""

    def results() -> list[dict[str, Any]]:
        status = (kube.get("ResourceClaim", claim, api_version=RESOURCE) or {}).get("status", {})
        if not status.get("reservedFor"):
            return []
        return list(status.get("allocation", {}).get("devices", {}).get("results") or [])

    return kube.wait_for(results, timeout)


def phase(kube: Kube, pod: str) -> str:
    return str((kube.get("Pod", pod) or {}).get("status", {}).get("phase", ""))


def printed(kube: Kube, pod: str) -> str:
    """The first line a pod's container printed, once it has started."""
    kube.wait_for(lambda: phase(kube, pod) in ("Running", "Succeeded", "Failed"), 60)
    return kube.wait_for(lambda: kube.logs(pod).strip())


def slice_devices(kube: Kube, node: str) -> dict[str, dict[str, Any]]:
    obj = kube.get("ResourceSlice", dra.slice_name(node), api_version=RESOURCE)
    assert obj is not None, f"no ResourceSlice for {node}"
    spec = obj["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (dra.DRIVER, node, node)
    assert spec["pool"]["resourceSliceCount"] == 1
    assert obj["metadata"]["ownerReferences"][0]["kind"] == "Node"
    return {d["name"]: d for d in spec["devices"]}


def value(device: dict[str, Any], attribute: str) -> Any:
    return next(iter(device["attributes"][attribute].values()))


def test_the_cluster_publishes_the_nvidia_drivers_classes_and_slices(kube: Kube) -> None:
    kube.require_local("the simulated DRA driver")
    classes = {
        c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"]
        for c in kube.list("DeviceClass", api_version=RESOURCE)
    }
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        assert classes[name] == (
            f"device.driver == 'gpu.nvidia.com' && "
            f"device.attributes['gpu.nvidia.com'].type == '{kind}'"
        )
    # The nodes file's DRA nodes, as make cluster starts them.
    specs = load_dra(DEFAULT_NODES_FILE)
    if "dra-a100-0" in specs:
        a100 = slice_devices(kube, "dra-a100-0")
        assert sorted(a100) == [f"gpu-{i}" for i in range(specs["dra-a100-0"]["gpus"])]
        gpu = a100["gpu-0"]
        assert value(gpu, "productName") == "NVIDIA A100-SXM4-80GB"
        assert value(gpu, "type") == "gpu" and value(gpu, "uuid").startswith("GPU-")
        assert value(gpu, "cudaComputeCapability") == "8.0.0"
        assert gpu["capacity"]["memory"]["value"] == str(80 * GiB)
        assert "allowMultipleAllocations" not in gpu
    if "dra-h100-0" in specs:
        memory = slice_devices(kube, "dra-h100-0")["gpu-0"]["capacity"]["memory"]
        assert memory["requestPolicy"]["validRange"]["step"] == "1Mi"
        assert memory["requestPolicy"]["default"] == memory["value"]
    if "dra-mig-0" in specs:
        mig = slice_devices(kube, "dra-mig-0")
        one = mig["gpu-0-mig-1g10gb-19-0"]
        assert (value(one, "type"), value(one, "profile")) == ("mig", "1g.10gb")
        assert one["capacity"]["memory"]["value"] == str(9728 * 2**20)
        assert one["capacity"]["memorySlice0"]["value"] == "1"
        three = mig["gpu-1-mig-3g40gb-9-0"]
        assert [k for k in three["capacity"] if k.startswith("memorySlice")] == [
            f"memorySlice{i}" for i in range(4)
        ]
        assert value(three, "parentUUID") != value(one, "parentUUID")
    # The process node's own, after its nvidia.com/gpu ones, shareable by memory.
    local = slice_devices(kube, "local-0")
    node = kube.get("Node", "local-0") or {}
    first = int(node["status"]["allocatable"].get("nvidia.com/gpu", "0"))
    assert sorted(local) == [f"gpu-{i}" for i in range(first, first + len(local))]
    for device in local.values():
        assert value(device, "productName") == dra.SIMULATED_PRODUCT
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"]["memory"]["value"] == str(16 * GiB)


def test_the_scheduler_allocates_refuses_and_releases_claims(kube: Kube) -> None:
    """Whole GPUs, a MIG device and two memory shares of one GPU are allocated on nodes of
    the test's own; a claim no device can hold leaves its pod unschedulable; the claims of
    ended pods are released and, made from templates, deleted."""
    kube.require_local("kwok's fake nodes")
    suffix = secrets.token_hex(3)
    nodes = {
        f"dra-whole-{suffix}": {
            "product": "NVIDIA A100-SXM4-80GB",
            "gpus": 2,
            "mig": [{"3g.40gb": 1, "2g.20gb": 2}],
        },
        f"dra-shared-{suffix}": {"product": "NVIDIA H100 80GB HBM3", "gpus": 1, "shares": "memory"},
    }
    whole, shared = nodes
    for name, spec in nodes.items():
        kube.add_node(name, {"cpu": "32", "memory": "256Gi", "pods": "110"}, taints=[GPU_TAINT])
        uid = (kube.get("Node", name) or {})["metadata"]["uid"]
        dra.publish(kube.api, name, uid, dra.devices(name, dra.check_spec(name, spec)))

    def on(node: str) -> dict[str, Any]:
        return {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [KWOK_TOLERATION, GPU_TOLERATION],
        }

    kube.create(
        template(
            "two-a100",
            "gpu.nvidia.com",
            count=2,
            selectors=cel(
                "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
            ),
        )
    )
    kube.create(
        template(
            "mig-3g",
            "mig.nvidia.com",
            selectors=cel("device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"),
        )
    )
    kube.create(template("share-30g", "gpu.nvidia.com", capacity={"requests": {"memory": "30Gi"}}))
    kube.create(template("too-big", "gpu.nvidia.com", capacity={"requests": {"memory": "100Gi"}}))
    kube.create(claiming_pod("whole", "two-a100", **on(whole)))
    kube.create(claiming_pod("mig", "mig-3g", **on(whole)))
    for name in ("share-a", "share-b"):
        kube.create(claiming_pod(name, "share-30g", **on(shared)))
    kube.create(claiming_pod("too-big", "too-big", **on(shared)))

    claims = {p: claim_of(kube, p) for p in ("whole", "mig", "share-a", "share-b", "too-big")}
    results = {p: allocated(kube, c) for p, c in claims.items() if p != "too-big"}
    assert sorted(r["device"] for r in results["whole"]) == ["gpu-0", "gpu-1"]
    assert {(r["driver"], r["pool"]) for r in results["whole"]} == {(dra.DRIVER, whole)}
    assert [r["device"] for r in results["mig"]] == ["gpu-2-mig-3g40gb-9-0"]
    shares = results["share-a"] + results["share-b"]
    assert [r["device"] for r in shares] == ["gpu-0", "gpu-0"]  # one device, two claims
    assert all(r["consumedCapacity"]["memory"] == "30Gi" for r in shares)
    assert shares[0]["shareID"] != shares[1]["shareID"]

    def unschedulable() -> str:
        conditions = (kube.get("Pod", "too-big") or {}).get("status", {}).get("conditions") or []
        return next(
            (c.get("message", "") for c in conditions if c.get("reason") == "Unschedulable"), ""
        )

    assert "cannot allocate all claims" in kube.wait_for(unschedulable)
    too_big = kube.get("ResourceClaim", claims["too-big"], api_version=RESOURCE) or {}
    assert not too_big.get("status", {}).get("allocation")

    # Pods that end release their claims; the claims made for them are deleted.
    kube.wait_for(lambda: all(phase(kube, p) == "Running" for p in ("whole", "share-a")))
    kube.finish_pods([kube.get("Pod", "whole") or {}, kube.get("Pod", "share-a") or {}])
    kube.delete("Pod", "mig")

    def gone(pod: str) -> bool:
        return kube.get("ResourceClaim", claims[pod], api_version=RESOURCE) is None

    kube.wait_for(lambda: gone("whole") and gone("share-a") and gone("mig"), timeout=60)
    assert not gone("share-b")
    # The rest go before their nodes do (pods left on a deleted node wait for the pod
    # garbage collector, 40 s).
    for pod in kube.list("Pod"):
        kube.delete("Pod", pod["metadata"]["name"])
    kube.wait_for(lambda: not kube.list("Pod"), timeout=60)


def test_a_pod_on_the_process_node_computes_on_its_allocated_device(
    kube: Kube, tmp_path: Path
) -> None:
    """A whole simulated GPU and a 4 GiB share of one, claimed through DRA: each pod sees the
    device it was allocated as its visible GPU; ended or deleted, its claim goes."""
    kube.require_local("the process node")
    simulated = cel(f"device.attributes['gpu.nvidia.com'].productName == '{dra.SIMULATED_PRODUCT}'")
    kube.create(template("whole", "gpu.nvidia.com", selectors=simulated))
    kube.create(
        template(
            "share", "gpu.nvidia.com", selectors=simulated, capacity={"requests": {"memory": "4Gi"}}
        )
    )
    go = tmp_path / "go"
    show = "echo $CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES $GPUHUB_GPU_MEMORY $GPUHUB_GPU_SHARE"
    kube.create(
        claiming_pod("whole", "whole", f"{show}; sleep 600", nodeSelector=PROCESS_NODE_SELECTOR)
    )
    kube.create(
        claiming_pod(
            "share",
            "share",
            f"{show}; while [ ! -e {go} ]; do sleep 0.1; done",
            nodeSelector=PROCESS_NODE_SELECTOR,
        )
    )
    claims = {p: claim_of(kube, p) for p in ("whole", "share")}
    for name, claim in claims.items():
        [result] = allocated(kube, claim)
        assert result["pool"] == "local-0"
        index = result["device"].removeprefix("gpu-")
        line = printed(kube, name)
        if name == "whole":
            assert line == f"{index} {index}"
        else:
            assert line == f"{index} {index} {4 * GiB} 1/4"
    go.touch()
    kube.wait_for(lambda: phase(kube, "share") == "Succeeded")
    kube.delete("Pod", "whole")
    kube.wait_for(
        lambda: all(
            kube.get("ResourceClaim", c, api_version=RESOURCE) is None for c in claims.values()
        ),
        timeout=60,
    )


def test_kueue_counts_dra_claims_against_quota(kube: Kube) -> None:
    """Kueue's deviceClassMappings (localk8s/addons.py): a pod whose claim comes from a
    template counts one gpu.nvidia.com/gpu, a memory share too, and the next waits for quota."""
    kube.require_local("the process node and Kueue")
    kueue = "kueue.x-k8s.io/v1beta2"
    resource = dra.KUEUE_RESOURCES["gpu.nvidia.com"]
    name = f"dra-{kube.namespace}"
    kube.create(
        {
            "apiVersion": kueue,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": PROCESS_NODE_SELECTOR},
        }
    )
    kube.create(
        {
            "apiVersion": kueue,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": kube.namespace}
                },
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", resource],
                        "flavors": [
                            {
                                "name": name,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 8},
                                    {"name": resource, "nominalQuota": 1},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    kube.create(
        {
            "apiVersion": kueue,
            "kind": "LocalQueue",
            "metadata": {"name": "team"},
            "spec": {"clusterQueue": name},
        }
    )
    kube.create(template("share", "gpu.nvidia.com", capacity={"requests": {"memory": "1Gi"}}))
    for pod in ("first", "second"):
        obj = claiming_pod(pod, "share", "sleep 600")
        obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
        obj["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100m"}
        kube.create(obj)

    def workloads() -> dict[str, dict[str, Any]]:
        found = {}
        for w in kube.list("Workload"):
            conditions = {c["type"]: c for c in w.get("status", {}).get("conditions") or []}
            owner = w["metadata"]["ownerReferences"][0]["name"]
            if "QuotaReserved" in conditions:
                found[owner] = w | {"conditions": conditions}
        return found if len(found) == 2 else {}

    both = kube.wait_for(workloads, 60)
    first = both["first"]
    assert first["conditions"]["QuotaReserved"]["status"] == "True"
    [usage] = first["status"]["admission"]["podSetAssignments"]
    assert usage["resourceUsage"][resource] == "1"
    waiting = both["second"]["conditions"]["QuotaReserved"]
    assert waiting["status"] == "False"
    assert f"insufficient unused quota for {resource}" in waiting["message"]
    kube.wait_for(lambda: phase(kube, "first") == "Running")
