"""JupyterHub config for the Kubernetes demo (`make demo-k8s`): GPUSpawner and the jobs service
on the local cluster (docs/cluster.md), as the Helm chart runs them.

`python -m localk8s.demo` (which `make demo-k8s` runs) starts the cluster, makes what the
chart would in the namespace ``gpuhub-demo`` (RBAC, Kueue's queue ``gpus``), and runs this with
KUBECONFIG holding a token of z2jh's ``hub`` ServiceAccount and GPUHUB_DEMO_SERVICE_KUBECONFIG
one of the chart's ``gpuhub-service``: neither is the cluster's admin.

Servers and jobs get the process node's simulated GPUs (node ``local-0``), so they really run:
the node runs their containers' commands as processes of this machine, from this virtualenv
(the image is ignored; docs/cluster.md says what the process node does and does not do).
The same users, password, fleet admin and GPUHUB_DEMO_PORT as `make demo`.
"""

import os
import sys
from pathlib import Path

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_common import DEFAULT_LIMITS, GPU_QUOTA, GROUP_LIMITS, configure_demo, free_port

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)
_login = configure_demo(c)

NAMESPACE = os.environ.get("GPUHUB_DEMO_NAMESPACE", "gpuhub-demo")
QUEUE = os.environ.get("GPUHUB_DEMO_QUEUE", "gpus")
# 10101 for 8000, the chart's port for the service, where it is free.
SERVICE_PORT = free_port(c.JupyterHub.port + 2101)

# The simulated GPUs the process node offers through DRA, by the NVIDIA driver's attribute.
_SIMULATED = "device.attributes['gpu.nvidia.com'].productName == 'gpuhub-simulated-GPU'"

# What users may ask for: the same policy for the spawn form and the jobs service.
POLICY = {
    "images": {
        "notebook": {
            "display_name": "gpuhub notebook (CUDA 12, PyTorch)",
            "image": "ghcr.io/gpuhub/gpuhub-notebook:0.1.0",
            "description": "On the demo's process node the image is not pulled: servers and "
            "jobs run this machine's Python.",
        }
    },
    "gpu_types": {
        "sim": {
            "display_name": "Simulated GPU",
            "resource_name": "nvidia.com/gpu",
            "node_selector": {"gpuhub.io/node-agent": "process"},
            "max_gpus": 4,
            "description": "One of the 4 simulated GPUs of the cluster's process node local-0.",
            # Said, not implied by order: the service's copy below is written sorted by key.
            "default": True,
        },
        # The process node's 2 other simulated GPUs, claimed through Dynamic Resource
        # Allocation from the simulated NVIDIA driver's ResourceSlice (localk8s/dra.py): whole,
        # or a share of one's 16 GiB memory (consumable capacity).
        "dra": {
            "display_name": "Simulated GPU (DRA)",
            "dra": {"device_class": "gpu.nvidia.com", "selectors": [_SIMULATED]},
            "max_gpus": 2,
            "description": "A whole simulated GPU of local-0, claimed through Dynamic Resource "
            "Allocation.",
        },
        "dra-shared": {
            "display_name": "Simulated GPU share (DRA)",
            "dra": {"device_class": "gpu.nvidia.com", "selectors": [_SIMULATED]},
            "sharing": {"memory": "16Gi", "min": "1Gi"},
            "description": "Part of one simulated GPU's 16 GiB of memory on local-0, claimed "
            "through Dynamic Resource Allocation beside other users' parts.",
        },
    },
    "cpu_range": {"min": 0.5, "max": 4, "default": 1},
    "memory_range": {"min": "512Mi", "max": "8G", "default": "1G"},
    "group_limits": GROUP_LIMITS,
    "default_limits": DEFAULT_LIMITS,
}

c.JupyterHub.spawner_class = "gpu"
for trait, value in POLICY.items():
    setattr(c.GPUSpawner, trait, value)
c.GPUSpawner.gpu_quota = GPU_QUOTA
c.GPUSpawner.namespace = NAMESPACE
# The image's entrypoint runs jupyterhub-singleuser; the process node runs it as the agent's
# user (root on this machine), which Jupyter accepts only when told.
c.GPUSpawner.cmd = ["jupyterhub-singleuser"]
c.GPUSpawner.args = ["--allow-root"] if os.geteuid() == 0 else []
c.GPUSpawner.start_timeout = 120
# GPU servers wait in Kueue's queue with the jobs (the chart lets the hub read its line).
c.GPUSpawner.kueue_queue_name = QUEUE
c.GPUSpawner.http_timeout = 60
# User servers call the jobs service directly, with their own token (as the chart sets it).
c.GPUSpawner.environment = {"GPUHUB_JOBS_URL": f"http://127.0.0.1:{SERVICE_PORT}/services/gpuhub/"}
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    "read:users:groups!user",
    "access:services!service=gpuhub",
]

# The jobs service, as the chart deploys it: its own process and credentials.
_service_config = Path("gpuhub-service.yaml").resolve()
_service_config.write_text(
    yaml.safe_dump(
        {
            "namespace": NAMESPACE,
            "policy": POLICY,
            "gpu_quota": GPU_QUOTA,
            "job_image": POLICY["images"]["notebook"]["image"],
            "kueue": {"queue_name": QUEUE},
        }
    )
)
c.JupyterHub.services = [
    {
        "name": "gpuhub",
        "url": f"http://127.0.0.1:{SERVICE_PORT}",
        "command": [sys.executable, "-m", "gpuhub.service", "--config", str(_service_config)],
        "environment": {
            "KUBECONFIG": os.environ.get("GPUHUB_DEMO_SERVICE_KUBECONFIG", ""),
            "PATH": os.environ.get("PATH", ""),
        },
        "display": False,
    }
]
c.JupyterHub.load_roles += [
    # The chart's loadRoles: users may call the service; the service reads groups and asks
    # the hub's GPU ledger before creating anything.
    {"name": "user", "scopes": ["self", "access:services!service=gpuhub"]},
    {
        "name": "gpuhub-service",
        "services": ["gpuhub"],
        "scopes": ["read:users:name", "read:users:groups", "custom:gpuhub:grants"],
    },
]

print(
    f"\n  gpuhub Kubernetes demo (namespace {NAMESPACE} of the local cluster):\n{_login}"
    "  GPUs offered: the 4 simulated GPUs of the process node local-0, and its 2 more claimed\n"
    "  through DRA (whole, or shares of one's memory); GPU servers and jobs\n"
    f"  wait in Kueue's queue {QUEUE!r} when they are taken. KUBECONFIG=.cluster/kubeconfig to\n"
    "  look (admin).\n",
    flush=True,
)
