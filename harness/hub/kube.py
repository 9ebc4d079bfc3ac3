"""GPUSpawner's admin config for the Kubernetes end-to-end tests, on the test cluster
(harness/cluster.py).

Two GPU types: ``a100`` places servers on kwok's fake A100 nodes (their pods run, but no
process: for figures, manifests and refusals), ``local`` on the process node ``local-0``,
whose pods really run, so a server of that type answers the hub. CPU-only servers tolerate
no taint and land on ``local-0`` too.
"""

from __future__ import annotations

import os
import textwrap

from harness.cluster import (
    A100_PRODUCT,
    GPU_TOLERATION,
    KWOK_TOLERATION,
    PROCESS_NODE_SELECTOR,
)

# The process node runs servers as this process's user; real images run them as jovyan.
ALLOW_ROOT = os.environ.get("GPUHUB_TEST_ALLOW_ROOT", "1" if os.getuid() == 0 else "0") == "1"

GPU_TYPES = {
    "a100": {
        "display_name": "NVIDIA A100 80GB",
        "resource_name": "nvidia.com/gpu",
        "node_selector": {"nvidia.com/gpu.product": A100_PRODUCT},
        "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
        # More than any node has, so that the cluster's own limit shows.
        "max_gpus": 16,
    },
    "a100-1g": {
        "display_name": "A100 MIG 1g.10gb slice",
        "resource_name": "nvidia.com/mig-1g.10gb",
        "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
        "max_gpus": 1,
    },
    "local": {
        "display_name": "Simulated GPU",
        "resource_name": "nvidia.com/gpu",
        "node_selector": PROCESS_NODE_SELECTOR,
        "max_gpus": 4,
    },
}


def hub_config(namespace: str, extra: str = "") -> str:
    """GPUSpawner's admin config for these tests (docs/architecture.md's example, scaled down),
    spawning into ``namespace``."""
    return textwrap.dedent(
        f"""
            c.JupyterHub.spawner_class = "gpuhub.GPUSpawner"
            c.JupyterHub.cleanup_servers = False
            c.GPUSpawner.namespace = {namespace!r}
            c.GPUSpawner.images = {{
                "pytorch": {{"display_name": "PyTorch 2 + CUDA 12", "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20", "default": True}},
                "cpu": {{"display_name": "SciPy (CPU)", "image": "quay.io/jupyter/scipy-notebook:2025-10-20"}},
            }}
            c.GPUSpawner.gpu_types = {GPU_TYPES!r}
            c.GPUSpawner.cpu_range = {{"min": 0.5, "max": 32, "default": 1}}
            c.GPUSpawner.memory_range = {{"min": "512M", "max": "256G", "default": "1G"}}
            c.GPUSpawner.default_limits = {{"max_gpus": 16}}
            # The image's entrypoint would run this; the process node runs it from this
            # machine's virtualenv.
            c.GPUSpawner.cmd = ["jupyterhub-singleuser"]
            # The process node runs it as this test's user; images run it as jovyan, never
            # as root.
            c.GPUSpawner.args = ["--allow-root"] if {ALLOW_ROOT!r} else []
            c.GPUSpawner.start_timeout = 60
            c.GPUSpawner.http_timeout = 60
            c.GPUSpawner.k8s_api_request_retry_timeout = 20
            c.GPUSpawner.poll_interval = 2  # notice dead servers quickly
            """
    ) + textwrap.dedent(extra)
