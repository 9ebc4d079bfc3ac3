"""GPUs claimed through Dynamic Resource Allocation (``resource.k8s.io/v1``): a GPU type's
``"dra"`` config (:class:`DRAType`).

The one home of a DRA type's parsed config: the policy (:mod:`gpuhub.core.policy`) validates
the admin's ``gpu_types[...]["dra"]`` through :meth:`DRAType.from_config`; the pods'
claims, the capacity watch and the form read the result. Selectors are CEL, evaluated for the
form's figures by :mod:`gpuhub.core.cel` (the scheduler evaluates them for allocation); the
devices they are evaluated on are :mod:`gpuhub.core.dra_devices`'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuhub.core.cel import DeviceView, Selector, SelectorError, compile_selector

# Kubernetes' limit on selectors per request (resource.k8s.io DeviceSelectorsMaxSize).
MAX_SELECTORS = 32
# Kubernetes' limit on the devices one claim is given (AllocationResultsMaxSize).
MAX_DEVICES = 32
# A DeviceClass name is a DNS subdomain.
_CLASS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_KEYS = ("device_class", "selectors", "capacity")
# A capacity name is a DNS label (resource.k8s.io QualifiedName's name part).
_CAPACITY_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?|[a-zA-Z][a-zA-Z0-9]{0,62}")


class DRAConfigError(ValueError):
    """A mistake in a GPU type's ``dra`` dict; the message names the setting."""


@dataclass(frozen=True)
class DRAType:
    """How a GPU type's devices are claimed: a DeviceClass, the type's own selectors
    (compiled: an expression gpuhub cannot evaluate is refused at hub start), and for shares
    by memory the device capacity each claim consumes (``memory``, the NVIDIA driver's)."""

    device_class: str
    selectors: tuple[Selector, ...] = ()
    capacity: str = "memory"

    @property
    def expressions(self) -> tuple[str, ...]:
        """The selectors as the admin wrote them (what a claim template's request carries)."""
        return tuple(s.expression for s in self.selectors)

    def admits(self, device: DeviceView) -> bool:
        """Whether ``device`` satisfies every one of the type's own selectors (the class's
        selectors are the cluster's: :func:`class_admits`)."""
        return all(s.matches(device) for s in self.selectors)

    def kueue_refusal(self, name: str) -> str | None:
        """Why Kueue could not admit this type's claims (None: it can). gpuhub asks for
        ``exactly`` a count of one class, which Kueue 0.19 counts; ``firstAvailable``, ``All``
        and adminAccess, which it refuses, are never written."""
        return None

    @classmethod
    def from_config(cls, name: str, value: Any) -> DRAType | None:
        """Validate ``{"device_class": str, "selectors": [CEL, ...], "capacity": "memory"}``
        (None: not a DRA type); ``name`` is the setting's path for the sentences
        (``gpu_types['a100'].dra``)."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise DRAConfigError(
                f"{name} must be a dict like {{'device_class': 'gpu.nvidia.com', "
                f"'selectors': [...]}}, not {type(value).__name__}"
            )
        extra = sorted(set(value) - set(_KEYS))
        if extra:
            raise DRAConfigError(
                f"{name} has unknown keys {extra}; known keys are {', '.join(_KEYS)}"
            )
        device_class = value.get("device_class")
        if not isinstance(device_class, str) or not _CLASS_NAME.fullmatch(device_class):
            raise DRAConfigError(
                f"{name}.device_class must name a DeviceClass (a DNS subdomain such as "
                f"'gpu.nvidia.com'), not {device_class!r}"
            )
        raw = value.get("selectors", ())
        if isinstance(raw, str) or not isinstance(raw, Sequence):
            raise DRAConfigError(f"{name}.selectors must be a list of CEL expressions")
        if len(raw) > MAX_SELECTORS:
            raise DRAConfigError(
                f"{name}.selectors has {len(raw)} expressions; Kubernetes allows {MAX_SELECTORS}"
            )
        selectors = []
        for i, expression in enumerate(raw):
            if not isinstance(expression, str):
                raise DRAConfigError(f"{name}.selectors[{i}] must be a string of CEL")
            try:
                selectors.append(compile_selector(expression))
            except SelectorError as exc:
                raise DRAConfigError(
                    f"{name}.selectors[{i}] {expression!r} cannot be evaluated by gpuhub: {exc}. "
                    "It supports device.attributes[...]/capacity[...] with ==, !=, <, >, "
                    "startsWith, endsWith, contains, matches, quantity(...).compareTo(...), "
                    "has(), in, !, && and || (docs/admin-guide.md, GPUs through DRA)."
                ) from None
        capacity = value.get("capacity", "memory")
        if not isinstance(capacity, str) or not _CAPACITY_NAME.fullmatch(capacity):
            raise DRAConfigError(
                f"{name}.capacity must name a device capacity such as 'memory', not {capacity!r}"
            )
        return cls(device_class, tuple(selectors), capacity)
