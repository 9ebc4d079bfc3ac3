"""The devices DRA drivers publish in ResourceSlices (:class:`Device`), the DeviceClasses that
pick among them (:class:`DeviceClassInfo`), and what people call a device ("GPU 3
(A100-SXM4-80GB) on a100-7").

Pure functions of the API's JSON (``resource.k8s.io/v1``), below the capacity watch that
decodes slices and classes with them (:mod:`gpuhub.k8s.inventory`) and the holdings that name
their devices. Selectors are evaluated by :mod:`gpuhub.core.cel`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from gpuhub.core.cel import DeviceView, Quantity, Selector, SelectorError, Version, compile_selector
from gpuhub.core.quantity import QuantityError, parse_quantity

# The NVIDIA DRA driver's name and attribute domain.
NVIDIA_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class Device(DeviceView):
    """One device of a ResourceSlice: its pool and name (unique per driver), and the node
    whose pods it serves ("" for a device reachable from several nodes)."""

    pool: str = ""
    name: str = ""
    node: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """What an allocation result names: (driver, pool, device)."""
        return (self.driver, self.pool, self.name)

    def attribute(self, name: str) -> Any:
        """The attribute ``name`` of the driver's domain (None if absent)."""
        return self.attributes.get(f"{self.driver}/{name}")

    @property
    def memory(self) -> int | None:
        """Its ``memory`` capacity in bytes (the NVIDIA driver's name); None if absent."""
        quantity = self.capacity.get(f"{self.driver}/memory")
        return None if quantity is None else int(quantity.value)

    @cached_property
    def product(self) -> str:
        """Its product without the maker ("A100-SXM4-80GB"); "" where not published."""
        product = self.attribute("productName")
        return product.removeprefix("NVIDIA ") if isinstance(product, str) else ""

    @cached_property
    def short_words(self) -> str:
        """ "GPU 3", "MIG 1g.10gb #2 of GPU 0": how people call it, from the NVIDIA driver's
        names (``gpu-<minor>``, ``gpu-<minor>-mig-<profile>-<id>-<placement start>``) and its
        ``profile``; another driver's device by its name."""
        whole = re.fullmatch(r"gpu-(\d+)", self.name)
        if whole:
            return f"GPU {whole[1]}"
        mig = re.fullmatch(r"gpu-(\d+)-mig-.*-(\d+)", self.name)
        profile = self.attribute("profile")
        if mig and isinstance(profile, str):
            # Several devices of one profile on one GPU: told apart by where they start.
            return f"MIG {profile} #{mig[2]} of GPU {mig[1]}"
        return f"device {self.name}"

    @cached_property
    def words(self) -> str:
        """ "GPU 3 (A100-SXM4-80GB)", "MIG 1g.10gb #0 of GPU 0 (A100-SXM4-80GB)"."""
        return f"{self.short_words} ({self.product})" if self.product else self.short_words

    @cached_property
    def words_on_node(self) -> str:
        """ "GPU 3 (A100-SXM4-80GB) on a100-7"."""
        return f"{self.words} on {self.node}" if self.node else self.words


def device_from_slice(driver: str, pool: str, node: str, entry: Mapping[str, Any]) -> Device | None:
    """A device of a ResourceSlice's ``spec.devices[]`` (API JSON); None without a name.

    Unqualified attribute and capacity names are in the driver's domain (as Kubernetes'
    CEL environment reads them); list-typed attributes (alpha) are left out."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        return None
    attributes: dict[str, Any] = {}
    for key, value in (entry.get("attributes") or {}).items():
        if not isinstance(value, dict):  # JSON's objects (dict: cheaper to test than Mapping)
            continue
        qualified = key if "/" in key else f"{driver}/{key}"
        if "string" in value:
            attributes[qualified] = str(value["string"])
        elif "bool" in value:
            attributes[qualified] = bool(value["bool"])
        elif "int" in value:
            attributes[qualified] = int(value["int"])
        elif "version" in value:
            try:
                attributes[qualified] = Version.parse(str(value["version"]))
            except ValueError:
                continue
    capacity: dict[str, Quantity] = {}
    for key, value in (entry.get("capacity") or {}).items():
        quantity = quantity_of(value.get("value") if isinstance(value, dict) else None)
        if quantity is not None:
            capacity[key if "/" in key else f"{driver}/{key}"] = quantity
    return Device(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple=bool(entry.get("allowMultipleAllocations")),
        pool=pool,
        name=name,
        node=node,
    )


def quantity_of(value: Any) -> Quantity | None:
    """A quantity from the API's JSON (``"80Gi"``, ``85899345920``); None if it is none."""
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return _quantity(value)


@lru_cache(maxsize=4096)
def _quantity(value: str | int | float) -> Quantity | None:
    """Parsed once: a cluster's devices repeat a handful of capacities."""
    try:
        return Quantity(parse_quantity(value))
    except QuantityError:
        return None


@dataclass(frozen=True)
class DeviceClassInfo:
    """A DeviceClass as the capacity figures need it: its selectors, compiled where gpuhub
    can evaluate them (``unsupported`` names the first it cannot)."""

    name: str
    selectors: tuple[Selector, ...] = ()
    unsupported: str = ""
    expressions: tuple[str, ...] = field(default=(), compare=True)

    def admits(self, device: DeviceView) -> bool:
        return not self.unsupported and all(s.matches(device) for s in self.selectors)


def device_class_info(obj: Mapping[str, Any]) -> DeviceClassInfo:
    """A ``resource.k8s.io/v1`` DeviceClass (API JSON) as :class:`DeviceClassInfo`."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    expressions = tuple(
        str(((s or {}).get("cel") or {}).get("expression") or "")
        for s in (obj.get("spec") or {}).get("selectors") or ()
    )
    selectors = []
    for expression in expressions:
        try:
            selectors.append(compile_selector(expression))
        except SelectorError as exc:
            return DeviceClassInfo(name, (), f"{expression!r}: {exc}", expressions)
    return DeviceClassInfo(name, tuple(selectors), "", expressions)
