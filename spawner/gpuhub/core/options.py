"""Launch options: the one validation path for ``user_options``.

The spawn form, JupyterHub's REST API, the jobs API and the magics all hand their raw
values to :func:`parse_launch_options`. It returns a :class:`LaunchOptions` whose values are
in range and allowed for the user's groups, or raises :class:`OptionsError` with one
sentence naming the field. Nothing else escapes it (see the hypothesis tests).

Every field is checked, so one refusal carries all that is wrong (``OptionsError.problems``:
the form and the jobs dialog show each next to its field); its ``message`` is the first, in
the order of the form. Each sentence names the field as the form labels it, says what is
expected and what was given, and names images and GPU types by their display names (their
keys, which REST callers send, in parentheses).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpuhub.core import words
from gpuhub.core.policy import GPUType, Policy, UserLimits
from gpuhub.core.quantity import QuantityError, format_memory, human_memory, parse_cpu, parse_memory

FIELDS = ("image", "cpu", "memory", "gpu_type", "gpus", "gpu_memory", "profile")

# Defence in depth for custom images: whatever the admin's pattern, a reference is a
# registry/path:tag[@digest] without spaces, quotes or shell metacharacters.
_IMAGE_REF = re.compile(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_MAX_TEXT = 256
# What a JSON value from a user may be: nested at most this deep, whole numbers within a
# 64-bit range, text that encodes as UTF-8 (no lone surrogates such as "\ud800").
MAX_JSON_DEPTH = 32
MAX_JSON_INT = 2**63 - 1


class OptionsError(ValueError):
    """A launch option was refused. ``field`` names it; ``str(error)`` is for the user.

    ``problems`` lists every ``(field, message)`` refused in the same request, this one
    first; a single problem unless the request had several."""

    def __init__(self, field: str, message: str, problems: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.problems: tuple[tuple[str, str], ...] = tuple(problems) or ((field, message),)

    @classmethod
    def of(cls, errors: list[OptionsError]) -> OptionsError:
        """One refusal for several: the first's field and sentence, all of them listed."""
        if len(errors) == 1:
            return errors[0]
        first = errors[0]
        problems = [p for e in errors for p in e.problems]
        return cls(first.field, first.message, problems)


class Problems:
    """Collects refusals field by field, so that one request is told everything at once."""

    def __init__(self) -> None:
        self.errors: list[OptionsError] = []

    def check(self, parse: Any, *args: Any, **kwargs: Any) -> Any:
        """``parse(*args)``, or None when it refused (the refusal is kept)."""
        try:
            return parse(*args, **kwargs)
        except OptionsError as exc:
            self.errors.append(exc)
            return None

    def raise_any(self) -> None:
        if self.errors:
            raise OptionsError.of(self.errors)


def check_json_value(value: object, field: str) -> None:
    """Refuse what no option or parameter needs and what would break a later layer.

    Lone surrogates cannot be encoded (a 500 when the value is written out), deep nesting
    exhausts recursion in ``json``/``repr``, and huge numbers exhaust memory or precision.
    Iterative, so the check itself cannot overflow the stack.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise OptionsError(
                        field,
                        f"{_contain(field)} text that is not valid Unicode (a lone surrogate).",
                    ) from None
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -MAX_JSON_INT <= item <= MAX_JSON_INT:
                raise OptionsError(field, f"{_contain(field)} a number too large to use.")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise OptionsError(field, f"{_contain(field)} a number that is not finite.")
        elif isinstance(item, Mapping | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise OptionsError(
                    field,
                    f"{_contain(field)} lists or objects nested more than {MAX_JSON_DEPTH} "
                    "levels deep.",
                )
            children = [*item.keys(), *item.values()] if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)


def _contain(field: str) -> str:
    """The start of a sentence about what a field holds, as people call the field."""
    plural = {"user_options": "The options", "parameters": "The parameters"}
    if field in plural:
        return f"{plural[field]} contain"
    if field == "notebook_content":
        return "The notebook's content contains"
    if not field.isidentifier():  # an unknown key, as the caller wrote it
        return f"The value of {as_given(field)} contains"
    return f"The value of {field.replace('_', ' ')} contains"


def json_number(value: Any) -> float | None:
    """``value`` as a float if it is a JSON number a float can hold (not a bool, not text,
    finite), else None. JSON has no bound on a number's digits: ``float()`` of a 400-digit
    whole number raises ``OverflowError``, and so does ``math.isfinite``, a 500 where the
    caller is owed a sentence; every check of a user's number goes through here."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def whole_number(value: Any) -> int | None:
    """``value`` if it is a JSON whole number (not a bool, not a string), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


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
    # Bytes of one device's memory, for a type shared by memory (gpus is then 1); else None.
    gpu_memory: int | None = None

    @property
    def share(self) -> Fraction | None:
        """The part of a GPU this asks for, for a shared type (gpuhub.core.sharing); else None."""
        if self.gpu_type is None or self.gpu_type.sharing is None or not self.gpus:
            return None
        return self.gpu_type.sharing.fraction(self.gpus, self.gpu_memory)

    @property
    def gpu_amount(self) -> Fraction:
        """What this counts as against the quota, in GPUs: a share's fraction, else the count."""
        share = self.share
        return share if share is not None else Fraction(self.gpus)

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
        if self.gpu_memory is not None:
            options["gpu_memory"] = format_memory(self.gpu_memory)
        if self.profile:
            options["profile"] = self.profile
        return options


