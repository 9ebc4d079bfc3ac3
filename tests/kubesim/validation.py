"""Validation of created and updated objects, as the apiserver does it.

Built-in kinds: the official OpenAPI schemas shipped by ``kubernetes-validate`` (loaded once
per kind and cached), then the semantic checks of the apiserver that a schema cannot express
(names, required containers and images, extended-resource requests equal to limits, pod spec
immutability). Decoding errors (a string where an int belongs, unknown fields under
``fieldValidation=Strict``) are 400 BadRequest; semantic ones are 422 Invalid, as in Kubernetes.

Custom resources: the CRD's ``openAPIV3Schema`` (structural), with unknown fields pruned unless
``x-kubernetes-preserve-unknown-fields`` says otherwise.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from . import podchecks, servicechecks
from .errors import APIError, bad_request, invalid
from .quantity import QuantityError, parse_quantity
from .resources import ResourceType

SCHEMA_VERSION = "1.30"  # the Kubernetes minor version kubesim presents itself as

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
ANNOTATIONS_MAX_BYTES = 256 * 1024
CONFIG_MAX_BYTES = 1024 * 1024  # core.MaxSecretSize, also the ConfigMap limit
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}
Cause = tuple[str, str, str]


@functools.cache
def _builtin_validator(kind: str, api_version: str, strict: bool) -> jsonschema.protocols.Validator:
    """The JSON-schema validator for a built-in kind: built once, then reused."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"v{_schema_release()}-local" + ("-strict" if strict else "")
    schema = kv_utils.schema_contents(
        f"kubernetes-json-schema/{directory}/{kind.lower()}-{group_version}.json", SCHEMA_VERSION
    )
    definitions = kv_utils.schema_contents(
        f"kubernetes-json-schema/{directory}/_definitions.json", SCHEMA_VERSION
    )
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.cache
def _schema_release() -> str:
    return [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= SCHEMA_VERSION][-1]


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_GO_TYPES = {
    "string": "string",
    "integer": "int64",
    "number": "float64",
    "boolean": "bool",
    "object": "map",
    "array": "slice",
}


def validate_schema(rt: ResourceType, obj: Mapping[str, Any], strict: bool) -> None:
    validator = _builtin_validator(rt.kind, rt.api_version, strict)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    name = (obj.get("metadata") or {}).get("name") or ""
    causes: list[Cause] = []
    for error in errors:
        path = _path(error.absolute_path)
        if error.validator in ("type", "format", "oneOf", "anyOf"):
            wanted = error.validator_value if error.validator == "type" else "value"
            wanted = wanted[0] if isinstance(wanted, list) else wanted
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"json: cannot unmarshal {type(error.instance).__name__} into Go struct field "
                f"{path} of type {_GO_TYPES.get(str(wanted), wanted)}"
            )
        if error.validator == "additionalProperties":
            extra = re.findall(r"'([^']+)' was unexpected", error.message) or [error.message]
            field = f"{path}.{extra[0]}" if path else extra[0]
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f'strict decoding error: unknown field "{field}"'
            )
        if error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            field = (
                f"{path}.{missing[0]}" if path and missing else (missing[0] if missing else path)
            )
            causes.append((field, "FieldValueRequired", "Required value"))
        elif error.validator == "enum":
            values = ", ".join(f'"{v}"' for v in error.validator_value)
            causes.append(
                (
                    path,
                    "FieldValueNotSupported",
                    f'Unsupported value: "{error.instance}": supported values: {values}',
                )
            )
        else:
            causes.append(
                (path, "FieldValueInvalid", f"Invalid value: {error.instance!r}: {error.message}")
            )
    raise invalid(rt.kind, name, causes, rt.group)


def unknown_fields(rt: ResourceType, obj: Mapping[str, Any]) -> list[str]:
    """Paths of fields the kind's schema does not declare (``spec.foo``, ``spec.containers[0].bar``)."""
    validator = _builtin_validator(rt.kind, rt.api_version, True)
    found: list[str] = []
    for error in validator.iter_errors(obj):
        if error.validator != "additionalProperties":
            continue
        path = _path(error.absolute_path)
        for extra in re.findall(r"'([^']+)'", error.message.split("(", 1)[-1]):
            found.append(f"{path}.{extra}" if path else extra)
    return sorted(found)


