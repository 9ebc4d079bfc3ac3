"""Launch options: the one validation path for ``user_options``.

The spawn form, JupyterHub's REST API, the jobs API and the magics all hand their raw
values to :func:`parse_launch_options`. It returns a :class:`LaunchOptions` whose values are
in range and allowed for the user's groups, or raises :class:`OptionsError` with one
sentence naming the field. Nothing else escapes it (see the hypothesis tests).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import words
from .policy import GPUType, Limits, Policy
from .quantity import QuantityError, format_memory, parse_cpu, parse_memory

FIELDS = ("image", "cpu", "memory", "gpu_type", "gpus", "profile")

# Defence in depth for custom images: whatever the admin's pattern, a reference is a
# registry/path:tag[@digest] without spaces, quotes or shell metacharacters.
_IMAGE_REF = re.compile(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_MAX_TEXT = 256


class OptionsError(ValueError):
    """A launch option was refused. ``field`` names it; ``str(error)`` is for the user."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class LaunchOptions:
    """Validated resources for one server or job."""

    image: str | None  # the image reference to run; None keeps the spawner's own default
    image_key: str | None  # key in ``Policy.images``; None for a custom image
    cpu: float  # cores
    memory: int  # bytes
    gpus: int
    gpu_type: GPUType | None  # None exactly when gpus == 0
    profile: str | None = None

    def as_user_options(self) -> dict[str, Any]:
        """Canonical ``user_options``: what the form pre-fills and the hub stores."""
        options: dict[str, Any] = {
            "cpu": int(self.cpu) if self.cpu.is_integer() else self.cpu,
            "memory": format_memory(self.memory),
            "gpus": self.gpus,
        }
        if self.image is not None:
            options["image"] = self.image_key or self.image
        if self.gpu_type is not None:
            options["gpu_type"] = self.gpu_type.key
        if self.profile:
            options["profile"] = self.profile
        return options


def parse_launch_options(
    raw: object,
    policy: Policy,
    groups: Iterable[str] = (),
    *,
    presets: Mapping[str, Mapping[str, Any]] | None = None,
    ignore: Iterable[str] = (),
    subject: str = "server",
) -> LaunchOptions:
    """Validate raw options against ``policy`` for a user in ``groups``.

    ``presets`` maps profile slugs to default option values (a KubeSpawner
    ``profile_list``); ``ignore`` names extra keys another layer validates itself;
    ``subject`` is what the messages call the thing being launched ("server", "job").
    """
    if not isinstance(raw, Mapping):
        raise OptionsError(
            "user_options", "Options must be a JSON object of field names to values."
        )
    unknown = sorted(str(k)[:40] for k in raw if k not in FIELDS and k not in set(ignore))
    if unknown:
        raise OptionsError(
            unknown[0],
            f"Unknown option {_short(unknown[0])}; the options are "
            f"{', '.join(_short(f) for f in FIELDS)}.",
        )
    values: dict[str, Any] = {k: v for k, v in raw.items() if k in FIELDS and v not in (None, "")}
    limits = policy.limits_for(groups)

    profile = _profile(values.get("profile"), presets or {})
    if profile is not None:
        preset = (presets or {})[profile]
        values = {**{k: v for k, v in preset.items() if k in FIELDS}, **values}

    image_key, image = _image(values.get("image"), policy, limits)
    cpu = _cpu(values.get("cpu", policy.cpu.default), policy)
    memory = _memory(values.get("memory", policy.memory.default), policy)
    gpus = _gpus(values.get("gpus", 0))
    gpu_type = _gpu_type(values.get("gpu_type"), gpus, policy, limits, subject)
    return LaunchOptions(
        image=image,
        image_key=image_key,
        cpu=cpu,
        memory=memory,
        gpus=gpus,
        gpu_type=gpu_type,
        profile=profile,
    )


