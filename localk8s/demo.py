"""``make demo-k8s``: the Kubernetes demo on the local cluster (docs/cluster.md).

Prepares what the Helm chart would make in the namespace ``gpuhub-demo`` of the local cluster,
then runs JupyterHub with ``jupyter_config/jupyterhub_config_k8s.py``:

- the chart's ServiceAccounts, Roles and bindings (rendered from helm/gpuhub with
  ``helm template``), so the hub runs as z2jh's ``hub`` account and the jobs service as the
  chart's ``gpuhub-service``, each with a token from the TokenRequest API, never as the
  cluster's admin;
- Kueue's queues for the demo's GPU types: a ResourceFlavor for the process node, a
  ClusterQueue with its 4 simulated GPUs and quota for the claims on its 2 DRA GPUs, and the
  chart's LocalQueue ``gpus``;
- the hub's config reads where those are from ``GPUHUB_DEMO_*`` variables.

Run again, it converges (server-side apply) and reuses the running cluster.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from localk8s.dra import GPU_CLASS, KUEUE_RESOURCES
from localk8s.kubeapi import KubeAPI, kubeconfig
from localk8s.launcher import DEFAULT_ROOT, ClusterError, Launcher
from localk8s.nodes import DEFAULT_NODES_FILE

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "gpuhub-demo"
QUEUE = "gpus"
KUEUE = "kueue.x-k8s.io/v1beta2"
# Kueue counts a DRA claim's devices (deviceClassMappings in count mode), a memory share as a
# whole device: room for the demo's 2 DRA GPUs whole, or for 8 claims sharing them (the
# scheduler fits the shares to the devices' memory).
DRA_CLAIMS = 8
PROCESS_NODE = {"gpuhub.io/node-agent": "process"}
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
TOKEN_SECONDS = 7 * 86400


def chart_objects(namespace: str) -> list[dict[str, Any]]:
    """The chart's RBAC and LocalQueue for the demo's namespace and queue (its ClusterQueue
    is named after the namespace)."""
    from harness.helm import make_chart, render

    values = {
        "jupyterhub": {
            "rbac": {"create": True},
            # GPU servers wait in the jobs' queue: one line for all GPU work.
            "hub": {"config": {"GPUSpawner": {"kueue_queue_name": QUEUE}}},
        },
        "jobs": {
            "kueue": {"queueName": QUEUE, "createLocalQueue": True, "clusterQueue": namespace}
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        objects = render(make_chart(folder), values=values, namespace=namespace, tmp=folder)
    return [o for o in objects if o["kind"] in (*RBAC_KINDS, "LocalQueue")]


def queues(namespace: str) -> list[dict[str, Any]]:
    """Kueue's flavor and a ClusterQueue (named after the namespace) for the process node's
    simulated GPUs."""
    return [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "process-node"},
            "spec": {"nodeLabels": PROCESS_NODE},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": [
                            "cpu",
                            "memory",
                            "nvidia.com/gpu",
                            KUEUE_RESOURCES[GPU_CLASS],
                        ],
                        "flavors": [
                            {
                                "name": "process-node",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 16},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": 4},
                                    {
                                        "name": KUEUE_RESOURCES[GPU_CLASS],
                                        "nominalQuota": DRA_CLAIMS,
                                    },
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ]


def prepare(api: KubeAPI, folder: Path, namespace: str = NAMESPACE) -> dict[str, str]:
    """Make the demo's namespace, RBAC and queues; returns the hub's environment."""
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    api.apply_all(queues(namespace))
    objects = chart_objects(namespace)
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"].setdefault("namespace", namespace)
    api.apply_all(objects)
    env = {"GPUHUB_DEMO_NAMESPACE": namespace, "GPUHUB_DEMO_QUEUE": QUEUE}
    for account, variable in (
        ("hub", "KUBECONFIG"),
        ("gpuhub-service", "GPUHUB_DEMO_SERVICE_KUBECONFIG"),
    ):
        path = folder / f"{account}-kubeconfig"
        token = api.token(namespace, account, TOKEN_SECONDS)
        path.write_text(
            kubeconfig(api.server, api.ca, token=token, user=account, namespace=namespace)
        )
        path.chmod(0o600)
        env[variable] = str(path)
    return env


def hub_command(config: Path = REPO / "jupyter_config" / "jupyterhub_config_k8s.py") -> list[str]:
    return [str(Path(sys.executable).with_name("jupyterhub")), "-f", str(config)]


def main() -> int:
    folder = REPO / ".demo-k8s"
    folder.mkdir(exist_ok=True)
    launcher = Launcher(
        Path(os.environ.get("GPUHUB_CLUSTER_ROOT", DEFAULT_ROOT)), DEFAULT_NODES_FILE, gpus=4
    )
    try:
        print(launcher.up(), flush=True)
    except ClusterError as error:
        print(f"make demo-k8s: the cluster did not start: {error}", file=sys.stderr)
        return 1
    env = prepare(launcher.cluster.api(), folder)
    os.chdir(folder)
    command = hub_command()
    # JupyterHub finds configurable-http-proxy (npm) and jupyterhub-singleuser (this venv) on
    # PATH, as `make demo-k8s` sets it.
    path = os.pathsep.join(
        [
            str(REPO / "node_modules" / ".bin"),
            str(Path(sys.executable).parent),
            os.environ.get("PATH", ""),
        ]
    )
    os.execve(command[0], command, {**os.environ, **env, "PATH": path})


if __name__ == "__main__":
    sys.exit(main())
