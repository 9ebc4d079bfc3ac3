"""The apiserver's request semantics over the store: create, replace, patch, delete.

The HTTP layer (:mod:`.server`) decodes requests and calls these; kubesim's own components
(scheduler, kubelet, controllers) write through :class:`~.store.Store` directly, as the real
ones would through their privileged clients.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from . import defaults, validation
from .admission import Admission
from .errors import APIError, bad_request, conflict, invalid, not_found
from .patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import BUILTIN, ResourceType
from .store import Obj, Store, now

# Kinds whose API deletion orphans dependents unless told otherwise (backward compatibility).
ORPHAN_BY_DEFAULT = {
    ("batch", "Job"),
    ("", "ReplicationController"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
}
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class APIServer:
    def __init__(self, store: Store) -> None:
        self.store = store
        for rt in BUILTIN:
            store.register(rt)
        self.crds: dict[str, ResourceType] = {}
        self.admission = Admission(store)
        # ``Warning`` headers for the request being served (the HTTP layer resets and sends them).
        self.warnings: list[str] = []

    def _drop_unknown(self, rt: ResourceType, obj: Obj, field_validation: str) -> None:
        """Unknown fields of built-in kinds are dropped; ``Warn`` (the default) says so.

        Under ``Strict`` they stay, for the schema check to refuse with 400.
        """
        if field_validation == "Strict":
            return
        unknown = validation.unknown_fields(rt, obj)
        validation.drop_fields(obj, unknown)
        if field_validation != "Ignore":
            self.warnings += [f'unknown field "{path}"' for path in unknown]

    # -- create ---------------------------------------------------------------------------
    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        field_validation: str = "Warn",
        dry_run: bool = False,
    ) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: body must be an object'
            )
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request(f"{rt.kind} metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise APIError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            namespace = namespace or meta.get("namespace") or "default"
            meta["namespace"] = namespace
            ns = self.store.peek(self.store.by_kind("Namespace"), "", namespace)
            if ns is None:
                raise not_found("namespaces", namespace)
            if ns["status"].get("phase") == "Terminating":
                raise APIError(
                    403,
                    "Forbidden",
                    f'{rt.group_resource} "{meta.get("name") or meta.get("generateName", "")}" is forbidden: unable to create new content in namespace {namespace} because it is being terminated',
                    {"name": meta.get("name", ""), "kind": rt.plural},
                )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        uid = str(uuid.uuid4())
        name_for_validation = meta.get("name") or (
            meta.get("generateName", "") + "xxxxx" if meta.get("generateName") else ""
        )
        if rt.crd:
            obj = validation.validate_custom(rt, obj)
        else:
            self._drop_unknown(rt, obj, field_validation)
            validate_me = copy.deepcopy(obj)
            validate_me["metadata"]["name"] = name_for_validation or validate_me["metadata"].get(
                "name"
            )
            if not validate_me["metadata"]["name"]:
                validate_me["metadata"].pop("name", None)
            validation.validate_builtin(rt, validate_me, None, field_validation == "Strict")
        obj.pop("status", None) if rt.status_subresource and not rt.crd else None
        if rt.kind == "Pod":
            defaults.pod_defaults(obj)
        elif rt.kind == "Job":
            defaults.job_defaults(obj, uid)
        elif rt.kind == "Namespace":
            defaults.namespace_defaults(obj)
        elif rt.kind == "Secret":
            defaults.secret_defaults(obj)
        elif rt.kind == "PersistentVolumeClaim":
            defaults.pvc_defaults(obj)
        elif rt.kind == "Service":
            defaults.service_defaults(obj, self._cluster_ips())
        elif rt.kind == "CustomResourceDefinition":
            validation.check_crd(obj)
        self.admission.admit(rt, obj)
        if dry_run:
            return obj
        created = self.store.create(rt, obj, namespace, uid=uid)
        if rt.kind == "CustomResourceDefinition":
            self._serve_crd(created)
        return created

    def _cluster_ips(self) -> set[str]:
        return {
            (s.get("spec") or {}).get("clusterIP", "")
            for s in self.store.list(self.store.by_kind("Service"))
        }

    # -- update ---------------------------------------------------------------------------
    def replace(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        *,
        field_validation: str = "Warn",
    ) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("body must be an object")
        old = self.store.get(rt, namespace, name)
        meta = body.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise bad_request("the name of the object does not match the name on the URL")
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = namespace
        given_rv = meta.get("resourceVersion")
        if given_rv and given_rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.group_resource, name)
        new = copy.deepcopy(body)
        if rt.status_subresource:
            if subresource == "status":
                new = {**copy.deepcopy(old), "status": new.get("status", {})}
                new["metadata"] = {
                    **old["metadata"],
                    **{
                        k: v
                        for k, v in meta.items()
                        if k in ("labels", "annotations", "resourceVersion")
                    },
                }
            else:
                new["status"] = copy.deepcopy(old.get("status"))
                if new["status"] is None:
                    new.pop("status")
        if rt.kind == "Pod" and subresource != "status":
            # nodeName is set only through binding; keep the server's defaults on update.
            spec = new.setdefault("spec", {})
            defaults.pod_spec_defaults(spec)
            for key in (
                "nodeName",
                "serviceAccountName",
                "serviceAccount",
                "enableServiceLinks",
                "priority",
                "preemptionPolicy",
            ):
                if key in old["spec"] and key not in spec:
                    spec[key] = old["spec"][key]
            if old["spec"].get("nodeName") and not spec.get("nodeName"):
                spec["nodeName"] = old["spec"]["nodeName"]
        if rt.kind == "Job" and subresource != "status":
            spec = new.setdefault("spec", {})
            for key, value in old["spec"].items():
                spec.setdefault(key, value)
        if rt.kind == "Service" and subresource != "status":
            # The allocated cluster IP and node ports survive an update that leaves them out.
            spec = new.setdefault("spec", {})
            for key in ("clusterIP", "clusterIPs"):
                if not spec.get(key) and old["spec"].get(key):
                    spec[key] = old["spec"][key]
            old_ports = {p.get("port"): p for p in old["spec"].get("ports") or []}
            for port in spec.get("ports") or []:
                if "nodePort" not in port and "nodePort" in old_ports.get(port.get("port"), {}):
                    port["nodePort"] = old_ports[port["port"]]["nodePort"]
            defaults.service_defaults(new, self._cluster_ips())
        if rt.kind == "Secret":
            defaults.secret_defaults(new)  # stringData is merged into data on update too
        if rt.kind == "PersistentVolumeClaim" and subresource != "status":
            spec = new.setdefault("spec", {})
            for key in ("volumeMode", "storageClassName", "volumeName"):
                if key not in spec and key in old["spec"]:
                    spec[key] = old["spec"][key]
        if rt.crd:
            new = validation.validate_custom(rt, new)
        else:
            self._drop_unknown(rt, new, field_validation)
            if subresource != "status":
                validation.validate_builtin(rt, new, old, field_validation == "Strict")
        if rt.kind == "CustomResourceDefinition":
            validation.check_crd(new)
        updated = self.store.replace(rt, new)
        if rt.kind == "CustomResourceDefinition":
            self._serve_crd(updated)
        return updated

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        subresource: str | None = None,
        *,
        field_validation: str = "Warn",
    ) -> Obj:
        old = self.store.get(rt, namespace, name)
        content_type = content_type.split(";")[0].strip()
        try:
            if content_type == MERGE:
                new = merge_patch(old, body)
            elif content_type == STRATEGIC and not rt.crd:
                new = strategic_merge_patch(old, body)
            elif content_type == JSON_PATCH:
                new = json_patch(old, body)
            else:
                accepted = (
                    f"{JSON_PATCH}, {MERGE}"
                    + ("" if rt.crd else f", {STRATEGIC}")
                    + ", application/apply-patch+yaml"
                )
                raise APIError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: {accepted}",
                )
        except PatchError as exc:
            if exc.bad_request:
                raise bad_request(str(exc)) from None
            raise invalid(rt.kind, name, [("", "FieldValueInvalid", str(exc))], rt.group) from None
        if not isinstance(new, dict):
            raise bad_request("the patch did not produce an object")
        new.setdefault("metadata", {})["resourceVersion"] = (
            (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        )
        if not new["metadata"]["resourceVersion"]:
            new["metadata"].pop("resourceVersion")
        return self.replace(
            rt, namespace, name, new, subresource, field_validation=field_validation
        )

    # -- delete ---------------------------------------------------------------------------
    def delete(self, rt: ResourceType, namespace: str, name: str, options: dict[str, Any]) -> Obj:
        obj = self.store.get(rt, namespace, name)
        meta = obj["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            raise APIError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.group_resource} "{name}": Precondition failed: UID in precondition: {preconditions["uid"]}, UID in object meta: {meta["uid"]}',
                {"name": name, "kind": rt.plural},
            )
        if (
            preconditions.get("resourceVersion")
            and preconditions["resourceVersion"] != meta["resourceVersion"]
        ):
            raise conflict(rt.group_resource, name)
        policy = options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") else None
        )
        if policy is None:
            policy = "Orphan" if (rt.group, rt.kind) in ORPHAN_BY_DEFAULT else "Background"
        if policy not in ("Orphan", "Background", "Foreground"):
            raise invalid(
                "DeleteOptions",
                "",
                [
                    (
                        "propagationPolicy",
                        "FieldValueNotSupported",
                        f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
                    )
                ],
            )
        if policy == "Orphan":
            self.orphan_dependents(meta["uid"])
        if rt.kind == "Namespace":
            return self._delete_namespace(obj)
        if rt.kind == "Pod":
            return self._delete_pod(rt, obj, options)
        if meta.get("deletionTimestamp"):
            return obj
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground":
            finalizers.append("foregroundDeletion")
        if finalizers:

            def mark(o: Obj) -> None:
                o["metadata"]["deletionTimestamp"] = now()
                o["metadata"]["deletionGracePeriodSeconds"] = 0
                o["metadata"]["finalizers"] = finalizers

            return self.store.mutate(rt, namespace, name, mark)
        removed = self.store.remove(rt, obj)
        if rt.kind == "CustomResourceDefinition":
            self._unserve_crd(obj)
        return removed

    def _delete_pod(self, rt: ResourceType, pod: Obj, options: dict[str, Any]) -> Obj:
        meta, spec = pod["metadata"], pod["spec"]
        grace = options.get("gracePeriodSeconds")
        grace = spec.get("terminationGracePeriodSeconds", 30) if grace is None else int(grace)
        phase = pod["status"].get("phase")
        if grace <= 0 or not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            if meta.get("finalizers"):
                return self.store.mutate(
                    rt,
                    meta["namespace"],
                    meta["name"],
                    lambda o: o["metadata"].update(
                        deletionTimestamp=now(), deletionGracePeriodSeconds=0
                    ),
                )
            return self.store.remove(rt, pod)
        if meta.get("deletionTimestamp") and grace >= meta.get("deletionGracePeriodSeconds", grace):
            return pod

        def mark(o: Obj) -> None:
            due = datetime.now(UTC) + timedelta(seconds=grace)
            o["metadata"]["deletionTimestamp"] = due.strftime("%Y-%m-%dT%H:%M:%SZ")
            o["metadata"]["deletionGracePeriodSeconds"] = grace

        return self.store.mutate(rt, meta["namespace"], meta["name"], mark)

    def _delete_namespace(self, ns: Obj) -> Obj:
        name = ns["metadata"]["name"]
        if name in ("default", "kube-system", "kube-public"):
            raise APIError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                {"name": name, "kind": "namespaces"},
            )
        rt = self.store.by_kind("Namespace")

        def mark(o: Obj) -> None:
            o["metadata"]["deletionTimestamp"] = now()
            o["status"]["phase"] = "Terminating"

        return self.store.mutate(rt, "", name, mark)

    def orphan_dependents(self, owner_uid: str) -> None:
        for rt in list(self.store.types.values()):
            if not rt.namespaced:
                continue
            for obj in self.store.list(rt):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    self.store.mutate(
                        rt,
                        obj["metadata"]["namespace"],
                        obj["metadata"]["name"],
                        lambda o: o["metadata"].update(
                            ownerReferences=[
                                r
                                for r in o["metadata"]["ownerReferences"]
                                if r.get("uid") != owner_uid
                            ]
                        ),
                    )

    # -- custom resource definitions ------------------------------------------------------------
    def _serve_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        names = spec["names"]
        version = next(v for v in spec["versions"] if v.get("storage"))
        served = [v for v in spec["versions"] if v.get("served", True)]
        version = served[0] if served else version
        conditions = [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now(),
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now(),
            },
        ]
        rt = ResourceType(
            group=spec["group"],
            version=version["name"],
            kind=names["kind"],
            plural=names["plural"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            status_subresource="status" in (version.get("subresources") or {}),
            categories=tuple(names.get("categories") or ()),
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            crd=True,
            singular=names.get("singular") or names["kind"].lower(),
        )
        self.crds[crd["metadata"]["name"]] = rt
        self.store.register(rt)
        if crd.get("status", {}).get("conditions") != conditions:
            self.store.mutate(
                self.store.by_kind("CustomResourceDefinition"),
                "",
                crd["metadata"]["name"],
                lambda o: o.update(
                    status={
                        "conditions": conditions,
                        "acceptedNames": names,
                        "storedVersions": [version["name"]],
                    }
                ),
            )

    def _unserve_crd(self, crd: Obj) -> None:
        rt = self.crds.pop(crd["metadata"]["name"], None)
        if rt is not None:
            self.store.unregister(rt.key)
