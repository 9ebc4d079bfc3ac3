"""Service checks of the apiserver's ``ValidateService`` that the schema cannot express."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .podchecks import Cause, port_name_errors

SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")


def _port_range(value: int, field: str) -> list[Cause]:
    if 1 <= value <= 65535:
        return []
    return [
        (
            field,
            "FieldValueInvalid",
            f"Invalid value: {value}: must be between 1 and 65535, inclusive",
        )
    ]


def service_causes(spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    kind = spec.get("type", "ClusterIP")
    if kind not in SERVICE_TYPES:
        values = ", ".join(f'"{t}"' for t in SERVICE_TYPES)
        causes.append(
            (
                "spec.type",
                "FieldValueNotSupported",
                f'Unsupported value: "{kind}": supported values: {values}',
            )
        )
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    if not ports and kind != "ExternalName" and not headless:
        causes.append(("spec.ports", "FieldValueRequired", "Required value"))
    names: set[str] = set()
    seen: set[tuple[int, str]] = set()
    for n, port in enumerate(ports):
        path = f"spec.ports[{n}]"
        name = port.get("name") or ""
        if len(ports) > 1 and not name:
            causes.append((f"{path}.name", "FieldValueRequired", "Required value"))
        elif name:
            for error in port_name_errors(name):
                causes.append(
                    (f"{path}.name", "FieldValueInvalid", f'Invalid value: "{name}": {error}')
                )
            if name in names:
                causes.append((f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            names.add(name)
        number = port.get("port") or 0
        causes += _port_range(number, f"{path}.port")
        protocol = port.get("protocol", "TCP")
        if protocol not in ("TCP", "UDP", "SCTP"):
            causes.append(
                (
                    f"{path}.protocol",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{protocol}": supported values: "SCTP", "TCP", "UDP"',
                )
            )
        if (number, protocol) in seen:
            causes.append(
                (
                    path,
                    "FieldValueDuplicate",
                    f'Duplicate value: {{"port":{number},"protocol":"{protocol}"}}',
                )
            )
        seen.add((number, protocol))
        target = port.get("targetPort")
        if isinstance(target, int):
            causes += _port_range(target, f"{path}.targetPort")
        elif isinstance(target, str):
            for error in port_name_errors(target):
                causes.append(
                    (
                        f"{path}.targetPort",
                        "FieldValueInvalid",
                        f'Invalid value: "{target}": {error}',
                    )
                )
        node_port = port.get("nodePort")
        if node_port is not None and kind not in ("NodePort", "LoadBalancer"):
            causes.append(
                (
                    f"{path}.nodePort",
                    "FieldValueForbidden",
                    "Forbidden: may not be used when `type` is 'ClusterIP'",
                )
            )
    return causes
