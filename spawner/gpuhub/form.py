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

from .ledger import Holding, gpus_held
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
    waiting: int = 0  # spawns waiting in line for this type (local queue)

    @property
    def used_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 * (self.total - self.free) / self.total, 1)

    @property
    def free_pct(self) -> float:
        return 0.0 if self.total == 0 else round(100 - self.used_pct, 1)


@dataclass(frozen=True)
class QuotaView:
    """What the user holds against their GPU quota, as the form tells it."""

    limit: int
    holdings: tuple[Holding, ...]  # everything but the server being started

    @property
    def held(self) -> int:
        return gpus_held(self.holdings)

    @property
    def remaining(self) -> int:
        return max(self.limit - self.held, 0)

    @property
    def sentence(self) -> str:
        where = ", ".join(f"{h.label}: {h.gpus}" for h in self.holdings)
        held = f"You hold {self.held} of your {self.limit} GPU{'s' if self.limit != 1 else ''}"
        if where:
            held += f" ({where})"
        if self.remaining == 0:
            return f"{held}; stop a server or wait for a job to end to start one with GPUs."
        return f"{held}; this server may have up to {self.remaining}."


@dataclass(frozen=True)
class Refusal:
    """A refused submit, for the form rendered right after it: what the user typed and, per
    field, what was wrong (``(field, sentence)``; field "" for none of the form's)."""

    options: Mapping[str, Any]
    problems: tuple[tuple[str, str], ...]
    when: float  # monotonic


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
    # The last options JupyterHub kept may be anything a REST caller sent (it stores them
    # before validating): only a mapping pre-fills the form.
    options = dict(user_options) if isinstance(user_options, Mapping) else {}
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
    elif image == CUSTOM_IMAGE:  # a refused submit, as typed: "Custom image…" chosen
        values["image"] = CUSTOM_IMAGE
        values["custom_image"] = options.get("custom_image") or ""
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
    quota: QuotaView | None = None,
    problems: Iterable[tuple[str, str]] = (),
) -> str:
    """HTML for JupyterHub's spawn page (goes inside its ``<form>``); ``problems`` are a
    refused submit's sentences, shown under the fields they name."""
    choices = policy.choices_for(groups)
    capacity = capacity or {}
    gpu_types: list[dict[str, Any]] = []
    for choice in choices.gpu_types:
        t, most = choice.gpu_type, choice.max_gpus
        gpu_types.append(
            {
                "key": t.key,
                "display_name": t.display_name,
                "description": t.description,
                # The quota caps what the form offers; the server checks it again on submit.
                "max": most if quota is None else min(most, quota.remaining),
                "over_quota": quota is not None and quota.remaining == 0,
                "mig": t.is_mig,
                "capacity": capacity.get(t.key),
            }
        )
    max_gpus = max((t["max"] for t in gpu_types), default=0)
    if not policy.gpu_types:
        no_gpu_reason = "This hub has no GPUs to hand out; your server will be CPU-only."
    else:
        no_gpu_reason = "Your groups may not use GPUs; your server will be CPU-only."
    template = _environment().get_template("spawn_form.html")
    return template.render(
        values=form_values(policy, user_options),
        images=list(choices.images),
        custom_image=choices.custom_images,
        cpu={"min": _plain_cpu(choices.cpu.min), "max": _plain_cpu(choices.cpu.max)},
        memory={
            "min": format_memory(int(choices.memory.min)),
            "max": format_memory(int(choices.memory.max)),
        },
        max_gpus=max_gpus,
        no_gpu_reason=no_gpu_reason,
        gpu_types=gpu_types,
        presets=list(presets),
        capacity_note=capacity_note,
        quota=quota,
        errors=_errors_by_field(problems),
    )


def _errors_by_field(problems: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The form's fields' sentences ("custom_image" is where an image reference is typed);
    a problem naming none of them goes with the GPUs' (quota, free GPUs) or is left to the
    page's own message."""
    errors: dict[str, str] = {}
    for field, message in problems:
        name = field if field in (*FIELDS, "custom_image") else ""
        if name:
            errors[name] = f"{errors[name]} {message}" if name in errors else message
    return errors


def options_from_formdata(formdata: Mapping[str, list[str]]) -> dict[str, Any]:
    """Reshape posted form fields (lists of strings) into raw ``user_options``.

    Only known fields are taken; empty fields are left out so that defaults apply. The GPU
    count is the one numeric field converted here (ASCII digits only): the REST API gets no
    such conversion, so ``{"gpus": "2"}`` there is refused as the README says.
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
                "custom_image",
                "Custom image reference is empty; type one (registry/name:tag), or choose an "
                "offered image.",
            )
        options["image"] = custom
    gpus = options.get("gpus")
    if isinstance(gpus, str) and gpus.isascii() and gpus.isdigit() and len(gpus) <= 4:
        # A form field is text; JSON callers must send a number (the shared path is strict).
        # Anything else stays text and is refused there, naming the field.
        options["gpus"] = int(gpus)
    if options.get("gpus") == 0:
        options.pop(
            "gpu_type", None
        )  # the type radio is always posted; it means nothing without GPUs
    return options
