"""Admin policy: images, GPU types, resource ranges and per-group limits.

The admin writes plain dicts in ``jupyterhub_config.py`` or Helm values (see docs/architecture.md);
:meth:`Policy.from_config` checks them once at start-up and turns them into frozen objects
that the spawn form, both spawners, the job API and the hub service share. A mistake in the
admin's config is a :class:`PolicyConfigError` naming the setting, raised before any user
sees a form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuhub.core.dra import MAX_DEVICES, DRAConfigError, DRAType
from gpuhub.core.gpu_resources import GPU_RESOURCE_NAMES, is_gpu_resource, is_mig_resource
from gpuhub.core.quantity import QuantityError, format_memory, parse_cpu, parse_memory
from gpuhub.core.sharing import Platform, Sharing, SharingConfigError

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
    # Parts of a device instead of whole ones (gpuhub.core.sharing); None: whole GPUs.
    sharing: Sharing | None = None
    # Claimed through Dynamic Resource Allocation (gpuhub.core.dra); None: an extended
    # resource (``resource_name``, which is "" for a DRA type).
    dra: DRAType | None = None

    @property
    def is_mig(self) -> bool:
        return is_mig_resource(self.resource_name)

    @property
    def shares_memory(self) -> bool:
        """Whether a request asks for ``gpu_memory`` of one device (sharing by memory)."""
        return self.sharing is not None and self.sharing.by_memory


@dataclass(frozen=True)
class Range:
    """An inclusive range with a default; CPU in cores, memory in bytes."""

    min: float
    max: float
    default: float


@dataclass(frozen=True)
class Limits:
    """What one group allows. ``None`` for a set means 'every configured one'."""

    max_gpus: int = 0
    gpu_types: frozenset[str] | None = None
    images: frozenset[str] | None = None
    # With an ``images`` list, custom image references are allowed only when this says so;
    # without one (every image allowed), custom images follow ``custom_image_pattern``.
    custom_images: bool | None = None

    def allows_gpu_type(self, key: str) -> bool:
        return self.max_gpus > 0 and (self.gpu_types is None or key in self.gpu_types)

    def allows_image(self, key: str | None) -> bool:
        """``key`` None is a custom image reference (the pattern is checked elsewhere)."""
        if key is None:
            return self.custom_images if self.custom_images is not None else self.images is None
        return self.images is None or key in self.images

    def allows_gpus(self, gpu_type: GPUType, gpus: int) -> bool:
        return gpus <= 0 or (
            self.allows_gpu_type(gpu_type.key) and gpus <= min(self.max_gpus, gpu_type.max_gpus)
        )


@dataclass(frozen=True)
class UserLimits:
    """The limits of each of a user's configured groups, kept apart.

    A request is allowed when **one** group allows all of it together (image, GPU type and
    count); merging groups field by field would let a user combine the GPU count of one
    group with the GPU type of another. What the form offers is the union over groups.
    """

    groups: tuple[Limits, ...]

    @property
    def max_gpus(self) -> int:
        return max((g.max_gpus for g in self.groups), default=0)

    def allows_gpu_type(self, key: str) -> bool:
        return any(g.allows_gpu_type(key) for g in self.groups)

    def allows_image(self, key: str | None) -> bool:
        return any(g.allows_image(key) for g in self.groups)

    def allows(
        self, image_key: str | None, gpu_type: GPUType | None, gpus: int, *, custom: bool = False
    ) -> bool:
        """Whether one group allows this image (``custom``: a custom reference; neither: the
        spawner's own image) together with ``gpus`` GPUs of ``gpu_type``."""
        return any(
            (g.allows_image(image_key) if image_key is not None or custom else True)
            and (gpu_type is None or g.allows_gpus(gpu_type, gpus))
            for g in self.groups
        )


@dataclass(frozen=True)
class GPUChoice:
    """A GPU type a user may ask for, and the most GPUs of it one request may have."""

    gpu_type: GPUType
    max_gpus: int


@dataclass(frozen=True)
class UserChoices:
    """What one user may choose: the spawn form and the jobs' submit dialog offer exactly
    this (``Policy.choices_for``). Each request is still checked as a whole by
    :meth:`UserLimits.allows`."""

    images: tuple[ImageChoice, ...]  # the default first, then the admin's order
    custom_images: bool  # whether a custom image reference may be typed in
    gpu_types: tuple[GPUChoice, ...]  # the default first, then the admin's order
    cpu: Range
    memory: Range

    @property
    def max_gpus(self) -> int:
        return max((c.max_gpus for c in self.gpu_types), default=0)


@dataclass(frozen=True)
class Policy:
    images: Mapping[str, ImageChoice]
    custom_image_pattern: re.Pattern[str] | None
    gpu_types: Mapping[str, GPUType]
    cpu: Range
    memory: Range
    group_limits: Mapping[str, Limits]
    default_limits: Limits

    def limits_for(self, groups: Iterable[str]) -> UserLimits:
        """The limits of each of the user's configured groups, else ``default_limits``."""
        found = tuple(self.group_limits[g] for g in sorted(set(groups)) if g in self.group_limits)
        return UserLimits(found or (self.default_limits,))

    def allowed_gpu_types(self, limits: UserLimits) -> list[GPUType]:
        """GPU types one of the user's groups allows: the default first, then the admin's order."""
        return _default_first(t for t in self.gpu_types.values() if limits.allows_gpu_type(t.key))

    def allowed_images(self, limits: UserLimits) -> list[ImageChoice]:
        """Images one of the user's groups allows: the default first, then the admin's order."""
        return _default_first(i for i in self.images.values() if limits.allows_image(i.key))

    def max_gpus_for(self, limits: UserLimits, gpu_type: GPUType) -> int:
        """The most GPUs of ``gpu_type`` any one of the user's groups allows in one request."""
        return max(
            (
                min(g.max_gpus, gpu_type.max_gpus)
                for g in limits.groups
                if g.allows_gpu_type(gpu_type.key)
            ),
            default=0,
        )

    def choices_for(self, groups: Iterable[str]) -> UserChoices:
        """What a user in ``groups`` may choose: the union over their groups, and per GPU
        type the largest count one group allows."""
        limits = self.limits_for(groups)
        return UserChoices(
            images=tuple(self.allowed_images(limits)),
            # Offered only where a submit could succeed: a pattern, and a group that allows
            # custom references (limits_for: allows_image(None)).
            custom_images=self.custom_image_pattern is not None and limits.allows_image(None),
            gpu_types=tuple(
                GPUChoice(t, self.max_gpus_for(limits, t)) for t in self.allowed_gpu_types(limits)
            ),
            cpu=self.cpu,
            memory=self.memory,
        )

    def image_for_reference(self, reference: str) -> ImageChoice | None:
        """The configured image whose reference is exactly ``reference`` (a custom image that
        names a configured one counts as that image, so image limits hold for it too)."""
        return next((i for i in self.images.values() if i.image == reference), None)

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
        """Validate the admin's dicts (docs/architecture.md contract) into a Policy."""
        parsed_images = {k: _image(k, v) for k, v in (images or {}).items()}
        parsed_types = {k: _gpu_type(k, v) for k, v in (gpu_types or {}).items()}
        _one_default("images", parsed_images)
        _one_default("gpu_types", parsed_types)
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

    def check_platform(self, platform: Platform) -> Policy:
        """Refuse (:class:`PolicyConfigError`) what this platform cannot do with the GPU
        types: a Kubernetes type shared by memory names the resource its device plugin counts
        memory in; a workstation cannot time-slice. Returns the policy."""
        for key, gpu_type in self.gpu_types.items():
            if gpu_type.dra is not None:
                if platform != "kubernetes":
                    raise PolicyConfigError(
                        f"gpu_types[{key!r}].dra claims GPUs through Kubernetes' Dynamic "
                        "Resource Allocation, which a workstation does not have; use devices"
                    )
                continue  # a share is a claim on the device's capacity: nothing more to name
            if gpu_type.sharing is not None:
                try:
                    gpu_type.sharing.check_for(
                        f"gpu_types[{key!r}].sharing", platform, gpu_type.resource_name
                    )
                except SharingConfigError as exc:
                    raise PolicyConfigError(str(exc)) from None
        return self


_Choice = TypeVar("_Choice", ImageChoice, GPUType)
_T = TypeVar("_T")


def _default_first(items: Iterable[_Choice]) -> list[_Choice]:
    """``items`` with the default first, then in the admin's order.

    The default is the one marked ``"default": True``; else the one whose key sorts first.
    Never "the first one written": Helm's ``toYaml`` and ``yaml.safe_dump`` hand maps over
    sorted by key, so the order an admin wrote is lost on the way to the hub or the jobs
    service, and each would pick another default. Sorted order is the order both of them see.
    """
    ordered: list[_Choice] = list(items)
    if not ordered:
        return ordered
    marked = [item for item in ordered if item.default]
    first: _Choice = marked[0] if marked else min(ordered, key=lambda item: item.key)
    return [first] + [item for item in ordered if item is not first]


def _one_default(name: str, items: Mapping[str, _Choice]) -> None:
    """Refuse two defaults: which of them wins would again depend on the config's order."""
    marked = sorted(key for key, item in items.items() if item.default)
    if len(marked) > 1:
        raise PolicyConfigError(
            f'{name} marks {len(marked)} entries "default": true ({", ".join(marked)}); mark one'
        )


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
            "sharing",
            "dra",
        },
    )
    dra = _dra(name, entry)
    resource = _text(
        f"{name}.resource_name", entry.get("resource_name"), "" if dra else DEFAULT_GPU_RESOURCE
    )
    # A DRA type's GPUs are claimed from a DeviceClass: no extended resource (_dra refuses
    # resource_name).
    if dra is None and not _RESOURCE.fullmatch(resource):
        raise PolicyConfigError(
            f"{name}.resource_name {resource!r} is not a Kubernetes resource name"
        )
    if dra is None and not is_gpu_resource(resource):
        # Free figures, the ledger and the quota count only what gpu_resources calls a GPU: a
        # type asking for anything else would show 0 free and escape the quota.
        raise PolicyConfigError(
            f"{name}.resource_name {resource!r} is not a GPU resource gpuhub counts "
            f"({GPU_RESOURCE_NAMES}); tell GPU models apart with node_selector"
        )
    max_gpus = entry.get("max_gpus", 1)
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 1:
        raise PolicyConfigError(f"{name}.max_gpus must be a whole number of at least 1")
    if dra is not None and max_gpus > MAX_DEVICES:
        raise PolicyConfigError(
            f"{name}.max_gpus is {max_gpus}, but one DRA claim is given at most "
            f"{MAX_DEVICES} devices"
        )
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
    sharing = _sharing(name, entry.get("sharing"), resource, max_gpus, dra)
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
        sharing=sharing,
        dra=dra,
    )


