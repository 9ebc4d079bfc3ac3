"""Everything gpuhub reads from a pod or a node, through the functions that read it: what
the tests of gpuhub.k8s.objects and gpuhub.k8s.protobuf compare between two decodings of
the same objects (recorded in tests/k8s/data, or read from a real apiserver)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpuhub.core.policy import Policy
from gpuhub.hub.ledger.capacity import node_part
from gpuhub.jobs.kinds import of_pod, pod_workload
from gpuhub.k8s.inventory import (
    _gpuhub_env,
    node_info,
    node_serves,
    pod_extra,
    pod_gpus,
    pod_holding,
    pod_info,
)
from gpuhub.k8s.kueue import gated

DATA = Path(__file__).parents[1] / "k8s" / "data"
POLICY = Policy.from_config(
    gpu_types={
        "a100": {
            "display_name": "A100",
            "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "tolerations": [{"operator": "Exists"}],
        },
        "t4": {
            "display_name": "T4 shared",
            "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "Tesla-T4"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "sharing": {"memory": "15Gi", "memory_resource": "nvidia.com/gpumem"},
        },
        "mig": {"display_name": "MIG", "resource_name": "nvidia.com/mig-1g.10gb"},
        "amd": {"display_name": "AMD", "resource_name": "amd.com/gpu"},
    }
)


def pod_facts(pod: dict[str, Any]) -> dict[str, Any]:
    """Everything gpuhub reads from a pod, through the functions that read it."""
    meta = pod.get("metadata") or {}
    kind = of_pod(meta)
    return {
        "key": (meta.get("namespace"), meta.get("name")),
        "version": meta.get("resourceVersion"),
        "info": pod_info(pod),
        "gpus": pod_gpus(pod),
        "extra": pod_extra(pod),
        "holding": pod_holding(pod, pod_workload),
        "gated": gated(pod),
        "env": _gpuhub_env(pod),
        "kind": kind,
        "workload": pod_workload(meta),
        "between": kind.between(meta) if kind is not None and hasattr(kind, "between") else None,
    }


def node_facts(node: dict[str, Any]) -> dict[str, Any]:
    info = node_info(node)
    facts = asdict(info)
    # What a taint means to the scheduler; the API's timeAdded is not read.
    facts["taints"] = [(t.get("key"), t.get("value"), t.get("effect")) for t in info.taints]
    for gpu_type in POLICY.gpu_types.values():
        facts[gpu_type.key] = (node_serves(info, gpu_type), node_part(info, gpu_type))
    return facts
