"""The admission plugins a default apiserver runs on create, in their order.

ServiceAccount (the pod's service account must exist), Priority (``priorityClassName`` names an
existing PriorityClass, whose value becomes ``spec.priority``), RuntimeClass (it must exist),
LimitRanger (container defaults, then per-Container and per-Pod min/max) and ResourceQuota
(``exceeded quota`` / ``must specify``). Refusals are ``403 Forbidden`` worded as the plugins
write them. Controllers that create pods (Job, training operator) go through :func:`admit` as
they would through the API, and report a refusal as a ``FailedCreate`` event.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .errors import APIError
from .quantity import QuantityError, parse_quantity
from .resources import ResourceType
from .scheduler import pod_requests
from .store import Obj, Store

# Built-in classes every cluster has (pkg/apis/scheduling).
SYSTEM_PRIORITY_CLASSES = {
    "system-cluster-critical": 2000000000,
    "system-node-critical": 2000001000,
}
# Object-count quota names of the kinds kubesim serves.
COUNTED = {
    "Pod": "pods",
    "Service": "services",
    "Secret": "secrets",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "ResourceQuota": "resourcequotas",
}


def forbidden(rt: ResourceType, obj: Mapping[str, Any], message: str) -> APIError:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or ""
    return APIError(
        403,
        "Forbidden",
        f'{rt.group_resource} "{name}" is forbidden: {message}',
        {"name": meta.get("name") or "", "kind": rt.plural},
    )


def format_quantity(value: Fraction) -> str:
    """A canonical-enough quantity: integers as is, else milli-units."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    return f"{int(milli)}m" if milli.denominator == 1 else str(float(value))