def _short(value: object) -> str:
    """A value as the user wrote it (JSON: "text", true, 2), never a Python literal."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = json.dumps(str(value), ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _profile(value: Any, presets: Mapping[str, Mapping[str, Any]]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in presets:
        offered = ", ".join(presets) or "none are configured"
        raise OptionsError(
            "profile", f"Profile {_short(value)} is not one of the offered profiles ({offered})."
        )
    return value


def _image(value: Any, policy: Policy, limits: Limits) -> tuple[str | None, str | None]:
    allowed = policy.allowed_images(limits)
    if value is None:
        if allowed:
            return allowed[0].key, allowed[0].image
        return None, None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise OptionsError(
            "image", "The image must be the name of an offered image or an image reference."
        )
    choice = policy.images.get(value)
    if choice is not None:
        if not limits.allows_image(choice.key):
            raise OptionsError("image", f"Image {_short(value)} is not available to your groups.")
        return choice.key, choice.image
    pattern = policy.custom_image_pattern
    if pattern is not None and pattern.fullmatch(value) and _IMAGE_REF.fullmatch(value):
        return None, value
    offered = ", ".join(i.key for i in allowed) or "none"
    custom = " or a custom image this hub allows" if pattern is not None else ""
    raise OptionsError(
        "image",
        f"Image {_short(value)} is not allowed; choose one of the offered images ({offered}){custom}.",
    )


def _cpu(value: Any, policy: Policy) -> float:
    low, high = policy.cpu.min, policy.cpu.max
    hint = f"CPU must be between {low:g} and {words.plural(high, 'core')}"
    try:
        cores = parse_cpu(value)
    except QuantityError:
        raise OptionsError(
            "cpu", f"{hint}, such as 2 or 500m (you gave {_short(value)})."
        ) from None
    if not low <= cores <= high:
        raise OptionsError("cpu", f"{hint} (you gave {_short(value)}).")
    return cores


def _memory(value: Any, policy: Policy) -> int:
    low, high = int(policy.memory.min), int(policy.memory.max)
    hint = f"Memory must be between {format_memory(low)} and {format_memory(high)}"
    try:
        size = parse_memory(value)
    except QuantityError:
        raise OptionsError(
            "memory", f"{hint}, written like 16G or 512Mi (you gave {_short(value)})."
        ) from None
    if not low <= size <= high:
        guess = ""
        if (
            isinstance(value, str | int)
            and str(value).isdigit()
            and low <= int(value) * 10**9 <= high
        ):
            guess = f"; did you mean {value}G?"
        raise OptionsError("memory", f"{hint} (you gave {_short(value)}{guess}).")
    return size


def _gpus(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit() and len(value) <= 4:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionsError(
            "gpus",
            f"The number of GPUs must be a whole number such as 0, 1 or 2 "
            f"(you gave {_short(value)}).",
        )
    if value < 0:
        raise OptionsError("gpus", "The number of GPUs must not be negative.")
    return value


def _gpu_type(
    value: Any, gpus: int, policy: Policy, limits: Limits, subject: str
) -> GPUType | None:
    allowed = policy.allowed_gpu_types(limits)
    if value is not None and (not isinstance(value, str) or value not in policy.gpu_types):
        offered = ", ".join(_short(t.key) for t in allowed) or "none"
        raise OptionsError(
            "gpu_type",
            f"GPU type {_short(value)} is not one of this hub's (yours: {offered}).",
        )
    if gpus == 0:
        return None
    if not policy.gpu_types:
        raise OptionsError("gpus", "This hub has no GPUs to hand out; ask for 0 GPUs.")
    if not allowed:
        raise OptionsError("gpus", "Your groups may not use GPUs; ask for 0 GPUs.")
    gpu_type = policy.gpu_types[value] if value is not None else allowed[0]
    if not limits.allows_gpu_type(gpu_type.key):
        raise OptionsError(
            "gpu_type",
            f"GPU type {_short(gpu_type.key)} is not allowed for your groups "
            f"(yours: {', '.join(_short(t.key) for t in allowed)}).",
        )
    most = policy.max_gpus_for(limits, gpu_type)
    if gpus > most:
        raise OptionsError(
            "gpus",
            f"You may use at most {words.gpus(most, gpu_type.display_name)} per {subject}; "
            f"you asked for {words.plural(gpus, 'GPU')}.",
        )
    return gpu_type