# What Kubernetes' claims can ask for but a GPU type may not, each with the reason (Kueue
# 0.19 refuses a workload whose claim has any of them: gpuhub's claims always go through).
_DRA_REFUSED = {
    "first_available": (
        "lists alternative devices (Kubernetes' firstAvailable), which Kueue cannot admit "
        "and gpuhub's capacity and ledger could not say in advance; make one type per device "
        "class"
    ),
    "allocation_mode": (
        'asks for every matching device of a node ("All"), whatever gpus the user asked, '
        "and Kueue cannot admit it"
    ),
    "admin_access": (
        "gives a claim devices already in use by others, for monitoring; no user's server "
        "or job may have it, and Kueue cannot admit it"
    ),
}


def _said_as_policy(check: Callable[[], _T]) -> _T:
    """What ``check`` returns; a DRA or sharing setting it refuses is refused as the policy's,
    in the same one sentence."""
    try:
        return check()
    except (DRAConfigError, SharingConfigError) as exc:
        raise PolicyConfigError(str(exc)) from None


def _dra(name: str, entry: Mapping[str, Any]) -> DRAType | None:
    """A type's ``dra`` (gpuhub.core.dra), with what only the type can say about it."""
    value = entry.get("dra")
    if value is None:
        return None
    if isinstance(value, Mapping):
        for key, reason in _DRA_REFUSED.items():
            if key in value:
                raise PolicyConfigError(f"{name}.dra.{key} is not offered: it {reason}")
    dra = _said_as_policy(lambda: DRAType.from_config(f"{name}.dra", value))
    if dra is None:
        return None
    sharing = entry.get("sharing")
    if "capacity" in value and not (isinstance(sharing, Mapping) and "memory" in sharing):
        raise PolicyConfigError(
            f"{name}.dra.capacity applies only to shares by memory "
            '("sharing": {"memory": "80G", "min": "4G"}): it names what each share consumes '
            "of its device"
        )
    if "resource_name" in entry:
        raise PolicyConfigError(
            f"{name} sets both dra and resource_name ({entry['resource_name']!r}): a DRA "
            f"type's GPUs are claimed from the DeviceClass {dra.device_class!r}, never "
            "counted as an extended resource; remove resource_name"
        )
    if "devices" in entry:
        raise PolicyConfigError(
            f"{name} sets both dra and devices: devices picks a workstation's GPUs, dra "
            "claims them on Kubernetes; keep one"
        )
    return dra


