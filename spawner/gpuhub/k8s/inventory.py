"""What the cluster's objects say about GPUs: what a node offers (:class:`NodeInfo`), what a
pod asks for and holds (:func:`pod_gpus`, :func:`pod_holding`), and whether a GPU type's pods
may run on a node (:func:`node_serves`).

Pure functions of the API's JSON, whole (``json.loads``) or as :mod:`gpuhub.k8s.objects`
decodes it (only the fields read here, which it must declare): the hub's capacity watch
(:mod:`gpuhub.hub.ledger.capacity`) and the jobs service's Kubernetes backend read pods
through them. Who a pod belongs to is read
from KubeSpawner's and gpuhub's labels (:mod:`gpuhub.k8s.labels`), which users cannot write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuhub.core.env import GPU_ENV_PREFIX, GPU_TYPE_ENV, GPUS_ENV
from gpuhub.core.gpu_resources import is_gpu_resource
from gpuhub.core.holdings import Holding, Waiting, Workload
from gpuhub.core.policy import GPUType
from gpuhub.core.quantity import QuantityError, parse_cpu, parse_memory, parse_quantity
from gpuhub.core.sharing import share_from_env
from gpuhub.k8s.kueue import gated
from gpuhub.k8s.labels import (
    COMPONENT_LABEL,
    HUB_SERVERNAME_ANNOTATION,
    HUB_USERNAME_KEY,
    JOB_ID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SERVER_COMPONENT,
    USER_LABEL,
    USERNAME_ANNOTATION,
)


def _int(value: Any) -> int:
    try:
        return int(float(str(value)))
    except ValueError:
        try:  # a quantity such as "1k"
            return int(parse_quantity(str(value)))
        except QuantityError:
            return 0


def _is_extra(name: str) -> bool:
    """An extended resource that is not a GPU but may count a share of one (HAMi's
    ``nvidia.com/gpumem`` and ``nvidia.com/gpucores``): domain-qualified, outside
    ``kubernetes.io``."""
    return "/" in name and not is_gpu_resource(name) and "kubernetes.io/" not in name


@dataclass
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    gpus: dict[str, int]  # allocatable per GPU resource
    cpu: float
    memory: int
    usable: bool  # Ready and not cordoned
    used: dict[str, int] = field(default_factory=dict)  # GPUs held by pods bound here
    # Other extended resources (a GPU sharing plugin's memory and cores), and their use by
    # the GPU pods bound here.
    extra: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodInfo:
    node: str
    gpus: tuple[tuple[str, int], ...]
    extra: tuple[tuple[str, int], ...] = ()  # e.g. (("nvidia.com/gpumem", 8192),)


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    meta, spec, status = (
        node.get("metadata") or {},
        node.get("spec") or {},
        node.get("status") or {},
    )
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    gpus = {k: _int(v) for k, v in allocatable.items() if is_gpu_resource(k)}
    extra = {k: _int(v) for k, v in allocatable.items() if _is_extra(k)}
    try:
        cpu = parse_cpu(allocatable.get("cpu", 0))
    except QuantityError:
        cpu = 0.0
    try:
        memory = int(parse_memory(allocatable.get("memory", 0)))
    except QuantityError:
        memory = 0
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(spec.get("taints") or ()),
        gpus=gpus,
        cpu=cpu,
        memory=memory,
        usable=ready and not spec.get("unschedulable"),
        extra=extra,
    )


def _amounts(container: Mapping[str, Any]) -> Mapping[str, Any]:
    """A container's resource amounts. Extended resources have requests == limits, and
    either may be given alone: a request wins over a limit of the same name."""
    resources = container.get("resources")
    if not resources:
        return {}
    limits, requests = resources.get("limits"), resources.get("requests")
    if not limits:
        return requests or {}
    return {**limits, **requests} if requests else limits


def pod_gpus(pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """``((resource, count), ...)`` of the GPUs a pod holds, as the scheduler counts them:
    its containers' together, or its largest init container's if that is more."""
    spec = pod.get("spec") or {}
    totals: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for name, value in _amounts(container).items():
            if is_gpu_resource(name):
                totals[name] = totals.get(name, 0) + _int(value)
    for container in spec.get("initContainers") or ():
        for name, value in _amounts(container).items():
            if is_gpu_resource(name):
                totals[name] = max(totals.get(name, 0), _int(value))
    if not totals:  # most of a cluster's pods
        return ()
    return tuple(sorted((k, v) for k, v in totals.items() if v > 0))


def pod_extra(pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The other extended resources a GPU pod asks for (a share's memory and cores)."""
    totals: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or ():
        for name, value in _amounts(container).items():
            if _is_extra(name):
                totals[name] = totals.get(name, 0) + _int(value)
    return tuple(sorted((k, v) for k, v in totals.items() if v > 0))


# Whose workload a job's pod belongs to, by the pod's metadata.
WorkloadOf = Callable[[Mapping[str, Any]], Workload | None]


