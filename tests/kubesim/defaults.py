"""Defaulting the apiserver applies on create (the fields clients read back and rely on)."""

from __future__ import annotations

from typing import Any

from .quantity import parse_quantity

Obj = dict[str, Any]


def _container_defaults(container: Obj) -> None:
    image = container.get("image") or ""
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        # Requests default to limits (core/v1 defaulting).
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)


def pod_spec_defaults(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            _container_defaults(container)


def pod_defaults(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    pod_spec_defaults(spec)
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    keys = {(t.get("key"), t.get("effect")) for t in tolerations}
    # DefaultTolerationSeconds admission plugin.
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if (key, "NoExecute") not in keys:
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def qos_class(spec: Obj) -> str:
    containers = spec.get("containers") or []
    any_set, guaranteed = False, True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or parse_quantity(
                requests.get(name, limits[name])
            ) != parse_quantity(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def job_defaults(job: Obj, uid: str) -> None:
    spec = job.setdefault("spec", {})
    name = job["metadata"]["name"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    if not job["metadata"].get("labels"):  # a Job without labels takes its template's
        job["metadata"]["labels"] = dict(template["metadata"]["labels"])
    pod_spec_defaults(template.setdefault("spec", {}))
    job["status"] = {}


def namespace_defaults(ns: Obj) -> None:
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = ns["metadata"]["name"]
    ns["spec"] = {"finalizers": ["kubernetes"]}
    ns["status"] = {"phase": "Active"}


def secret_defaults(secret: Obj) -> None:
    """``stringData`` is write-only: merged into ``data`` (base64), as the apiserver does."""
    import base64

    secret.setdefault("type", "Opaque")
    strings = secret.pop("stringData", None) or {}
    data = secret.setdefault("data", {})
    for key, value in strings.items():
        data[key] = base64.b64encode(str(value).encode()).decode()


PVC_PROTECTION = "kubernetes.io/pvc-protection"
DEFAULT_STORAGE_CLASS = "standard"


def pvc_defaults(claim: Obj) -> None:
    """``volumeMode``, the default StorageClass (DefaultStorageClass admission) and the
    ``kubernetes.io/pvc-protection`` finalizer (StorageObjectInUseProtection admission)."""
    spec = claim.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    if "storageClassName" not in spec:
        spec["storageClassName"] = DEFAULT_STORAGE_CLASS
    finalizers = claim["metadata"].setdefault("finalizers", [])
    if PVC_PROTECTION not in finalizers:
        finalizers.append(PVC_PROTECTION)
    claim["status"] = {"phase": "Pending"}


def service_defaults(service: Obj, taken: set[str]) -> None:
    """Type, a cluster IP from 10.96.0.0/12, IP family, session affinity, port protocol and
    targetPort (the port itself), node ports for NodePort and LoadBalancer services."""
    import random

    spec = service.setdefault("spec", {})
    kind = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if kind != "ExternalName":
        if not spec.get("clusterIP"):
            while True:
                ip = f"10.{96 + random.randrange(16)}.{random.randrange(256)}.{random.randrange(1, 255)}"
                if ip not in taken:
                    break
            spec["clusterIP"] = ip
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
        if kind in ("NodePort", "LoadBalancer"):
            port.setdefault("nodePort", random.randrange(30000, 32768))
    service.setdefault("status", {"loadBalancer": {}})