def check_options_object(raw: object) -> Mapping[Any, Any]:
    """Options are a JSON object of field names to values: anything else is refused."""
    if not isinstance(raw, Mapping):
        raise OptionsError(
            "user_options", "Options must be a JSON object of field names to values."
        )
    return raw


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
    raw = check_options_object(raw)
    for key, item in raw.items():
        check_json_value(key, "user_options")
        check_json_value(item, str(key)[:40])
    problems = Problems()
    unknown = sorted(str(k)[:40] for k in raw if k not in FIELDS and k not in set(ignore))
    for key in unknown:
        problems.errors.append(
            OptionsError(
                key,
                f"Unknown option {as_given(key)}; the options are "
                f"{', '.join(as_given(f) for f in FIELDS)}.",
            )
        )
    values: dict[str, Any] = {k: v for k, v in raw.items() if k in FIELDS and v not in (None, "")}
    limits = policy.limits_for(groups)

    profile = _profile(values.get("profile"), presets or {})
    if profile is not None:
        preset = (presets or {})[profile]
        values = {**{k: v for k, v in preset.items() if k in FIELDS}, **values}

    # In the form's order, each on its own: everything wrong is said at once.
    image_key, image = problems.check(_image, values.get("image"), policy, limits) or (None, None)
    cpu = problems.check(_cpu, values.get("cpu", policy.cpu.default), policy)
    memory = problems.check(_memory, values.get("memory", policy.memory.default), policy)
    # A share of GPU memory is one device's: asking for it asks for one GPU.
    gpus = problems.check(_gpus, values.get("gpus", 1 if "gpu_memory" in values else 0))
    gpu_type = problems.check(_gpu_type, values.get("gpu_type"), gpus or 0, policy, limits, subject)
    gpu_memory = problems.check(
        _gpu_memory, values.get("gpu_memory"), gpu_type, gpus, policy, limits, subject
    )
    problems.raise_any()
    assert cpu is not None and memory is not None and gpus is not None
    _together(image_key, image, gpu_type, gpus, policy, limits)
    return LaunchOptions(
        image=image,
        image_key=image_key,
        cpu=cpu,
        memory=memory,
        gpus=gpus,
        gpu_type=gpu_type,
        profile=profile,
        gpu_memory=gpu_memory,
    )


def as_given(value: object) -> str:
    """A value as the user wrote it (JSON: "text", true, 2), never a Python literal, cut
    short: how every refusal of the spawn form, the jobs API and the service quotes it."""
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
            "profile", f"Profile {as_given(value)} is not one of the offered profiles ({offered})."
        )
    return value


def _image(value: Any, policy: Policy, limits: UserLimits) -> tuple[str | None, str | None]:
    allowed = policy.allowed_images(limits)
    if value is None:
        if allowed:
            return allowed[0].key, allowed[0].image
        return None, None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise OptionsError(
            "image", "The image must be the name of an offered image or an image reference."
        )
    # A custom reference that names a configured image is that image, limits included.
    choice = policy.images.get(value) or policy.image_for_reference(value)
    if choice is not None:
        if not limits.allows_image(choice.key):
            raise OptionsError(
                "image", f"Image {as_given(choice.display_name)} is not available to your groups."
            )
        return choice.key, choice.image
    pattern = policy.custom_image_pattern
    custom_ok = pattern is not None and limits.allows_image(None)
    if (
        custom_ok
        and pattern is not None
        and pattern.fullmatch(value)
        and _IMAGE_REF.fullmatch(value)
    ):
        return None, value
    if not allowed and not custom_ok:
        raise OptionsError(
            "image",
            f"This hub offers no choice of image, so leave the image out "
            f"(you gave {as_given(value)}).",
        )
    custom = ", or a custom image reference your admin allows" if custom_ok else ""
    offered = _choices([(i.display_name, i.key) for i in allowed])
    raise OptionsError(
        "image",
        f"Image {as_given(value)} is not offered to you; choose {offered}{custom}."
        if allowed
        else f"Image {as_given(value)} is not a custom image reference your admin allows.",
    )


