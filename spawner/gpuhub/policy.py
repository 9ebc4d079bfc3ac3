"""Admin policy: images, GPU types, resource ranges and per-group limits.

The admin writes plain dicts in ``jupyterhub_config.py`` or Helm values (see DESIGN.md);
:meth:`Policy.from_config` checks them once at start-up and turns them into frozen objects
that the spawn form, both spawners, the job API and the hub service share. A mistake in the
admin's config is a :class:`PolicyConfigError` naming the setting, raised before any user
sees a form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .quantity import QuantityError, format_memory, parse_cpu, parse_memory

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

# Keys (image names, GPU type names, group names) travel in form values, URLs and labels.
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# A Kubernetes extended resource name such as nvidia.com/gpu or nvidia.com/mig-1g.10gb.
_RESOURCE = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9][-A-Za-z0-9_.]{0,62}"
)


class PolicyConfigError(ValueError):
    """The admin's gpuhub configuration is invalid; the message names the setting."""


@dataclass(frozen=True)
class ImageChoice:
    key: str
    display_name: str
    image: str
    description: str = ""
    default: bool = False  # explicit default; Helm hands maps over sorted, so order can't say it


@dataclass(frozen=True)
class GPUType:
    key: str
    display_name: str
    resource_name: str = DEFAULT_GPU_RESOURCE
    max_gpus: int = 1
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    description: str = ""
    # LocalGPUSpawner only: which device indices of the workstation are of this type.
    devices: tuple[int, ...] | None = None
    default: bool = False

    @property
    def is_mig(self) -> bool:
        return self.resource_name.startswith("nvidia.com/mig-")


@dataclass(frozen=True)
class Range:
    """An inclusive range with a default; CPU in cores, memory in bytes."""

    min: float
    max: float
    default: float


