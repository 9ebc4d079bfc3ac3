"""Validate a custom resource offline against the CRDs kubesim installs (``crds/``), strictly:
what the apiserver would prune (an unknown field) is an error here, as ``fieldValidation=Strict``
makes it. For tests of manifests that are not Kubernetes built-ins (the chart's LocalQueue,
the admin guide's ClusterQueue), which ``kubernetes_validate`` has no schema for."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from .errors import APIError
from .resources import ResourceType
from .validation import prune, validate_custom

CRD_DIR = Path(__file__).parent / "crds"


@functools.lru_cache(maxsize=1)
def _types() -> dict[tuple[str, str], ResourceType]:
    found = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            rt = ResourceType(
                group=spec["group"],
                version=version["name"],
                kind=spec["names"]["kind"],
                plural=spec["names"]["plural"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                crd=True,
            )
            found[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = rt
    return found


def serves(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is a kind one of kubesim's CRDs defines."""
    return (obj.get("apiVersion"), obj.get("kind")) in _types()


def validate_strict(obj: dict[str, Any]) -> None:
    """AssertionError naming the problem if ``obj`` does not fit its CRD's schema."""
    rt = _types()[(obj["apiVersion"], obj["kind"])]
    try:
        validate_custom(rt, obj)
    except APIError as exc:
        raise AssertionError(
            f"{obj['kind']} {obj['metadata'].get('name')}: {exc.message}"
        ) from None
    assert rt.schema is not None
    if prune(obj, rt.schema, root=True) != obj:
        raise AssertionError(f"{obj['kind']} {obj['metadata'].get('name')}: unknown fields")
