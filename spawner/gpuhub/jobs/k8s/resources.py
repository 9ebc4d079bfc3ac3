"""What a workload asks for, read from its manifest: GPUs (whole, shared or claimed through
DRA), the GPU resource, image, CPU and memory. Plain functions of the object, no I/O."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpuhub.core.env import GPU_TYPE_ENV, GPUS_ENV
from gpuhub.core.gpu_resources import is_gpu_resource
from gpuhub.core.sharing import share_from_env
from gpuhub.jobs.k8s.status import Obj
from gpuhub.jobs.kinds import of_object
from gpuhub.k8s import dra


def pod_gpus(pod: Obj) -> int:
    spec = pod.get("spec") or {}
    return sum(container_gpus(c, spec) for c in spec.get("containers") or [])


def container_gpus(container: Obj, pod_spec: Obj) -> int:
    """The GPUs a container asks for: its GPU resources, or for a type claimed through DRA
    (gpuhub.k8s.dra: a claim, no GPU resource) the count gpuhub gave it in its environment."""
    limits = (container.get("resources") or {}).get("limits") or {}
    gpus = sum(int(v) for k, v in limits.items() if is_gpu_resource(k))
    if gpus or not pod_spec.get("resourceClaims"):
        return gpus
    claims = (container.get("resources") or {}).get("claims") or []
    if not any(c.get("name") == dra.POD_CLAIM for c in claims):
        return 0
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    count = str(env.get(GPUS_ENV) or "")
    return int(count) if count.isdigit() else 0


def gpu_resource(obj: Obj) -> str:
    """The GPU resource (``nvidia.com/gpu``, a MIG slice's) a workload's primary container
    asks for; "" for a CPU-only one."""
    container = of_object(obj).primary_container(obj)
    limits = (container.get("resources") or {}).get("limits") or {}
    return next((str(k) for k, v in limits.items() if is_gpu_resource(k) and v), "")


def workload_gpus(obj: Obj) -> int:
    templates = of_object(obj).pod_templates(obj)
    return sum(pod_gpus(template) * count for template, count in templates)


def workload_share(obj: Obj) -> tuple[Fraction | None, int]:
    """What a workload of shared GPUs counts as, in GPUs, and its GPU memory (all its pods;
    :mod:`gpuhub.core.sharing`, from the environment gpuhub gave its pods); ``(None, 0)`` for
    whole GPUs."""
    total, memory, shared = Fraction(0), 0, False
    for template, count in of_object(obj).pod_templates(obj):
        containers = (template.get("spec") or {}).get("containers") or []
        env = {e["name"]: e.get("value") for c in containers for e in c.get("env") or []}
        share, size = share_from_env(env)
        if share is not None:
            shared = True
            total += share * count
            memory += size * count
        elif pod_gpus(template):
            total += pod_gpus(template) * count
    return (total, memory) if shared else (None, 0)


def workload_resources(obj: Obj) -> dict[str, Any]:
    """image, cpu, memory, gpu type resource and count of the (primary) container."""
    kind = of_object(obj)
    container = kind.primary_container(obj)
    limits = (container.get("resources") or {}).get("limits") or {}
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    templates = kind.pod_templates(obj)
    pod_spec = (templates[0][0].get("spec") or {}) if templates else {}
    return {
        "image": container.get("image"),
        "cpu": limits.get("cpu"),
        "memory": limits.get("memory"),
        "gpus": container_gpus(container, pod_spec),
        "gpu_type": env.get(GPU_TYPE_ENV) or None,
        "gpu_memory": share_from_env(env)[1] or None,  # a share's, per pod
    }