def drop_fields(obj: dict[str, Any], paths: Iterable[str]) -> None:
    """Remove the fields at ``paths`` (as :func:`unknown_fields` writes them) from ``obj``."""
    for path in paths:
        node: Any = obj
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node.get(part)
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(parts[-1], None)


def _quantity_causes(path: str, resources: Mapping[str, Any]) -> tuple[list[Cause], dict[str, Any]]:
    causes: list[Cause] = []
    parsed: dict[str, Any] = {}
    for key in ("limits", "requests"):
        values = resources.get(key) or {}
        parsed[key] = {}
        for resource, value in values.items():
            try:
                quantity = parse_quantity(value)
            except QuantityError as exc:
                causes.append(
                    (
                        f"{path}.{key}[{resource}]",
                        "FieldValueInvalid",
                        f'Invalid value: "{value}": {exc}',
                    )
                )
                continue
            if quantity < 0:
                causes.append(
                    (
                        f"{path}.{key}[{resource}]",
                        "FieldValueInvalid",
                        f'Invalid value: "{value}": must be greater than or equal to 0',
                    )
                )
            if resource not in STANDARD_RESOURCES and "/" in resource and quantity.denominator != 1:
                causes.append(
                    (
                        f"{path}.{key}[{resource}]",
                        "FieldValueInvalid",
                        f'Invalid value: "{value}": must be an integer',
                    )
                )
            parsed[key][resource] = quantity
    for resource, request in parsed["requests"].items():
        limit = parsed["limits"].get(resource)
        extended = resource not in STANDARD_RESOURCES and "/" in resource
        if extended and limit is None:
            causes.append(
                (
                    f"{path}.limits",
                    "FieldValueRequired",
                    "Required value: Limit must be set for non overcommitable resources",
                )
            )
        elif extended and limit != request:
            causes.append(
                (
                    f"{path}.requests[{resource}]",
                    "FieldValueInvalid",
                    f'Invalid value: "{resources["requests"][resource]}": must be equal to {resource} limit of {resources["limits"][resource]}',
                )
            )
        elif limit is not None and request > limit:
            causes.append(
                (
                    f"{path}.requests",
                    "FieldValueInvalid",
                    f'Invalid value: "{resources["requests"][resource]}": must be less than or equal to {resource} limit of {resources["limits"][resource]}',
                )
            )
    return causes, parsed


