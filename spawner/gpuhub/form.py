"""The spawn form: render it from the policy, read it back into ``user_options``.

Rendering is server-side Jinja2 with autoescape, so admin display names and anything that
came from the cluster are escaped. Reading the form only reshapes strings; validation is
:func:`gpuhub.options.parse_launch_options`, the same path the REST API takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import jinja2

from .options import FIELDS, OptionsError
from .policy import Policy
from .quantity import QuantityError, format_memory, parse_cpu

CUSTOM_IMAGE = "__custom__"


@dataclass(frozen=True)
class GPUCapacity:
    """Live figures for one GPU type, from the cluster (GPUSpawner) or the allocator (local)."""

    free: int
    total: int
    # Most GPUs of this type free on any single node: the biggest request that fits now.
    largest_free: int | None = None

    @property
    def used_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 * (self.total - self.free) / self.total, 1)

    @property
    def free_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 - self.used_pct, 1)


@dataclass(frozen=True)
class Preset:
    slug: str
    display_name: str
    values: Mapping[str, Any]

    @property
    def values_json(self) -> str:
        return json.dumps(dict(self.values))


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("gpuhub", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def form_values(policy: Policy, user_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the form shows: the user's last options where given, else the admin defaults."""
    options = dict(user_options or {})
    image = options.get("image")
    values: dict[str, Any] = {
        "profile": options.get("profile") or "",
        "image": "",
        "custom_image": "",
        "cpu": _plain_cpu(options.get("cpu", policy.cpu.default)),
        "memory": options.get("memory", format_memory(int(policy.memory.default))),
        "gpus": options.get("gpus", 0),
        "gpu_type": options.get("gpu_type") or "",
    }
    if isinstance(image, str) and image in policy.images:
        values["image"] = image
    elif isinstance(image, str) and image:
        values["image"] = CUSTOM_IMAGE
        values["custom_image"] = image
    return {
        k: v if isinstance(v, str | int | float) and not isinstance(v, bool) else ""
        for k, v in values.items()
    }


def _plain_cpu(value: Any) -> Any:
    """CPU as a plain number for ``<input type=number>`` (``500m`` -> ``0.5``)."""
    try:
        return f"{parse_cpu(value):g}"
    except QuantityError:
        return value  # shown as typed; validation explains what is wrong with it


def render_form(
    policy: Policy,
    groups: Iterable[str],
    user_options: Mapping[str, Any] | None = None,
    *,
    presets: Iterable[Preset] = (),
    capacity: Mapping[str, GPUCapacity] | None = None,
    capacity_note: str = "",
) -> str:
    """HTML for JupyterHub's spawn page (goes inside its ``<form>``)."""
    limits = policy.limits_for(groups)
    types = policy.allowed_gpu_types(limits)
    capacity = capacity or {}
    gpu_types: list[dict[str, Any]] = [
        {
            "key": t.key,
            "display_name": t.display_name,
            "description": t.description,
            "max": policy.max_gpus_for(limits, t),
            "mig": t.is_mig,
            "capacity": capacity.get(t.key),
        }
        for t in types
    ]
    max_gpus = max((t["max"] for t in gpu_types), default=0)
    if not policy.gpu_types:
        no_gpu_reason = "This hub has no GPUs to hand out; your server will be CPU-only."
    else:
        no_gpu_reason = "Your groups may not use GPUs; your server will be CPU-only."
    template = _environment().get_template("spawn_form.html")
    return template.render(
        values=form_values(policy, user_options),
        images=policy.allowed_images(limits),
        custom_image=policy.custom_image_pattern is not None,
        cpu={"min": _plain_cpu(policy.cpu.min), "max": _plain_cpu(policy.cpu.max)},
        memory={
            "min": format_memory(int(policy.memory.min)),
            "max": format_memory(int(policy.memory.max)),
        },
        max_gpus=max_gpus,
        no_gpu_reason=no_gpu_reason,
        gpu_types=gpu_types,
        presets=list(presets),
        capacity_note=capacity_note,
    )


def options_from_formdata(formdata: Mapping[str, list[str]]) -> dict[str, Any]:
    """Reshape posted form fields (lists of strings) into raw ``user_options``.

    Only known fields are taken; empty fields are left out so that defaults apply.
    """

    def first(name: str) -> str:
        values = formdata.get(name) or [""]
        return values[0].strip() if isinstance(values[0], str) else ""

    options: dict[str, Any] = {}
    for name in FIELDS:
        value = first(name)
        if value:
            options[name] = value
    if options.get("image") == CUSTOM_IMAGE:
        custom = first("custom_image")
        if not custom:
            raise OptionsError(
                "image", "Enter a custom image reference, or choose an offered image."
            )
        options["image"] = custom
    if options.get("gpus") in ("0",):
        options.pop(
            "gpu_type", None
        )  # the type radio is always posted; it means nothing without GPUs
    return options
