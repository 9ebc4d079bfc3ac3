"""The resource types kubesim serves and what API discovery says about them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _get(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    # Field selector paths beyond metadata.name and metadata.namespace.
    selectable: tuple[str, ...] = ()
    status_subresource: bool = False
    categories: tuple[str, ...] = ()
    # For custom resources: the openAPIV3Schema of this version (None for built-ins).
    schema: Mapping[str, Any] | None = None
    extra_subresources: tuple[str, ...] = ()
    crd: bool = False
    singular: str = field(default="")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def group_resource(self) -> str:
        """How error messages name the type: ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def supported_fields(self) -> set[str]:
        return {"metadata.name", "metadata.namespace", *self.selectable}

    def field_values(self, obj: Mapping[str, Any]) -> dict[str, str]:
        return {path: _get(obj, path) for path in self.supported_fields}

    def discovery(self) -> list[dict[str, Any]]:
        entries = [
            {
                "name": self.plural,
                "singularName": self.singular or self.kind.lower(),
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": VERBS,
                **({"shortNames": list(self.short_names)} if self.short_names else {}),
                **({"categories": list(self.categories)} if self.categories else {}),
            }
        ]
        if self.status_subresource:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        for sub in self.extra_subresources:
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": {"log": "Pod", "exec": "PodExecOptions"}.get(sub, self.kind),
                    "verbs": ["create", "get"] if sub == "exec" else ["get"],
                }
            )
        return entries


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

BUILTIN: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "Namespace", "namespaces", False, ("ns",), ("status.phase",), True),
    ResourceType(
        "",
        "v1",
        "Pod",
        "pods",
        True,
        ("po",),
        _POD_FIELDS,
        True,
        ("all",),
        extra_subresources=("log", "exec"),
    ),
    ResourceType("", "v1", "Event", "events", True, ("ev",), _EVENT_FIELDS),
    ResourceType("", "v1", "Service", "services", True, ("svc",), (), True, ("all",)),
    ResourceType("", "v1", "Secret", "secrets", True, (), ("type",)),
    ResourceType("", "v1", "ConfigMap", "configmaps", True, ("cm",)),
    ResourceType(
        "", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), (), True
    ),
    ResourceType("", "v1", "Node", "nodes", False, ("no",), ("spec.unschedulable",), True),
    ResourceType("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",)),
    ResourceType("", "v1", "ResourceQuota", "resourcequotas", True, ("quota",), (), True),
    ResourceType("", "v1", "LimitRange", "limitranges", True, ("limits",)),
    ResourceType("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",)),
    ResourceType("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    ResourceType("batch", "v1", "Job", "jobs", True, (), ("status.successful",), True, ("all",)),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ("crd", "crds"),
        (),
        True,
    ),
)

GROUP_PREFERRED: Mapping[str, str] = {
    "batch": "v1",
    "apiextensions.k8s.io": "v1",
    "scheduling.k8s.io": "v1",
    "node.k8s.io": "v1",
}

FieldValues = Callable[[Mapping[str, Any]], Mapping[str, str]]