def _choices(named: list[tuple[str, str]]) -> str:
    """ "Simulated GPU ("gpu")", "A ("a") or B ("b")": what to choose, as the form shows it,
    with the key a REST caller sends."""
    shown = [name if name == key else f"{name} ({as_given(key)})" for name, key in named]
    if len(shown) <= 1:
        return "".join(shown)
    return f"{', '.join(shown[:-1])} or {shown[-1]}"


def _together(
    image_key: str | None,
    image: str | None,
    gpu_type: GPUType | None,
    gpus: int,
    policy: Policy,
    limits: UserLimits,
) -> None:
    """One of the user's groups must allow the image and the GPUs together."""
    if limits.allows(image_key, gpu_type, gpus, custom=image is not None and image_key is None):
        return
    what = policy.images[image_key].display_name if image_key else image
    raise OptionsError(
        "image",
        f"None of your groups allows the image {as_given(what)} together with "
        f"{words.gpus(gpus, gpu_type.display_name if gpu_type else '')}; "
        "choose another image or fewer GPUs.",
    )


def _cpu(value: Any, policy: Policy) -> float:
    low, high = policy.cpu.min, policy.cpu.max
    hint = f"CPU must be between {low:g} and {words.plural(high, 'core')}"
    try:
        cores = parse_cpu(value)
    except QuantityError:
        raise OptionsError(
            "cpu", f"{hint}, such as 2 or 500m (you gave {as_given(value)})."
        ) from None
    if not low <= cores <= high:
        raise OptionsError("cpu", f"{hint} (you gave {as_given(value)}).")
    return cores


def _memory(value: Any, policy: Policy) -> int:
    low, high = int(policy.memory.min), int(policy.memory.max)
    hint = f"Memory must be between {format_memory(low)} and {format_memory(high)}"
    try:
        size = parse_memory(value)
    except QuantityError:
        guess = _memory_guess(value)
        raise OptionsError(
            "memory",
            f"{hint}, written like 16G or 512Mi: a number and a unit, with no space and no "
            f"B (you gave {as_given(value)}{f'; did you mean {guess}?' if guess else ''}).",
        ) from None
    if not low <= size <= high:
        guess = ""
        if (
            isinstance(value, str | int)
            and str(value).isdigit()
            and low <= int(value) * 10**9 <= high
        ):
            guess = f"; did you mean {value}G?"
        raise OptionsError("memory", f"{hint} (you gave {as_given(value)}{guess}).")
    return size


_SPELLED = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT])(i?)[bB]?\s*", re.ASCII)


def _memory_guess(value: Any) -> str | None:
    """ "16G" for "16 GB", "512Mi" for "512 MiB": the quantity a person meant, if it is one."""
    if not isinstance(value, str):
        return None
    found = _SPELLED.fullmatch(value)
    if not found:
        return None
    number, unit, binary = found.groups()
    unit = "k" if unit in "kK" and not binary else unit.upper()
    guess = f"{number}{unit}{binary}"
    try:
        parse_memory(guess)
    except QuantityError:
        return None
    return guess


def _gpus(value: Any) -> int:
    """A JSON whole number, exactly: "2" is text, not a GPU count (the form converts its
    own fields in :func:`gpuhub.hub.form.options_from_formdata` before they get here)."""
    count = whole_number(value)
    if count is None:
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            raise OptionsError(
                "gpus",
                f"The number of GPUs must be a number such as {value.strip()}, not text: you "
                f"gave {as_given(value)} in quotes; send it without them.",
            )
        raise OptionsError(
            "gpus",
            f"The number of GPUs must be a whole number such as 0, 1 or 2; you gave "
            f"{'the text ' if isinstance(value, str) else ''}{as_given(value)}.",
        )
    if count < 0:
        raise OptionsError("gpus", f"The number of GPUs must be 0 or more; you gave {count}.")
    return count


