"""Semantic pod checks of the apiserver's ``pkg/apis/core/validation`` that a schema cannot say.

Each function returns causes ``(field, reason, message)`` worded as ``field.ErrorList`` prints
them; :mod:`.validation` gathers them into one ``422 Invalid``. Covered: volumes (unique names,
unique mountPaths, relative subPaths), ports (IANA names of at most 15 characters, unique,
1..65535), environment variable names and ``fieldRef`` paths, security contexts (privileged or
``CAP_SYS_ADMIN`` with ``allowPrivilegeEscalation: false``, user and group ids in range) and
lifecycle handlers (exactly one handler type).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

Cause = tuple[str, str, str]

ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
ENV_NAME_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
    "or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
    "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)
PORT_NAME_CHARS = re.compile(r"[-a-z0-9]+")
FIELD_REF_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
FIELD_REF_SUBSCRIPT = re.compile(r"metadata\.(labels|annotations)\['[^']+'\]")
HANDLER_TYPES = ("exec", "httpGet", "tcpSocket", "sleep")
MAX_ID = 2147483647


def port_name_errors(name: str) -> list[str]:
    """``validation.IsValidPortName`` (an IANA service name)."""
    errors = []
    if len(name) > 15:
        errors.append("must be no more than 15 characters")
    if not PORT_NAME_CHARS.fullmatch(name):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if not re.search(r"[a-z]", name):
        errors.append("must contain at least one letter (a-z)")
    if name.startswith("-") or name.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def _go_value(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def volume_causes(spec: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for n, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name") or ""
        if name in seen:
            causes.append(
                (f"{path}.volumes[{n}].name", "FieldValueDuplicate", f'Duplicate value: "{name}"')
            )
        seen.add(name)
    return causes


def container_causes(container: Mapping[str, Any], cpath: str) -> list[Cause]:
    causes: list[Cause] = []
    mount_paths: set[str] = set()
    for m, mount in enumerate(container.get("volumeMounts") or []):
        mount_path = mount.get("mountPath") or ""
        if not mount_path:
            causes.append(
                (f"{cpath}.volumeMounts[{m}].mountPath", "FieldValueRequired", "Required value")
            )
        elif mount_path in mount_paths:
            causes.append(
                (
                    f"{cpath}.volumeMounts[{m}].mountPath",
                    "FieldValueInvalid",
                    f'Invalid value: "{mount_path}": must be unique',
                )
            )
        mount_paths.add(mount_path)
        sub_path = mount.get("subPath") or ""
        if sub_path.startswith("/"):
            causes.append(
                (
                    f"{cpath}.volumeMounts[{m}].subPath",
                    "FieldValueInvalid",
                    f'Invalid value: "{sub_path}": must be a relative path',
                )
            )
        elif ".." in sub_path.split("/"):
            causes.append(
                (
                    f"{cpath}.volumeMounts[{m}].subPath",
                    "FieldValueInvalid",
                    f"Invalid value: \"{sub_path}\": must not contain '..'",
                )
            )
    port_names: set[str] = set()
    for p, port in enumerate(container.get("ports") or []):
        ppath = f"{cpath}.ports[{p}]"
        name = port.get("name") or ""
        if name:
            for error in port_name_errors(name):
                causes.append(
                    (f"{ppath}.name", "FieldValueInvalid", f'Invalid value: "{name}": {error}')
                )
            if name in port_names:
                causes.append(
                    (f"{ppath}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"')
                )
            port_names.add(name)
        number = port.get("containerPort") or 0
        if number == 0:
            causes.append((f"{ppath}.containerPort", "FieldValueRequired", "Required value"))
        elif not 1 <= number <= 65535:
            causes.append(
                (
                    f"{ppath}.containerPort",
                    "FieldValueInvalid",
                    f"Invalid value: {number}: must be between 1 and 65535, inclusive",
                )
            )
        host = port.get("hostPort") or 0
        if host and not 1 <= host <= 65535:
            causes.append(
                (
                    f"{ppath}.hostPort",
                    "FieldValueInvalid",
                    f"Invalid value: {host}: must be between 1 and 65535, inclusive",
                )
            )
    causes += env_causes(container, cpath)
    causes += security_context_causes(
        container.get("securityContext"), f"{cpath}.securityContext", True
    )
    lifecycle = container.get("lifecycle") or {}
    for hook in ("postStart", "preStop"):
        if hook in lifecycle:
            causes += handler_causes(lifecycle[hook], f"{cpath}.lifecycle.{hook}")
    return causes


def env_causes(container: Mapping[str, Any], cpath: str) -> list[Cause]:
    causes: list[Cause] = []
    for e, item in enumerate(container.get("env") or []):
        epath = f"{cpath}.env[{e}]"
        name = item.get("name") or ""
        if not name:
            causes.append((f"{epath}.name", "FieldValueRequired", "Required value"))
        elif not ENV_NAME.fullmatch(name):
            causes.append(
                (f"{epath}.name", "FieldValueInvalid", f'Invalid value: "{name}": {ENV_NAME_MSG}')
            )
        source = item.get("valueFrom")
        if source is None:
            continue
        kinds = [
            k
            for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
            if source.get(k)
        ]
        if item.get("value") and kinds:
            causes.append(
                (
                    f"{epath}.valueFrom",
                    "FieldValueInvalid",
                    'Invalid value: "": may not be specified when `value` is not empty',
                )
            )
        if len(kinds) != 1:
            causes.append(
                (
                    f"{epath}.valueFrom",
                    "FieldValueInvalid",
                    'Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`',
                )
            )
            continue
        if kinds[0] == "fieldRef":
            ref = source["fieldRef"]
            field_path = ref.get("fieldPath") or ""
            fpath = f"{epath}.valueFrom.fieldRef.fieldPath"
            if not field_path:
                causes.append((fpath, "FieldValueRequired", "Required value"))
            elif field_path not in FIELD_REF_PATHS and not FIELD_REF_SUBSCRIPT.fullmatch(
                field_path
            ):
                supported = ", ".join(f'"{p}"' for p in FIELD_REF_PATHS)
                causes.append(
                    (
                        fpath,
                        "FieldValueNotSupported",
                        f'Unsupported value: "{field_path}": supported values: {supported}',
                    )
                )
        elif kinds[0] in ("configMapKeyRef", "secretKeyRef"):
            ref = source[kinds[0]]
            rpath = f"{epath}.valueFrom.{kinds[0]}"
            if not ref.get("name"):
                causes.append((f"{rpath}.name", "FieldValueRequired", "Required value"))
            if not ref.get("key"):
                causes.append((f"{rpath}.key", "FieldValueRequired", "Required value"))
    return causes


def security_context_causes(
    sc: Mapping[str, Any] | None, path: str, container: bool
) -> list[Cause]:
    if not sc:
        return []
    causes: list[Cause] = []
    for key in ("runAsUser", "runAsGroup", *(() if container else ("fsGroup",))):
        value = sc.get(key)
        if value is not None and not 0 <= value <= MAX_ID:
            causes.append(
                (
                    f"{path}.{key}",
                    "FieldValueInvalid",
                    f"Invalid value: {value}: must be between 0 and {MAX_ID}, inclusive",
                )
            )
    if container and sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            causes.append(
                (
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_go_value(sc)}: cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
                )
            )
        if "CAP_SYS_ADMIN" in ((sc.get("capabilities") or {}).get("add") or []):
            causes.append(
                (
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_go_value(sc)}: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
                )
            )
    return causes


def handler_causes(handler: Mapping[str, Any] | None, path: str) -> list[Cause]:
    """A lifecycle handler names exactly one handler type."""
    kinds = [k for k in HANDLER_TYPES if (handler or {}).get(k) is not None]
    if not kinds:
        return [(path, "FieldValueRequired", "Required value: must specify a handler type")]
    if len(kinds) > 1:
        return [
            (
                f"{path}.{kinds[1]}",
                "FieldValueForbidden",
                "Forbidden: may not specify more than 1 handler type",
            )
        ]
    return []


def pod_causes(spec: Mapping[str, Any], path: str) -> list[Cause]:
    """All checks of this module for one pod spec (a pod's, or a Job template's)."""
    causes = volume_causes(spec, path)
    causes += security_context_causes(spec.get("securityContext"), f"{path}.securityContext", False)
    for group in ("initContainers", "containers"):
        for n, container in enumerate(spec.get(group) or []):
            causes += container_causes(container, f"{path}.{group}[{n}]")
    return causes
