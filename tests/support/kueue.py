"""Kueue's objects as the admin guide sets them up, created on the test cluster (real Kueue,
localk8s/addons.py) for the queue tests.

gpuhub speaks ``kueue.x-k8s.io/v1beta1`` (Kueue serves it beside v1beta2 through its
conversion webhook), so the objects are written in v1beta1, as the admin guide shows them.
ResourceFlavors and ClusterQueues are cluster-scoped: their names carry the test's namespace,
so that a test never meets the previous test's objects while Kueue's finalizers still hold
them (a ClusterQueue goes only once its Workloads have), and ``kube`` deletes them after the
test. The LocalQueue is in the test's namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.cluster import A100_PRODUCT, Kube

KUEUE = "kueue.x-k8s.io/v1beta1"
A100 = {"nvidia.com/gpu.product": A100_PRODUCT}


@dataclass(frozen=True)
class Queues:
    """The names of what :func:`kueue_queues` made."""

    cluster_queue: str
    local_queue: str
    a100_flavor: str
    default_flavor: str


def kueue_queues(
    kube: Kube,
    gpus: int = 2,
    *,
    strategy: str = "StrictFIFO",
    namespace_selector: Any = None,
    local_queue: str = "team",
    cpu: int = 64,
    memory: str = "256Gi",
    gpu_nodes: dict[str, str] | None = None,
    fair: bool = False,
) -> Queues:
    """Flavors (a default one, and one for the GPU nodes: the A100s, or those ``gpu_nodes``
    labels select), a ClusterQueue with ``gpus`` such GPUs of nominal quota and CPU and memory
    to spare, and the LocalQueue ``local_queue`` in the test's namespace; returns once Kueue
    says the LocalQueue is active (jobs submitted before that would wait for it). ``fair``:
    the ClusterQueue orders by its LocalQueues' past usage (admission fair sharing)."""
    stem = kube.namespace
    names = Queues(f"{stem}-gpus", local_queue, f"{stem}-a100", f"{stem}-default")
    objects = _objects(names, stem, gpus, strategy, namespace_selector, cpu, memory, gpu_nodes)
    if fair:
        objects[2]["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    for obj in objects:
        kube.create(obj)

    def active() -> bool:
        queue = kube.get("LocalQueue", local_queue, api_version=KUEUE) or {}
        conditions = (queue.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    kube.wait_for(active, timeout=30)
    return names


def _objects(
    names: Queues,
    namespace: str,
    gpus: int,
    strategy: str,
    namespace_selector: Any,
    cpu: int,
    memory: str,
    gpu_nodes: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    flavors: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            **({"spec": {"nodeLabels": labels}} if labels else {}),
        }
        for name, labels in ((names.default_flavor, None), (names.a100_flavor, gpu_nodes or A100))
    ]
    cluster_queue = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": names.cluster_queue},
        "spec": {
            "namespaceSelector": {} if namespace_selector is None else namespace_selector,
            "queueingStrategy": strategy,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": names.default_flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": memory},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": names.a100_flavor,
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                        }
                    ],
                },
            ],
        },
    }
    local = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": names.local_queue, "namespace": namespace},
        "spec": {"clusterQueue": names.cluster_queue},
    }
    return [*flavors, cluster_queue, local]
