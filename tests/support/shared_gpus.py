"""Shared GPUs on the test cluster: kwok nodes that advertise HAMi's resources
(``nvidia.com/gpu`` vGPU slots, ``nvidia.com/gpumem`` in MiB, ``nvidia.com/gpucores``) and
time-slicing's (``nvidia.com/gpu.shared`` with GPU feature discovery's labels), and the GPU
types of an admin's config that place shares on them. Servers' shares use them
(tests/k8s/test_kube_shares.py), and so do jobs' (tests/jobs/test_jobs_k8s.py)."""

from __future__ import annotations

from typing import Any

from harness.cluster import GPU_TAINT, GPU_TOLERATION, KWOK_TOLERATION

HAMI_NODE, TS_NODE = "t4-hami-shares", "a10-ts-shares"
T4, A10 = "Tesla-T4-shares-test", "NVIDIA-A10-shares-test"
TOLERATE = [GPU_TOLERATION, KWOK_TOLERATION]
GPU_TYPES = {
    "t4-shared": {
        "display_name": "T4, shared",
        "default": True,
        "resource_name": "nvidia.com/gpu",
        "node_selector": {"nvidia.com/gpu.product": T4},
        "tolerations": TOLERATE,
        "sharing": {
            "memory": "16Gi",
            "min": "1Gi",
            "memory_resource": "nvidia.com/gpumem",
            "cores_resource": "nvidia.com/gpucores",
        },
        "max_gpus": 1,
    },
    "a10-ts": {
        "display_name": "A10, time-sliced",
        "resource_name": "nvidia.com/gpu.shared",
        "node_selector": {"nvidia.com/gpu.product": A10},
        "tolerations": TOLERATE,
        "sharing": {"replicas": 4},
        "max_gpus": 2,
    },
}


def add_nodes(kube: Any) -> None:
    """Two T4s under HAMi (10 vGPU slots each, 16 GiB each), two A10s time-sliced 4 ways."""
    kube.add_node(
        HAMI_NODE,
        {
            "cpu": "16",
            "memory": "64Gi",
            "pods": "110",
            "nvidia.com/gpu": "20",
            "nvidia.com/gpumem": str(2 * 16384),
            "nvidia.com/gpucores": "200",
        },
        labels={"nvidia.com/gpu.product": T4},
        taints=[GPU_TAINT],
    )
    kube.add_node(
        TS_NODE,
        {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu.shared": "8"},
        labels={
            "nvidia.com/gpu.product": A10,
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.replicas": "4",
        },
        taints=[GPU_TAINT],
    )
