"""GPU rules every gpuhub pod follows, single-user servers and jobs alike.

:class:`gpuhub.hub.gpu_spawner.GPUSpawner` and the Kubernetes job backends build their pods from these,
so a job gets exactly what a server with the same options would: GPU limit == request,
the GPU type's node selector and tolerations, a memory-backed ``/dev/shm``, and for a
CPU-only pod an environment that hides every GPU of the node. Every job kind's manifest
(Job, PyTorchJob, TFJob, and any kind added later) builds its containers from here, so a
share of a GPU (:mod:`gpuhub.core.sharing`) reaches each of them the same way: one device of the
type's resource plus its memory (and cores) resources for a type shared by memory, whole
replicas for a time-sliced one, and ``GPUHUB_GPU_SHARE`` / ``GPUHUB_GPU_MEMORY`` in the
environment, which the hub's ledger reads back from the pods it watches. A type claimed
through DRA (:mod:`gpuhub.k8s.dra`) has no GPU resource at all: its container names the pod's
claim instead.
"""

from __future__ import annotations

from typing import Any

from gpuhub.core.holder_env import holder_env
from gpuhub.core.options import LaunchOptions
from gpuhub.core.quantity import format_cpu, format_memory
from gpuhub.core.sharing import Sharing
from gpuhub.k8s.dra import claims_gpus, container_claims

# Where the memory-backed /dev/shm goes; PyTorch DataLoader workers need far more than 64M.
SHM_VOLUME = "gpuhub-dshm"


def gpu_resources(options: LaunchOptions) -> dict[str, str]:
    """``{resource_name: count}`` of the chosen GPU type; empty for a CPU-only pod and for a
    type claimed through DRA (its claim carries the GPUs)."""
    if options.gpu_type is None or options.gpus == 0 or options.gpu_type.dra is not None:
        return {}
    gpu_type = options.gpu_type
    sharing = gpu_type.sharing
    if sharing is None or sharing.memory is None or options.gpu_memory is None:
        # Whole GPUs, or whole replicas of a time-sliced GPU.
        return {gpu_type.resource_name: str(options.gpus)}
    # One device, and its share of the device's memory in MiB (HAMi's unit) and compute.
    amounts = {
        gpu_type.resource_name: "1",
        sharing.memory_resource: str(Sharing.mib(options.gpu_memory)),
    }
    if sharing.cores_resource:
        amounts[sharing.cores_resource] = str(sharing.cores(options.gpu_memory))
    return amounts


def container_resources(options: LaunchOptions) -> dict[str, Any]:
    """A container's ``resources``: requests == limits (Guaranteed QoS; extended resources
    must have request == limit in Kubernetes anyway), and a DRA type's claim."""
    amounts = {
        "cpu": format_cpu(options.cpu),
        "memory": format_memory(options.memory),
        **gpu_resources(options),
    }
    resources: dict[str, Any] = {"requests": dict(amounts), "limits": dict(amounts)}
    if claims_gpus(options):
        resources["claims"] = container_claims()
    return resources


def gpu_env(options: LaunchOptions | None) -> dict[str, str]:
    """Environment that says which GPUs the pod has, and hides all of them when none
    (:func:`gpuhub.core.holder_env.holder_env`, as for a workstation's servers)."""
    if options is None or options.gpu_type is None or options.gpus == 0:
        return holder_env(0, devices=(), container=True)
    return holder_env(
        options.gpus,
        options.gpu_type.key,
        options.gpu_type.display_name,
        share=options.share,
        gpu_memory=options.gpu_memory,
        container=True,
    )


def shm_volume(options: LaunchOptions) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The ``/dev/shm`` volume and mount of a GPU pod (half its memory), None without GPUs."""
    if options.gpu_type is None or options.gpus == 0:
        return None
    volume = {
        "name": SHM_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": format_memory(options.memory // 2)},
    }
    return volume, {"name": SHM_VOLUME, "mountPath": "/dev/shm"}


def placement(options: LaunchOptions) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Node selector and tolerations of the chosen GPU type (empty for CPU-only)."""
    if options.gpu_type is None or options.gpus == 0:
        return {}, []
    return dict(options.gpu_type.node_selector), [dict(t) for t in options.gpu_type.tolerations]