def pod_spec_causes(spec: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append((f"{path}.containers", "FieldValueRequired", "Required value"))
    names: set[str] = set()
    for group in ("initContainers", "containers"):
        for n, container in enumerate(spec.get(group) or []):
            cpath = f"{path}.{group}[{n}]"
            name = container.get("name") or ""
            if not name:
                causes.append((f"{cpath}.name", "FieldValueRequired", "Required value"))
            elif not DNS1123_LABEL.fullmatch(name) or len(name) > 63:
                causes.append(
                    (f"{cpath}.name", "FieldValueInvalid", f'Invalid value: "{name}": {LABEL_MSG}')
                )
            elif name in names:
                causes.append(
                    (f"{cpath}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"')
                )
            names.add(name)
            if not container.get("image"):
                causes.append((f"{cpath}.image", "FieldValueRequired", "Required value"))
            causes += _quantity_causes(f"{cpath}.resources", container.get("resources") or {})[0]
            mounts = {v.get("name") for v in spec.get("volumes") or []}
            for m, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in mounts:
                    causes.append(
                        (
                            f"{cpath}.volumeMounts[{m}].name",
                            "FieldValueNotFound",
                            f'Not found: "{mount.get("name")}"',
                        )
                    )
    causes += podchecks.pod_causes(spec, path)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in ("Always", "OnFailure", "Never"):
        causes.append(
            (
                f"{path}.restartPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    for group in ("initContainers", "containers"):
        for n, container in enumerate(spec.get(group) or []):
            pull = container.get("imagePullPolicy")
            if pull is not None and pull not in ("Always", "IfNotPresent", "Never"):
                causes.append(
                    (
                        f"{path}.{group}[{n}].imagePullPolicy",
                        "FieldValueNotSupported",
                        f'Unsupported value: "{pull}": supported values: "Always", "IfNotPresent", "Never"',
                    )
                )
    for n, toleration in enumerate(spec.get("tolerations") or []):
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" and toleration.get("value"):
            causes.append(
                (
                    f"{path}.tolerations[{n}].operator",
                    "FieldValueInvalid",
                    "Invalid value: \"Exists\": value must be empty when `operator` is 'Exists'",
                )
            )
        if not toleration.get("key") and operator != "Exists":
            causes.append(
                (
                    f"{path}.tolerations[{n}].operator",
                    "FieldValueInvalid",
                    f'Invalid value: "{operator}": operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
    for _key, value in (spec.get("nodeSelector") or {}).items():
        if not LABEL_VALUE.fullmatch(str(value)) or len(str(value)) > 63:
            causes.append(
                (
                    f"{path}.nodeSelector",
                    "FieldValueInvalid",
                    f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric characters',
                )
            )
    return causes


def metadata_causes(rt: ResourceType, meta: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        causes.append(
            (
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )
        )
    elif name:
        if rt.kind == "Namespace" and (not DNS1123_LABEL.fullmatch(name) or len(name) > 63):
            causes.append(
                ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {LABEL_MSG}')
            )
        elif rt.kind == "Service" and (not DNS1035_LABEL.fullmatch(name) or len(name) > 63):
            causes.append(
                ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {DNS1035_MSG}')
            )
        elif not DNS1123_SUBDOMAIN.fullmatch(name) or len(name) > 253:
            causes.append(
                ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {SUBDOMAIN_MSG}')
            )
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if (
            not LABEL_NAME.fullmatch(label)
            or len(label) > 63
            or (prefix and not DNS1123_SUBDOMAIN.fullmatch(prefix))
        ):
            causes.append(
                (
                    "metadata.labels",
                    "FieldValueInvalid",
                    f"Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.'",
                )
            )
        if not isinstance(value, str) or not LABEL_VALUE.fullmatch(value) or len(value) > 63:
            causes.append(
                (
                    "metadata.labels",
                    "FieldValueInvalid",
                    f"Invalid value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                )
            )
    annotations = meta.get("annotations") or {}
    for key in annotations:
        prefix, _, label = str(key).rpartition("/")
        if not LABEL_NAME.fullmatch(label) or len(label) > 63:
            causes.append(
                (
                    "metadata.annotations",
                    "FieldValueInvalid",
                    f'Invalid value: "{key}": {QUALIFIED_NAME_MSG}',
                )
            )
        elif prefix and (not DNS1123_SUBDOMAIN.fullmatch(prefix) or len(prefix) > 253):
            causes.append(
                (
                    "metadata.annotations",
                    "FieldValueInvalid",
                    f'Invalid value: "{key}": prefix part {SUBDOMAIN_MSG}',
                )
            )
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        causes.append(
            (
                "metadata.annotations",
                "FieldValueTooLong",
                f"Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes",
            )
        )
    return causes


def config_data_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """Secret and ConfigMap keys are config keys; a ConfigMap key is in data or binaryData."""
    causes: list[Cause] = []
    sections = ("data", "stringData") if obj.get("kind") == "Secret" else ("data", "binaryData")
    seen: set[str] = set()
    for section in sections:
        for key in obj.get(section) or {}:
            if not CONFIG_KEY.fullmatch(key) or len(key) > 253 or key in (".", ".."):
                causes.append(
                    (
                        f"{section}[{key}]",
                        "FieldValueInvalid",
                        f'Invalid value: "{key}": {CONFIG_KEY_MSG}',
                    )
                )
            elif key in seen and obj.get("kind") == "ConfigMap":
                causes.append(
                    (
                        f"data[{key}]",
                        "FieldValueInvalid",
                        f'Invalid value: "{key}": duplicate of key present in binaryData',
                    )
                )
            seen.add(key)
    size = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values()) + sum(
        len(base64_decoded(v)) for v in (obj.get("binaryData") or {}).values()
    )
    if obj.get("kind") == "Secret":
        size = sum(len(base64_decoded(v)) for v in (obj.get("data") or {}).values()) + sum(
            len(str(v).encode()) for v in (obj.get("stringData") or {}).values()
        )
    if size > CONFIG_MAX_BYTES:
        field = "data" if obj.get("kind") == "Secret" else "[]"
        causes.append(
            (field, "FieldValueTooLong", f"Too long: must have at most {CONFIG_MAX_BYTES} bytes")
        )
    return causes


def base64_decoded(value: Any) -> bytes:
    import base64
    import binascii

    try:
        return base64.b64decode(str(value))
    except (binascii.Error, ValueError):
        return b""


def claim_causes(spec: Mapping[str, Any]) -> list[Cause]:
    """A claim names its access modes and requests storage."""
    causes: list[Cause] = []
    if not spec.get("accessModes"):
        causes.append(
            (
                "spec.accessModes",
                "FieldValueRequired",
                "Required value: at least 1 access mode is required",
            )
        )
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(("spec.resources[storage]", "FieldValueRequired", "Required value"))
    mode = spec.get("volumeMode")
    if mode is not None and mode not in ("Block", "Filesystem"):
        causes.append(
            (
                "spec.volumeMode",
                "FieldValueNotSupported",
                f'Unsupported value: "{mode}": supported values: "Block", "Filesystem"',
            )
        )
    return causes


def semantic_causes(
    rt: ResourceType, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[Cause]:
    causes = metadata_causes(rt, obj.get("metadata") or {})
    spec = obj.get("spec") or {}
    if rt.kind == "Pod":
        causes += pod_spec_causes(spec, "spec")
        if old is not None:
            causes += _pod_update_causes(old.get("spec") or {}, spec)
    elif rt.kind == "Job":
        template = (spec.get("template") or {}).get("spec") or {}
        causes += pod_spec_causes(template, "spec.template.spec")
        if template.get("restartPolicy") not in ("Never", "OnFailure"):
            causes.append(
                (
                    "spec.template.spec.restartPolicy",
                    "FieldValueRequired",
                    'Required value: valid values: "OnFailure", "Never"',
                )
            )
        if old is not None and (old.get("spec") or {}).get("template") != spec.get("template"):
            causes.append(
                ("spec.template", "FieldValueInvalid", "Invalid value: field is immutable")
            )
    elif rt.kind in ("Secret", "ConfigMap"):
        causes += config_data_causes(obj)
    elif rt.kind == "Service":
        causes += servicechecks.service_causes(spec)
    elif rt.kind == "PersistentVolumeClaim" and old is None:
        causes += claim_causes(spec)
    elif rt.kind == "Node":
        for n, taint in enumerate(spec.get("taints") or []):
            if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                causes.append(
                    (
                        f"spec.taints[{n}].effect",
                        "FieldValueNotSupported",
                        f'Unsupported value: "{taint.get("effect")}": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                    )
                )
    return causes


def _pod_update_causes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """Pod specs are immutable but for images, activeDeadlineSeconds and added tolerations."""

    def mutable_removed(spec: Mapping[str, Any]) -> dict[str, Any]:
        copy = {
            k: v
            for k, v in spec.items()
            if k not in ("activeDeadlineSeconds", "tolerations", "nodeName")
        }
        for group in ("containers", "initContainers"):
            if group in copy:
                copy[group] = [{k: v for k, v in c.items() if k != "image"} for c in copy[group]]
        return copy

    causes: list[Cause] = []
    if mutable_removed(old) != mutable_removed(new):
        causes.append(
            (
                "spec",
                "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            )
        )
    old_tolerations = old.get("tolerations") or []
    if any(t not in (new.get("tolerations") or []) for t in old_tolerations):
        causes.append(
            (
                "spec.tolerations",
                "FieldValueForbidden",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )
        )
    if old.get("nodeName") and new.get("nodeName") != old.get("nodeName"):
        causes.append(
            (
                "spec.nodeName",
                "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than ...",
            )
        )
    return causes


_BASE64 = re.compile(r"[A-Za-z0-9+/]*")


def base64_error(text: Any) -> str | None:
    """Go's ``encoding/json`` error for a ``[]byte`` field that is not standard base64."""
    if not isinstance(text, str):
        return None
    body = text.rstrip("=")
    bad = _BASE64.match(body)
    end = bad.end() if bad else 0
    if end < len(body):
        return f"illegal base64 data at input byte {end}"
    padding = len(text) - len(body)
    if len(text) % 4 or padding > 2 or (padding and len(body) % 4 in (0, 1)):
        return f"illegal base64 data at input byte {len(body) - len(body) % 4}"
    return None


def check_bytes(rt: ResourceType, obj: Mapping[str, Any]) -> None:
    """Secret ``data`` and ConfigMap ``binaryData`` decode as base64, or the request is a 400."""
    section = {"Secret": "data", "ConfigMap": "binaryData"}.get(rt.kind)
    if section is None:
        return
    for value in (obj.get(section) or {}).values():
        error = base64_error(value)
        if error:
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}'
            )


def validate_builtin(
    rt: ResourceType, obj: Mapping[str, Any], old: Mapping[str, Any] | None, strict: bool
) -> None:
    check_bytes(rt, obj)
    validate_schema(rt, obj, strict)
    causes = semantic_causes(rt, obj, old)
    if causes:
        raise invalid(rt.kind, (obj.get("metadata") or {}).get("name") or "", causes, rt.group)


# -- custom resources ----------------------------------------------------------------------
def prune(value: Any, schema: Mapping[str, Any], root: bool = False) -> Any:
    """Drop fields the structural schema does not declare (Kubernetes' pruning)."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return value
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        result = {}
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                result[key] = item
            elif properties is not None and key in properties:
                result[key] = prune(item, properties[key])
            elif isinstance(additional, dict):
                result[key] = prune(item, additional)
            elif (
                properties is None
                and additional is None
                and not schema.get("x-kubernetes-preserve-unknown-fields")
            ):
                continue
            elif schema.get("x-kubernetes-preserve-unknown-fields"):
                result[key] = item
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


def _openapi_to_jsonschema(schema: Any) -> Any:
    """OpenAPI v3 schema -> JSON Schema: drop ``x-kubernetes-*``; ``nullable`` widens the type."""
    if isinstance(schema, list):
        return [_openapi_to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {
        k: _openapi_to_jsonschema(v)
        for k, v in schema.items()
        if not k.startswith("x-kubernetes-") and k != "nullable"
    }
    if schema.get("nullable") and "type" in result:
        result["type"] = [result["type"], "null"]
    if schema.get("x-kubernetes-int-or-string"):
        result.pop("type", None)
        result["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return result


@functools.lru_cache(maxsize=64)
def _cr_validator(schema_json: str) -> jsonschema.protocols.Validator:
    import json

    return jsonschema.validators.Draft7Validator(_openapi_to_jsonschema(json.loads(schema_json)))


def validate_custom(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Prune and validate a custom resource; returns the pruned object."""
    import json

    meta = obj.get("metadata") or {}
    causes = metadata_causes(rt, meta)
    if rt.schema is None:
        if causes:
            raise invalid(rt.kind, meta.get("name") or "", causes, rt.group)
        return obj
    pruned = prune(obj, rt.schema, root=True)
    validator = _cr_validator(json.dumps(rt.schema, sort_keys=True))
    body = {k: v for k, v in pruned.items() if k not in ("apiVersion", "kind", "metadata")}
    for error in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
        path = _path(error.absolute_path)
        if error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            causes.append(
                (
                    f"{path}.{missing[0]}" if path else missing[0],
                    "FieldValueRequired",
                    "Required value",
                )
            )
        elif error.validator == "type":
            wanted = (
                error.validator_value
                if isinstance(error.validator_value, str)
                else error.validator_value[0]
            )
            causes.append(
                (
                    path,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "{type(error.instance).__name__}": {path} in body must be of type {wanted}: "{type(error.instance).__name__}"',
                )
            )
        elif error.validator == "enum":
            values = ", ".join(f'"{v}"' for v in error.validator_value)
            causes.append(
                (
                    path,
                    "FieldValueNotSupported",
                    f"Unsupported value: {json.dumps(error.instance)}: supported values: {values}",
                )
            )
        else:
            causes.append(
                (
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {json.dumps(error.instance)}: {path} in body {error.message}",
                )
            )
    if causes:
        raise invalid(rt.kind, meta.get("name") or "", causes, rt.group)
    return pruned


def check_crd(obj: Mapping[str, Any]) -> None:
    """The CRD checks that matter for serving it: names and one storage version with a schema."""
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    causes: list[Cause] = []
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if name != expected:
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
            )
        )
    versions = spec.get("versions") or []
    if sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            (
                "spec.versions",
                "FieldValueInvalid",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for n, version in enumerate(versions):
        if not ((version.get("schema") or {}).get("openAPIV3Schema")):
            causes.append(
                (
                    f"spec.versions[{n}].schema.openAPIV3Schema",
                    "FieldValueRequired",
                    "Required value: schemas are required",
                )
            )
    if causes:
        raise APIError(
            422,
            "Invalid",
            f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: '
            + "; ".join(f"{f}: {m}" for f, _, m in causes),
            {
                "name": name,
                "group": "apiextensions.k8s.io",
                "kind": "CustomResourceDefinition",
                "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
            },
        )