def pod_info(
    pod: Mapping[str, Any], gpus: tuple[tuple[str, int], ...] | None = None
) -> PodInfo | None:
    """What a bound, active pod holds; None if it holds no GPUs or is not on a node.
    ``gpus``: its :func:`pod_gpus`, where the caller has them already."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    node = spec.get("nodeName")
    if not node or status.get("phase") in ("Succeeded", "Failed"):
        return None
    gpus = pod_gpus(pod) if gpus is None else gpus
    return PodInfo(node, gpus, pod_extra(pod)) if gpus else None


def _gpuhub_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The ``GPUHUB_*`` variables of a pod's containers: the GPU type it was made for (two
    types may ask for the same resource, A100 and H100 nodes both serving
    ``nvidia.com/gpu``), and the share of a GPU it holds (:mod:`gpuhub.core.sharing`)."""
    env: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for var in container.get("env") or []:
            name = var.get("name") or ""
            if name.startswith(GPU_ENV_PREFIX) and var.get("value") and name not in env:
                env[name] = str(var["value"])
    return env


def claimed_gpus(env: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """``((type key, count),)`` of a pod whose GPUs are claimed through DRA: it asks for no
    GPU resource, and gpuhub gave it ``GPUHUB_GPUS`` and its type (users cannot create pods,
    so the hub trusts them, as it does a share's); the claim's devices are the capacity
    watch's (:mod:`gpuhub.hub.ledger.dra_capacity`). Empty for any other pod."""
    count, key = env.get(GPUS_ENV, ""), env.get(GPU_TYPE_ENV, "")
    if not (key and count.isdigit() and int(count) > 0):
        return ()
    return ((key, int(count)),)


def pod_holding(
    pod: Mapping[str, Any],
    workload_of: WorkloadOf | None = None,
    gpus: tuple[tuple[str, int], ...] | None = None,
) -> Holding | None:
    """The ledger's view of an active pod that holds GPUs, bound yet or not (a pending pod
    counts against the quota, but holds GPUs only once bound to a node: until then it is
    ``waiting``, in Kueue's queue while Kueue's admission gate is on, else for a node);
    None for anything else. ``workload_of`` says whose object a job's pod belongs to, from
    its metadata: that depends on the job's kind, which this layer does not know (the hub
    passes :func:`gpuhub.jobs.kinds.pod_workload`). ``gpus``: its :func:`pod_gpus`, where the
    caller has them already."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    env = _gpuhub_env(pod)
    gpus = (pod_gpus(pod) if gpus is None else gpus) or claimed_gpus(env)
    if not gpus:
        return None
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    resource = env.get(GPU_TYPE_ENV) or gpus[0][0]  # named for people by ledger.named
    count = sum(n for _, n in gpus)
    share, memory = share_from_env(env)
    since = _epoch(meta.get("creationTimestamp"))
    pods = ((str(meta.get("namespace") or ""), str(meta.get("name") or "")),)
    waiting: Waiting = ""
    if not (pod.get("spec") or {}).get("nodeName"):
        waiting = "queue" if gated(pod) else "node"
    if labels.get(COMPONENT_LABEL) == SERVER_COMPONENT:
        user = notes.get(HUB_USERNAME_KEY) or labels.get(HUB_USERNAME_KEY)
        if not user:
            return None
        name = notes.get(HUB_SERVERNAME_ANNOTATION, "")
        return Holding(
            user,
            "server",
            name,
            count,
            resource,
            since=since,
            pods=pods,
            share=share,
            memory=memory,
            waiting=waiting,
        )
    if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(JOB_ID_LABEL):
        user = notes.get(USERNAME_ANNOTATION) or labels.get(USER_LABEL)
        if not user:
            return None
        return Holding(
            user,
            "job",
            labels[JOB_ID_LABEL],
            count,
            resource,
            since=since,
            pods=pods,
            workload=workload_of(meta) if workload_of is not None else None,
            share=share,
            memory=memory,
            waiting=waiting,
        )
    return None


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        operator = toleration.get("operator", "Equal")
        key = toleration.get("key")
        if not key and operator == "Exists":
            return True
        if key == taint.get("key") and (
            operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def node_serves(node: NodeInfo, gpu_type: GPUType) -> bool:
    """Whether pods of ``gpu_type`` may run on ``node``: its resource, labels and taints."""
    return node.gpus.get(gpu_type.resource_name, 0) > 0 and node_admits(node, gpu_type)


def node_admits(node: NodeInfo, gpu_type: GPUType) -> bool:
    """Whether ``node``'s labels and taints let pods of ``gpu_type`` run there (its
    ``node_selector`` and tolerations), whatever resources it has."""
    if any(node.labels.get(k) != v for k, v in gpu_type.node_selector.items()):
        return False
    return all(
        tolerates(gpu_type.tolerations, taint)
        for taint in node.taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )
