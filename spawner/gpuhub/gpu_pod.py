"""GPU rules every gpuhub pod follows, single-user servers and jobs alike.

:class:`gpuhub.kube.GPUSpawner` and the Kubernetes job backends build their pods from these,
so a job gets exactly what a server with the same options would: GPU limit == request,
the GPU type's node selector and tolerations, a memory-backed ``/dev/shm``, and for a
CPU-only pod an environment that hides every GPU of the node.
"""

from __future__ import annotations

from typing import Any

from .options import LaunchOptions
from .quantity import format_cpu, format_memory

# Where the memory-backed /dev/shm goes; PyTorch DataLoader workers need far more than 64M.
SHM_VOLUME = "gpuhub-dshm"


def gpu_resources(options: LaunchOptions) -> dict[str, str]:
    """``{resource_name: count}`` of the chosen GPU type; empty for a CPU-only pod."""
    if options.gpu_type is None or options.gpus == 0:
        return {}
    return {options.gpu_type.resource_name: str(options.gpus)}


def container_resources(options: LaunchOptions) -> dict[str, dict[str, str]]:
    """A container's ``resources``: requests == limits (Guaranteed QoS; extended resources
    must have request == limit in Kubernetes anyway)."""
    amounts = {
        "cpu": format_cpu(options.cpu),
        "memory": format_memory(options.memory),
        **gpu_resources(options),
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def gpu_env(options: LaunchOptions | None) -> dict[str, str]:
    """Environment that says which GPUs the pod has, and hides all of them when none.

    On a GPU node the NVIDIA runtime would otherwise expose every GPU to images that set
    ``NVIDIA_VISIBLE_DEVICES=all`` (all CUDA images do): ``void`` exposes none.
    """
    if options is None or options.gpu_type is None or options.gpus == 0:
        return {
            "NVIDIA_VISIBLE_DEVICES": "void",
            "CUDA_VISIBLE_DEVICES": "",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPUHUB_GPUS": "0",
            "GPUHUB_GPU_TYPE": "",
            "GPUHUB_GPU_TYPE_NAME": "",
        }
    return {
        "GPUHUB_GPUS": str(options.gpus),
        "GPUHUB_GPU_TYPE": options.gpu_type.key,
        # What the lab calls the GPUs it was given (gpuhub_lab.metrics.assigned).
        "GPUHUB_GPU_TYPE_NAME": options.gpu_type.display_name,
    }


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
