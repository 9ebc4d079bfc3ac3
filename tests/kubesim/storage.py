"""Claims and the objects pods read: PVC binding and protection, and what blocks a pod's start.

* A new claim is ``Pending``; the simulated provisioner of the default StorageClass binds it
  (``Bound``, ``spec.volumeName``, ``status.capacity``) ``provision_seconds`` later. A claim
  with ``storageClassName: ""`` asks for a pre-provisioned PersistentVolume, which kubesim has
  none of: it stays ``Pending`` with a ``FailedBinding`` event.
* ``kubernetes.io/pvc-protection``: a deleted claim stays (``deletionTimestamp`` set) until no
  pod that is not finished uses it.
* :func:`claim_problem` is the scheduler's VolumeBinding pre-filter, :func:`mount_problem` the
  kubelet's volume set-up (missing Secret/ConfigMap: ``FailedMount``, the pod waits in
  ``ContainerCreating``), :func:`config_problem` the kubelet's container config
  (``CreateContainerConfigError`` for a missing ``secretKeyRef``/``configMapKeyRef``/``envFrom``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from .defaults import PVC_PROTECTION
from .events import Recorder
from .resources import ResourceType
from .store import Obj, Store


def _claims(pod: Mapping[str, Any]) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in (pod.get("spec") or {}).get("volumes") or []
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]


def _pod_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def claim_problem(store: Store, pod: Mapping[str, Any]) -> str | None:
    """Why the scheduler cannot place ``pod`` yet because of its claims (None: it can)."""
    rt = store.by_kind("PersistentVolumeClaim")
    namespace = pod["metadata"]["namespace"]
    unbound = False
    for name in _claims(pod):
        claim = store.peek(rt, namespace, name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted'
        if (claim.get("status") or {}).get("phase") != "Bound":
            unbound = True
    return "pod has unbound immediate PersistentVolumeClaims" if unbound else None


def mount_problem(store: Store, pod: Mapping[str, Any]) -> str | None:
    """The kubelet's ``FailedMount`` message for the first volume it cannot set up."""
    namespace = pod["metadata"]["namespace"]
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        sources: list[tuple[str, Mapping[str, Any]]] = []
        if volume.get("secret"):
            sources.append(("Secret", volume["secret"]))
        if volume.get("configMap"):
            sources.append(("ConfigMap", volume["configMap"]))
        for projection in (volume.get("projected") or {}).get("sources") or []:
            if projection.get("secret"):
                sources.append(("Secret", projection["secret"]))
            if projection.get("configMap"):
                sources.append(("ConfigMap", projection["configMap"]))
        for kind, source in sources:
            if source.get("optional"):
                continue
            name = source.get("secretName") if kind == "Secret" else None
            name = name or source.get("name") or ""
            obj = store.peek(store.by_kind(kind), namespace, name)
            word = "secret" if kind == "Secret" else "configmap"
            if obj is None:
                return f'MountVolume.SetUp failed for volume "{volume["name"]}" : {word} "{name}" not found'
            keys = set(obj.get("data") or {}) | set(obj.get("binaryData") or {})
            for item in source.get("items") or []:
                if item.get("key") not in keys:
                    return (
                        f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                        f"{word} references non-existent {'secret' if kind == 'Secret' else 'config'} key: {item.get('key')}"
                    )
    return None


def config_problem(
    store: Store, pod: Mapping[str, Any], container: Mapping[str, Any]
) -> str | None:
    """The kubelet's ``CreateContainerConfigError`` message for ``container`` (None: none)."""
    namespace = pod["metadata"]["namespace"]
    refs: list[tuple[str, Mapping[str, Any], bool]] = []
    for source in container.get("envFrom") or []:
        if source.get("secretRef"):
            refs.append(("Secret", source["secretRef"], False))
        if source.get("configMapRef"):
            refs.append(("ConfigMap", source["configMapRef"], False))
    for item in container.get("env") or []:
        value_from = item.get("valueFrom") or {}
        if value_from.get("secretKeyRef"):
            refs.append(("Secret", value_from["secretKeyRef"], True))
        if value_from.get("configMapKeyRef"):
            refs.append(("ConfigMap", value_from["configMapKeyRef"], True))
    for kind, ref, keyed in refs:
        if ref.get("optional"):
            continue
        name = ref.get("name") or ""
        obj = store.peek(store.by_kind(kind), namespace, name)
        if obj is None:
            return f'{"secret" if kind == "Secret" else "configmap"} "{name}" not found'
        if keyed and ref.get("key") not in (obj.get("data") or {}):
            return f"couldn't find key {ref.get('key')} in {kind} {namespace}/{name}"
    return None


class VolumeController:
    """The PV controller's binding (via a simulated provisioner) and PVC protection."""

    def __init__(self, store: Store, provision_seconds: float | None = 0.05) -> None:
        self.store = store
        self.provision_seconds = provision_seconds
        self.recorder = Recorder(store, "persistentvolume-controller")
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        loop = asyncio.get_running_loop()
        meta = obj["metadata"]
        if rt.kind == "PersistentVolumeClaim":
            if kind == "ADDED":
                if (obj.get("spec") or {}).get("storageClassName") == "":
                    self.recorder.emit(
                        obj,
                        "Normal",
                        "FailedBinding",
                        "no persistent volumes available for this claim and no storage class is set",
                    )
                elif self.provision_seconds is not None:
                    loop.call_later(
                        self.provision_seconds,
                        self._bind,
                        meta["namespace"],
                        meta["name"],
                        meta["uid"],
                    )
            elif kind == "MODIFIED" and meta.get("deletionTimestamp"):
                loop.call_soon(self._release, meta["namespace"])
        elif rt.kind == "Pod" and _claims(obj) and (kind == "DELETED" or not _pod_active(obj)):
            loop.call_soon(self._release, meta["namespace"])

    def _bind(self, namespace: str, name: str, uid: str) -> None:
        rt = self.store.by_kind("PersistentVolumeClaim")
        claim = self.store.peek(rt, namespace, name)
        if (
            claim is None
            or claim["metadata"]["uid"] != uid
            or claim["status"].get("phase") == "Bound"
        ):
            return

        def bind(o: Obj) -> None:
            spec = o["spec"]
            spec["volumeName"] = f"pvc-{uid}"
            annotations = o["metadata"].setdefault("annotations", {})
            annotations["pv.kubernetes.io/bind-completed"] = "yes"
            annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
            annotations["volume.kubernetes.io/storage-provisioner"] = "kubesim.io/provisioner"
            o["status"] = {
                "phase": "Bound",
                "accessModes": list(spec.get("accessModes") or []),
                "capacity": {
                    "storage": ((spec.get("resources") or {}).get("requests") or {}).get(
                        "storage", "0"
                    )
                },
            }

        self.store.mutate(rt, namespace, name, bind)

    def _release(self, namespace: str) -> None:
        """Drop pvc-protection from deleted claims no unfinished pod uses any more."""
        rt = self.store.by_kind("PersistentVolumeClaim")
        in_use = {
            name
            for pod in self.store.list(self.store.by_kind("Pod"), namespace)
            if _pod_active(pod)
            for name in _claims(pod)
        }
        for claim in self.store.list(rt, namespace):
            meta = claim["metadata"]
            if (
                meta.get("deletionTimestamp")
                and PVC_PROTECTION in (meta.get("finalizers") or [])
                and meta["name"] not in in_use
            ):
                self.store.mutate(
                    rt,
                    namespace,
                    meta["name"],
                    lambda o: o["metadata"].update(
                        finalizers=[f for f in o["metadata"]["finalizers"] if f != PVC_PROTECTION]
                    ),
                )