def _gpu_type(
    value: Any, gpus: int, policy: Policy, limits: UserLimits, subject: str
) -> GPUType | None:
    allowed = policy.allowed_gpu_types(limits)
    if value is not None and (not isinstance(value, str) or value not in policy.gpu_types):
        if not policy.gpu_types:
            raise OptionsError(
                "gpu_type",
                f"This hub has no GPUs, so leave the GPU type out (you gave {as_given(value)}).",
            )
        offered = _choices([(t.display_name, t.key) for t in allowed or policy.gpu_types.values()])
        raise OptionsError(
            "gpu_type",
            f"GPU type {as_given(value)} is not one of this hub's; choose {offered}.",
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
            f"Your groups may not use the GPU type {gpu_type.display_name}; choose "
            f"{_choices([(t.display_name, t.key) for t in allowed])}.",
        )
    if gpu_type.shares_memory and gpus > 1:
        raise OptionsError("gpu_memory", _one_device(gpu_type, gpus, subject))
    most = policy.max_gpus_for(limits, gpu_type)
    if gpus > most:
        raise OptionsError(
            "gpus",
            f"You may use at most {words.gpus(most, gpu_type.display_name)} per {subject}; "
            f"you asked for {words.plural(gpus, 'GPU')}.",
        )
    return gpu_type


# How the sentences name the field: as the form labels it, with the key REST callers send.
GPU_MEMORY = 'GPU memory ("gpu_memory")'


def _gpu_memory(
    value: Any,
    gpu_type: GPUType | None,
    gpus: int | None,
    policy: Policy,
    limits: UserLimits,
    subject: str,
) -> int | None:
    """The share of one device's memory, for a type shared by memory only (its default when
    none is given); refused on any other type, with more than one GPU, or out of range."""
    sharing = gpu_type.sharing if gpu_type is not None else None
    if value is None:
        if sharing is not None and sharing.memory is not None and gpus:
            return sharing.default
        return None
    shared = [t for t in policy.allowed_gpu_types(limits) if t.shares_memory]
    if gpus == 0 or gpus is None:
        # gpus was refused already (None), or the request asks for no GPU.
        if gpus is None:
            return None
        raise OptionsError(
            "gpu_memory",
            f"{GPU_MEMORY} is a share of a GPU, and this {subject} asks for no GPU; ask for 1 GPU "
            f"of type {_shared_types(shared)} with it, or leave it out "
            f"(you gave {as_given(value)}).",
        )
    if gpu_type is None:
        return None  # the GPU type was refused; its sentence says what to choose
    if sharing is None or sharing.memory is None:
        how = (
            f"is {sharing.kind} with no memory isolation, so a share is a whole replica"
            if sharing is not None
            else "gives whole GPUs"
        )
        where = f"choose {_shared_types(shared)} for a share of GPU memory, or " if shared else ""
        raise OptionsError(
            "gpu_memory",
            f"{GPU_MEMORY} can be asked for only on a GPU type shared by memory; "
            f"{_type_name(gpu_type)} {how}: {where}leave it out (you gave "
            f"{as_given(value)}).",
        )
    try:
        size = parse_memory(value)
    except QuantityError:
        guess = _memory_guess(value)
        raise OptionsError(
            "gpu_memory",
            f"{GPU_MEMORY} must be {sharing.describe_range()} of one {gpu_type.display_name}, "
            f"written like 8G or 512Mi (you gave {as_given(value)}"
            f"{f'; did you mean {guess}?' if guess else ''}).",
        ) from None
    if size > sharing.memory:
        raise OptionsError(
            "gpu_memory",
            f"{GPU_MEMORY} of {format_memory(size)} is more than one {gpu_type.display_name} "
            f"has ({format_memory(sharing.memory)}); ask for {sharing.describe_range()} "
            f"(you gave {as_given(value)}).",
        )
    if not sharing.min <= size <= sharing.max:
        raise OptionsError(
            "gpu_memory",
            f"{GPU_MEMORY} must be {sharing.describe_range()} of one {gpu_type.display_name} "
            f"(you gave {as_given(value)}, {human_memory(size)}).",
        )
    return size


def _one_device(gpu_type: GPUType, gpus: int, subject: str) -> str:
    return (
        f"A share of {GPU_MEMORY} is part of one GPU: ask for 1 {gpu_type.display_name} with "
        f"it (this {subject} asked for {gpus} GPUs)."
    )


def _type_name(gpu_type: GPUType) -> str:
    return _choices([(gpu_type.display_name, gpu_type.key)])


def _shared_types(types: list[GPUType]) -> str:
    if not types:
        return "a GPU type shared by memory (this hub offers you none)"
    return _choices([(t.display_name, t.key) for t in types])