def _sharing(
    name: str, value: Any, resource: str, max_gpus: int, dra: DRAType | None = None
) -> Sharing | None:
    """A type's ``sharing`` (gpuhub.core.sharing), with what only the type can say about it."""
    sharing = _said_as_policy(lambda: Sharing.from_config(f"{name}.sharing", value))
    if sharing is None:
        return None
    if dra is not None:
        if sharing.replicas is not None:
            raise PolicyConfigError(
                f"{name}.sharing.replicas does not apply to a DRA type: time-slicing is the "
                "driver's setting, not counted by the scheduler; share a device by memory "
                '("sharing": {"memory": "80G", "min": "4G"}), each claim consuming '
                f"gpu_memory of the device's capacity {dra.capacity!r}"
            )
        extra = [k for k in ("memory_resource", "cores_resource") if getattr(sharing, k)]
        if extra:
            raise PolicyConfigError(
                f"{name}.sharing.{extra[0]} is for a GPU-sharing device plugin (HAMi); a DRA "
                f"type's share is a claim on its device's capacity {dra.capacity!r}"
            )
    if is_mig_resource(resource):
        raise PolicyConfigError(
            f"{name}.sharing does not apply to a MIG slice ({resource!r}): a slice is "
            "already a part of a GPU, isolated by the hardware"
        )
    if sharing.by_memory and max_gpus != 1:
        raise PolicyConfigError(
            f"{name}.max_gpus must be 1 with sharing by memory: a share is a part of one GPU"
        )
    for key in ("memory_resource", "cores_resource"):
        extra = getattr(sharing, key)
        if extra and (not _RESOURCE.fullmatch(extra) or is_gpu_resource(extra)):
            raise PolicyConfigError(
                f"{name}.sharing.{key} {extra!r} must be the Kubernetes resource name your "
                "GPU sharing device plugin advertises (HAMi: nvidia.com/gpumem, "
                "nvidia.com/gpucores), not a GPU resource"
            )
    return sharing


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
    _unknown(name, entry, {"max_gpus", "gpu_types", "images", "custom_images"})
    max_gpus = entry.get("max_gpus", 0)
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 0:
        raise PolicyConfigError(f"{name}.max_gpus must be a whole number of at least 0")
    custom = entry.get("custom_images")
    return Limits(
        max_gpus=max_gpus,
        gpu_types=_names(f"{name}.gpu_types", entry.get("gpu_types"), gpu_types),
        images=_names(f"{name}.images", entry.get("images"), images),
        custom_images=None if custom is None else _flag(f"{name}.custom_images", custom),
    )
