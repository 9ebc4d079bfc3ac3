"""Kueue's objects as the admin guide sets them up, created on a cluster for the queue tests."""

from __future__ import annotations

from typing import Any

KUEUE = "kueue.x-k8s.io/v1beta1"
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def kueue_queues(
    kubesim: Any,
    gpus: int = 2,
    *,
    strategy: str = "StrictFIFO",
    namespace_selector: Any = None,
    local_queue: str = "team",
    cpu: int = 64,
    memory: str = "256Gi",
    namespace: str = "default",
) -> None:
    """Flavors (default, and a100 on the A100 nodes), the ClusterQueue ``gpus`` with ``gpus``
    A100s of nominal quota and CPU and memory to spare, and the LocalQueue ``local_queue`` in
    ``namespace``. ``kubesim``: anything with ``create(obj)`` (kubesim, or a test's
    :class:`~tests.support.cluster.Kube`, which deletes them after the test)."""
    for name, labels in (("default-flavor", None), ("a100", A100)):
        kubesim.create(
            {
                "apiVersion": KUEUE,
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                **({"spec": {"nodeLabels": labels}} if labels else {}),
            }
        )
    kubesim.create(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "gpus"},
            "spec": {
                "namespaceSelector": {} if namespace_selector is None else namespace_selector,
                "queueingStrategy": strategy,
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
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
                                "name": "a100",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                            }
                        ],
                    },
                ],
            },
        }
    )
    kubesim.create(
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": namespace},
            "spec": {"clusterQueue": "gpus"},
        }
    )