@dataclass(frozen=True)
class Limits:
    """What one user may ask for. ``None`` for a set means 'every configured one'."""

    max_gpus: int = 0
    gpu_types: frozenset[str] | None = None
    images: frozenset[str] | None = None

    def allows_gpu_type(self, key: str) -> bool:
        return self.gpu_types is None or key in self.gpu_types

    def allows_image(self, key: str) -> bool:
        return self.images is None or key in self.images

    def merge(self, other: Limits) -> Limits:
        """The more permissive of two limits, field by field."""

        def union(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
            return None if a is None or b is None else a | b

        return Limits(
            max_gpus=max(self.max_gpus, other.max_gpus),
            gpu_types=union(self.gpu_types, other.gpu_types),
            images=union(self.images, other.images),
        )


@dataclass(frozen=True)
class Policy:
    images: Mapping[str, ImageChoice]
    custom_image_pattern: re.Pattern[str] | None
    gpu_types: Mapping[str, GPUType]
    cpu: Range
    memory: Range
    group_limits: Mapping[str, Limits]
    default_limits: Limits

    def limits_for(self, groups: Iterable[str]) -> Limits:
        """Most permissive limits among the user's configured groups, else the default."""
        found = [self.group_limits[g] for g in groups if g in self.group_limits]
        if not found:
            return self.default_limits
        merged = found[0]
        for limits in found[1:]:
            merged = merged.merge(limits)
        return merged

    def allowed_gpu_types(self, limits: Limits) -> list[GPUType]:
        """GPU types a user with ``limits`` may pick: the default first, then the admin's order."""
        if limits.max_gpus <= 0:
            return []
        return _default_first(t for t in self.gpu_types.values() if limits.allows_gpu_type(t.key))

    def allowed_images(self, limits: Limits) -> list[ImageChoice]:
        """Images a user with ``limits`` may pick: the default first, then the admin's order."""
        return _default_first(i for i in self.images.values() if limits.allows_image(i.key))

    def max_gpus_for(self, limits: Limits, gpu_type: GPUType) -> int:
        return min(limits.max_gpus, gpu_type.max_gpus)

    @property
    def default_image(self) -> ImageChoice | None:
        return next(iter(_default_first(self.images.values())), None)

    @classmethod
    def from_config(
        cls,
        *,
        images: Mapping[str, Any] | None = None,
        custom_image_pattern: str = "",
        gpu_types: Mapping[str, Any] | None = None,
        cpu_range: Mapping[str, Any] | None = None,
        memory_range: Mapping[str, Any] | None = None,
        group_limits: Mapping[str, Any] | None = None,
        default_limits: Mapping[str, Any] | None = None,
    ) -> Policy:
        """Validate the admin's dicts (DESIGN.md contract) into a Policy."""
        parsed_images = {k: _image(k, v) for k, v in (images or {}).items()}
        parsed_types = {k: _gpu_type(k, v) for k, v in (gpu_types or {}).items()}
        pattern = None
        if custom_image_pattern:
            try:
                pattern = re.compile(custom_image_pattern)
            except re.error as exc:
                raise PolicyConfigError(
                    f"custom_image_pattern is not a valid regex: {exc}"
                ) from exc
        cpu = _range("cpu_range", cpu_range, {"min": 0.5, "max": 8, "default": 1}, parse_cpu)
        memory = _range(
            "memory_range",
            memory_range,
            {"min": "512Mi", "max": "32G", "default": "2G"},
            parse_memory,
        )
        groups = {
            g: _limits(f"group_limits[{g!r}]", v, parsed_types, parsed_images)
            for g, v in (group_limits or {}).items()
        }
        default = _limits(
            "default_limits", default_limits or {"max_gpus": 1}, parsed_types, parsed_images
        )
        return cls(
            images=parsed_images,
            custom_image_pattern=pattern,
            gpu_types=parsed_types,
            cpu=cpu,
            memory=memory,
            group_limits=groups,
            default_limits=default,
        )

    def describe_memory(self) -> str:
        return f"{format_memory(int(self.memory.min))} to {format_memory(int(self.memory.max))}"


_Choice = TypeVar("_Choice", ImageChoice, GPUType)


def _default_first(items: Iterable[_Choice]) -> list[_Choice]:
    ordered = list(items)
    return sorted(ordered, key=lambda item: not item.default)  # stable: admin order otherwise


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PolicyConfigError(f"{name} must be true or false")
    return value


def _mapping(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyConfigError(f"{name} must be a dict, not {type(value).__name__}")
    return value


def _key(name: str, key: Any) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise PolicyConfigError(f"{name} key {key!r} must be 1-63 letters, digits, '.', '_' or '-'")
    return key


def _text(name: str, value: Any, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise PolicyConfigError(f"{name} must be a string")
    return value


def _unknown(name: str, entry: Mapping[str, Any], known: set[str]) -> None:
    extra = sorted(set(entry) - known)
    if extra:
        raise PolicyConfigError(f"{name} has unknown keys {extra}; known keys are {sorted(known)}")


def _image(key: str, value: Any) -> ImageChoice:
    name = f"images[{key!r}]"
    _key("images", key)
    if isinstance(value, str):
        value = {"image": value}
    entry = _mapping(name, value)
    _unknown(name, entry, {"display_name", "image", "description", "default"})
    image = _text(f"{name}.image", entry.get("image"))
    if not image:
        raise PolicyConfigError(f"{name}.image is required")
    return ImageChoice(
        key=key,
        display_name=_text(f"{name}.display_name", entry.get("display_name"), image),
        image=image,
        description=_text(f"{name}.description", entry.get("description")),
        default=_flag(f"{name}.default", entry.get("default", False)),
    )


def _gpu_type(key: str, value: Any) -> GPUType:
    name = f"gpu_types[{key!r}]"
    _key("gpu_types", key)
    entry = _mapping(name, value)
    _unknown(
        name,
        entry,
        {
            "display_name",
            "resource_name",
            "max_gpus",
            "node_selector",
            "tolerations",
            "description",
            "devices",
            "default",
        },
    )
    resource = _text(f"{name}.resource_name", entry.get("resource_name"), DEFAULT_GPU_RESOURCE)
    if not _RESOURCE.fullmatch(resource):
        raise PolicyConfigError(
            f"{name}.resource_name {resource!r} is not a Kubernetes resource name"
        )
    max_gpus = entry.get("max_gpus", 1)
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 1:
        raise PolicyConfigError(f"{name}.max_gpus must be a whole number of at least 1")
    selector = _mapping(f"{name}.node_selector", entry.get("node_selector") or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
        raise PolicyConfigError(f"{name}.node_selector must map strings to strings")
    tolerations = entry.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise PolicyConfigError(f"{name}.tolerations must be a list of toleration dicts")
    devices = entry.get("devices")
    if devices is not None:
        if not isinstance(devices, list | tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices
        ):
            raise PolicyConfigError(f"{name}.devices must be a list of GPU indices")
        devices = tuple(devices)
    return GPUType(
        key=key,
        display_name=_text(f"{name}.display_name", entry.get("display_name"), key),
        resource_name=resource,
        max_gpus=max_gpus,
        node_selector=dict(selector),
        tolerations=tuple(dict(t) for t in tolerations),
        description=_text(f"{name}.description", entry.get("description")),
        devices=devices,
        default=_flag(f"{name}.default", entry.get("default", False)),
    )


def _range(name: str, value: Any, fallback: Mapping[str, Any], parse: Any) -> Range:
    entry = dict(fallback)
    entry.update(_mapping(name, value or {}))
    _unknown(name, entry, {"min", "max", "default"})
    try:
        low, high = parse(entry["min"]), parse(entry["max"])
        default = parse(entry["default"]) if "default" in entry else low
    except QuantityError as exc:
        raise PolicyConfigError(f"{name}: {exc}") from exc
    if not low <= default <= high:
        raise PolicyConfigError(f"{name} needs min <= default <= max")
    if high <= 0:
        raise PolicyConfigError(f"{name}.max must be above zero")
    return Range(min=low, max=high, default=default)


def _names(name: str, value: Any, known: Mapping[str, Any]) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple | set | frozenset) or not all(
        isinstance(v, str) for v in value
    ):
        raise PolicyConfigError(f"{name} must be a list of names")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise PolicyConfigError(f"{name} names {unknown}, which are not configured")
    return frozenset(value)


def _limits(
    name: str, value: Any, gpu_types: Mapping[str, GPUType], images: Mapping[str, ImageChoice]
) -> Limits:
    entry = _mapping(name, value)
    _unknown(name, entry, {"max_gpus", "gpu_types", "images"})
    max_gpus = entry.get("max_gpus", 0)
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 0:
        raise PolicyConfigError(f"{name}.max_gpus must be a whole number of at least 0")
    return Limits(
        max_gpus=max_gpus,
        gpu_types=_names(f"{name}.gpu_types", entry.get("gpu_types"), gpu_types),
        images=_names(f"{name}.images", entry.get("images"), images),
    )
