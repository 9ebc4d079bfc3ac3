"""Admin configurations shared by the tests (the docs/architecture.md example, and variations)."""

from __future__ import annotations

from typing import Any

from gpuhub.core.policy import Policy
from harness.hub.kube import GPU_TYPES

DESIGN_CONFIG: dict[str, Any] = {
    "images": {
        "pytorch": {
            "display_name": "PyTorch 2 + CUDA 12",
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20",
            "default": True,
        },
        "cpu": {
            "display_name": "SciPy (CPU)",
            "image": "quay.io/jupyter/scipy-notebook:2025-10-20",
        },
    },
    "custom_image_pattern": r"registry\.example\.org/[a-z0-9._/-]+:[A-Za-z0-9._-]+",
    "gpu_types": {
        "a100": {
            "display_name": "NVIDIA A100 80GB",
            "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "max_gpus": 8,
        },
        "a100-1g": {
            "display_name": "A100 MIG 1g.10gb slice",
            "resource_name": "nvidia.com/mig-1g.10gb",
            "max_gpus": 1,
        },
    },
    "cpu_range": {"min": 0.5, "max": 32, "default": 2},
    "memory_range": {"min": "1G", "max": "256G", "default": "8G"},
    "group_limits": {
        "students": {"max_gpus": 1, "gpu_types": ["a100-1g"]},
        "staff": {"max_gpus": 8},
    },
    "default_limits": {"max_gpus": 1},
}


def design_policy() -> Policy:
    return Policy.from_config(**DESIGN_CONFIG)


# The design policy with the test cluster's GPU types (harness/hub/kube.py): ``a100``
# and ``a100-1g`` land on kwok's fake nodes (running, no process), ``local`` on the process
# node ``local-0``, where a pod really runs.
CLUSTER_CONFIG: dict[str, Any] = {**DESIGN_CONFIG, "gpu_types": GPU_TYPES}


def cluster_policy() -> Policy:
    """:data:`CLUSTER_CONFIG` as the Policy the jobs code reads."""
    return Policy.from_config(**CLUSTER_CONFIG)