def _quantity(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Fraction(0)


class Admission:
    """Mutating and validating admission for objects created through the API."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _kind(self, kind: str, group: str = "") -> ResourceType:
        return self.store.by_kind(kind, group)

    def admit(self, rt: ResourceType, obj: Obj) -> None:
        """Mutate ``obj`` in place, or raise the plugin's 403."""
        namespace = (obj.get("metadata") or {}).get("namespace") or ""
        if rt.kind == "Pod":
            self._service_account(rt, obj, namespace)
            self._priority(rt, obj)
            self._runtime_class(rt, obj)
            self._limit_ranger(rt, obj, namespace)
        if rt.kind in COUNTED or rt.kind == "Job":
            self._quota(rt, obj, namespace)

    # -- ServiceAccount ---------------------------------------------------------------------------
    def _service_account(self, rt: ResourceType, pod: Obj, namespace: str) -> None:
        name = pod["spec"].get("serviceAccountName") or "default"
        if self.store.peek(self._kind("ServiceAccount"), namespace, name) is None:
            raise forbidden(
                rt,
                pod,
                f'error looking up service account {namespace}/{name}: serviceaccount "{name}" not found',
            )

    # -- Priority ---------------------------------------------------------------------------------
    def _priority(self, rt: ResourceType, pod: Obj) -> None:
        spec = pod["spec"]
        classes = self.store.list(self._kind("PriorityClass", "scheduling.k8s.io"))
        name = spec.get("priorityClassName")
        if not name:
            default = next((c for c in classes if c.get("globalDefault")), None)
            if default is not None:
                spec["priorityClassName"] = default["metadata"]["name"]
                spec["priority"] = default["value"]
                spec["preemptionPolicy"] = default.get("preemptionPolicy", "PreemptLowerPriority")
            return
        if name in SYSTEM_PRIORITY_CLASSES:
            value, policy = SYSTEM_PRIORITY_CLASSES[name], "PreemptLowerPriority"
        else:
            found = next((c for c in classes if c["metadata"]["name"] == name), None)
            if found is None:
                raise forbidden(rt, pod, f"no PriorityClass with name {name} was found")
            value, policy = found["value"], found.get("preemptionPolicy", "PreemptLowerPriority")
        if spec.get("priority") not in (None, 0, value):
            raise forbidden(
                rt,
                pod,
                "the integer value of priority must not be provided in pod spec; priority admission controller computed "
                f"{value} from the given PriorityClass name",
            )
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    # -- RuntimeClass -----------------------------------------------------------------------------
    def _runtime_class(self, rt: ResourceType, pod: Obj) -> None:
        name = pod["spec"].get("runtimeClassName")
        if name and self.store.peek(self._kind("RuntimeClass", "node.k8s.io"), "", name) is None:
            raise forbidden(rt, pod, f'pod rejected: RuntimeClass "{name}" not found')

    # -- LimitRanger ------------------------------------------------------------------------------
    def _limit_ranger(self, rt: ResourceType, pod: Obj, namespace: str) -> None:
        ranges = self.store.list(self._kind("LimitRange"), namespace)
        if not ranges:
            return
        notes: list[str] = []
        errors: list[str] = []
        for limit_range in ranges:
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                if item.get("type") == "Container":
                    for container in pod["spec"].get("containers") or []:
                        notes += _container_defaults(container, item)
                        errors += _container_bounds(container, item)
                elif item.get("type") == "Pod":
                    errors += _pod_bounds(pod, item)
        if notes:
            annotations = pod["metadata"].setdefault("annotations", {})
            annotations["kubernetes.io/limit-ranger"] = "LimitRanger plugin set: " + "; ".join(
                notes
            )
        if errors:
            raise forbidden(
                rt, pod, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            )

    # -- ResourceQuota ----------------------------------------------------------------------------
    def _quota(self, rt: ResourceType, obj: Obj, namespace: str) -> None:
        quotas = self.store.list(self._kind("ResourceQuota"), namespace)
        if not quotas:
            return
        wanted = usage_of(rt.kind, obj)
        for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
            hard = {
                k: _quantity(v) for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()
            }
            if rt.kind == "Pod":
                missing = _unspecified(obj, hard)
                if missing:
                    raise forbidden(
                        rt,
                        obj,
                        f"failed quota: {quota['metadata']['name']}: must specify {missing}",
                    )
            used = namespace_usage(self.store, namespace, hard)
            over = sorted(
                k for k in hard if k in wanted and used.get(k, Fraction(0)) + wanted[k] > hard[k]
            )
            if over:

                def show(values: Mapping[str, Fraction], keys: list[str]) -> str:
                    return ",".join(
                        f"{k}={format_quantity(values.get(k, Fraction(0)))}" for k in keys
                    )

                raw_hard = quota["spec"]["hard"]
                raise forbidden(
                    rt,
                    obj,
                    f"exceeded quota: {quota['metadata']['name']}, requested: {show(wanted, over)}, "
                    f"used: {show(used, over)}, limited: "
                    + ",".join(f"{k}={raw_hard[k]}" for k in over),
                )


def _container_defaults(container: Obj, item: Mapping[str, Any]) -> list[str]:
    resources = container.setdefault("resources", {})
    set_requests, set_limits = [], []
    default_limits = item.get("default") or item.get("max") or {}
    default_requests = item.get("defaultRequest") or item.get("default") or item.get("max") or {}
    for name, value in default_requests.items():
        requests = resources.setdefault("requests", {})
        if name not in requests and name not in (resources.get("limits") or {}):
            requests[name] = value
            set_requests.append(name)
    for name, value in default_limits.items():
        limits = resources.setdefault("limits", {})
        if name not in limits:
            limits[name] = value
            set_limits.append(name)
    for name, value in (resources.get("limits") or {}).items():
        resources.setdefault("requests", {}).setdefault(name, value)
    notes = []
    if set_requests:
        notes.append(f"{', '.join(set_requests)} request for container {container['name']}")
    if set_limits:
        notes.append(f"{', '.join(set_limits)} limit for container {container['name']}")
    return notes


def _bounds(
    scope: str, requests: Mapping[str, Any], limits: Mapping[str, Any], item: Mapping[str, Any]
) -> list[str]:
    errors = []
    for name, bound in (item.get("min") or {}).items():
        request = requests.get(name)
        if request is None:
            errors.append(f"minimum {name} usage per {scope} is {bound}.  No request is specified")
        elif _quantity(request) < _quantity(bound):
            errors.append(f"minimum {name} usage per {scope} is {bound}, but request is {request}")
    for name, bound in (item.get("max") or {}).items():
        limit = limits.get(name)
        if limit is None:
            errors.append(f"maximum {name} usage per {scope} is {bound}.  No limit is specified")
        elif _quantity(limit) > _quantity(bound):
            errors.append(f"maximum {name} usage per {scope} is {bound}, but limit is {limit}")
    return errors


def _container_bounds(container: Obj, item: Mapping[str, Any]) -> list[str]:
    resources = container.get("resources") or {}
    return _bounds(
        "Container", resources.get("requests") or {}, resources.get("limits") or {}, item
    )


def _pod_bounds(pod: Obj, item: Mapping[str, Any]) -> list[str]:
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for name, value in (resources.get("requests") or {}).items():
            requests[name] = requests.get(name, Fraction(0)) + _quantity(value)
        for name, value in (resources.get("limits") or {}).items():
            limits[name] = limits.get(name, Fraction(0)) + _quantity(value)
    return _bounds(
        "Pod",
        {k: format_quantity(v) for k, v in requests.items()},
        {k: format_quantity(v) for k, v in limits.items()},
        item,
    )


def _resource_key(key: str) -> tuple[str, str]:
    """``requests.cpu`` -> (requests, cpu); bare ``cpu``/``memory`` mean requests."""
    for prefix in ("requests.", "limits."):
        if key.startswith(prefix):
            return prefix[:-1], key[len(prefix) :]
    return "requests", key


def _unspecified(pod: Obj, hard: Mapping[str, Fraction]) -> str:
    """``limits.cpu for: main; ...``: compute resources the quota tracks but a container omits."""
    missing = []
    for key in sorted(hard):
        if key in ("pods", "count/pods") or key.startswith("count/"):
            continue
        section, name = _resource_key(key)
        if name not in ("cpu", "memory", "ephemeral-storage"):
            continue
        lacking = [
            c["name"]
            for c in pod["spec"].get("containers") or []
            if name not in ((c.get("resources") or {}).get(section) or {})
        ]
        if lacking:
            missing.append(f"{key} for: {','.join(lacking)}")
    return "; ".join(missing)


def usage_of(kind: str, obj: Mapping[str, Any]) -> dict[str, Fraction]:
    """What one object counts against a quota."""
    usage: dict[str, Fraction] = {}
    if kind in COUNTED:
        usage[COUNTED[kind]] = Fraction(1)
        usage[f"count/{COUNTED[kind]}"] = Fraction(1)
    if kind == "Pod":
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return {}
        requests = pod_requests(obj)
        limits: dict[str, Fraction] = {}
        for container in (obj.get("spec") or {}).get("containers") or []:
            for name, value in ((container.get("resources") or {}).get("limits") or {}).items():
                limits[name] = limits.get(name, Fraction(0)) + _quantity(value)
        for name, value in requests.items():
            if name == "pods":
                continue
            usage[f"requests.{name}"] = value
            if name in ("cpu", "memory", "ephemeral-storage"):
                usage[name] = value
        for name, value in limits.items():
            usage[f"limits.{name}"] = value
    elif kind == "PersistentVolumeClaim":
        storage = (
            ((obj.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        )
        usage["requests.storage"] = _quantity(storage)
    elif kind == "Job":
        usage["count/jobs.batch"] = Fraction(1)
    return usage


def namespace_usage(store: Store, namespace: str, hard: Mapping[str, Any]) -> dict[str, Fraction]:
    """``status.used`` of a quota with ``hard``: the sum over the namespace's live objects."""
    used = {key: Fraction(0) for key in hard}
    kinds = [*COUNTED, "Job"]
    for kind in kinds:
        try:
            rt = store.by_kind(kind, "batch" if kind == "Job" else "")
        except KeyError:
            continue
        for obj in store.list(rt, namespace):
            for key, value in usage_of(kind, obj).items():
                if key in used:
                    used[key] += value
    return used
