"""The spawn form: render it from the policy, read it back into ``user_options``.

Rendering is server-side Jinja2 with autoescape, so admin display names and anything that
came from the cluster are escaped. Reading the form only reshapes strings; validation is
:func:`gpuhub.core.options.parse_launch_options`, the same path the REST API takes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

import jinja2

from gpuhub.core import words
from gpuhub.core.holdings import (
    Holding,
    gpus_counted,
    gpus_held,
    held_and_waiting,
    quota_list,
)
from gpuhub.core.options import FIELDS, OptionsError
from gpuhub.core.policy import GPUType, Policy
from gpuhub.core.quantity import QuantityError, format_memory, human_memory, parse_cpu, parse_memory
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity

CUSTOM_IMAGE = "__custom__"


@dataclass(frozen=True)
class QuotaView:
    """What the user holds against their GPU quota, as the form tells it."""

    limit: Fraction | int
    holdings: tuple[Holding, ...]  # everything but the server being started

    @property
    def held(self) -> Fraction:
        """GPUs given to the user's servers and jobs (devices, bound pods)."""
        return gpus_held(self.holdings)

    @property
    def counted(self) -> Fraction:
        """What counts against the quota: held, and what waits in line or in Kueue's queue."""
        return gpus_counted(self.holdings)

    @property
    def remaining(self) -> Fraction:
        """GPUs left in the quota; a fraction where shares are held or the quota is one."""
        return max(Fraction(self.limit) - self.counted, Fraction(0))

    @property
    def sentence(self) -> str:
        """ "You hold 1 of your 4 GPUs (server 'a': 1); …", and what waits is said as waiting:
        "You hold 1 and wait for 1, 2 of your 4 GPUs (…, server 'b': 1, waiting in line)"."""
        where = quota_list(self.holdings)
        limit = words.gpu_amount(self.limit).removeprefix(f"{words.amount(self.limit)} ")
        had = held_and_waiting(self.holdings)
        held = f"You hold {had} of your {words.amount(self.limit)} {limit}"
        if where:
            held += f" ({where})"
        if self.remaining == 0:
            return f"{held}; stop a server or wait for a job to end to start one with GPUs."
        return f"{held}; this server may have up to {words.amount(self.remaining)}."

    def most_of(self, gpu_type: GPUType, most: int) -> int:
        """The most units of ``gpu_type`` (whole GPUs, time-sliced replicas) the quota leaves
        for one server, at most ``most``; a share of memory is one unit."""
        sharing = gpu_type.sharing
        if sharing is None:
            return min(most, math.floor(self.remaining))
        if sharing.memory is not None:
            return min(most, 1 if self.most_memory(gpu_type) >= sharing.min else 0)
        assert sharing.replicas is not None
        return min(most, math.floor(self.remaining * sharing.replicas))

    def most_memory(self, gpu_type: GPUType) -> int:
        """The most GPU memory of a type shared by memory the quota leaves for one server."""
        sharing = gpu_type.sharing
        assert sharing is not None and sharing.memory is not None
        return min(sharing.max, math.floor(self.remaining * sharing.memory))


@dataclass(frozen=True)
class Refusal:
    """A refused submit, or a spawn link held until the user confirms it, for the form
    rendered right after it: what the user typed (or the link asked for) and, per field,
    what was wrong (``(field, sentence)``; field "" for none of the form's); ``notice``, a
    sentence for the top of the form (a held link's)."""

    options: Mapping[str, Any]
    problems: tuple[tuple[str, str], ...]
    when: float  # monotonic
    notice: str = ""


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
        loader=jinja2.PackageLoader("gpuhub.hub.web", "templates"),
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
        "gpu_memory": options.get("gpu_memory") or "",
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


def _asks_for_gpus(value: Any) -> bool:
    """Whether the form's GPU count, as it will be shown, asks for at least one."""
    try:
        return int(value) > 0
    except (TypeError, ValueError):
        return False


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
    notice: str = "",
    resources: str = "guaranteed",
    budget: Mapping[str, Any] | None = None,
) -> str:
    """HTML for JupyterHub's spawn page (goes inside its ``<form>``); ``problems`` are a
    refused submit's sentences, shown under the fields they name; ``notice`` one for the top
    of the form (a spawn link held until the user confirms it); ``resources`` what the
    platform does with CPU and memory (:data:`RESOURCES`); ``budget`` the user's GPU-hour
    budget as the holdings answer has it (``budgets[0]``), None when none applies."""
    choices = policy.choices_for(groups)
    capacity = capacity or {}
    gpu_types: list[dict[str, Any]] = []
    for choice in choices.gpu_types:
        t, most = choice.gpu_type, choice.max_gpus
        # The quota caps what the form offers; the server checks it again on submit.
        offered = most if quota is None else quota.most_of(t, most)
        gpu_types.append(
            {
                "key": t.key,
                "display_name": t.display_name,
                "description": t.description,
                "max": offered,
                "over_quota": quota is not None and offered == 0,
                "mig": t.is_mig,
                "capacity": capacity.get(t.key),
                "sharing": _sharing_view(t, capacity.get(t.key), quota),
                "limit_text": _limit_text(t, offered, quota),
                # GPU-hours an hour per unit asked for (a time-sliced replica: its fraction);
                # a type shared by memory: the device's bytes (the share is memory / that).
                "cost_unit": 1 / t.sharing.replicas if t.sharing and t.sharing.replicas else 1,
                "device_bytes": t.sharing.memory if t.sharing and t.sharing.memory else None,
            }
        )
        view = gpu_types[-1]
        view["free_text"] = _free_text(view["capacity"], view["sharing"])
        view["note_text"] = sentences(
            "None left in your GPU quota" if view["over_quota"] else view["limit_text"],
            t.description,
        )
    max_gpus = max((t["max"] for t in gpu_types), default=0)
    if not policy.gpu_types:
        no_gpu_reason = "This hub has no GPUs to hand out; your server will be CPU-only."
    else:
        no_gpu_reason = "Your groups may not use GPUs; your server will be CPU-only."
    template = _environment().get_template("spawn_form.html")
    values = form_values(policy, user_options)
    shared = [t for t in gpu_types if t["sharing"] and t["sharing"]["by_memory"]]
    errors = _errors_by_field(problems)
    # The page as served is what the form posts before (or without) its script: GPU memory
    # is shown and posted only where the checked type is shared by memory and GPUs are
    # asked for, else a default share would be refused on a whole-GPU type. The script
    # keeps it so as the choices change.
    checked = next(
        (t for t in gpu_types if t["key"] == values["gpu_type"]),
        gpu_types[0] if gpu_types else None,
    )
    checked_share = checked["sharing"] if checked and checked in shared else None
    share_type = checked["key"] if checked and checked_share else ""
    share_applies = checked_share is not None and _asks_for_gpus(values["gpus"])
    if share_applies and checked_share and not values["gpu_memory"]:
        values["gpu_memory"] = checked_share["default_text"]  # what leaving it gives
    for view in shared:
        # A DRA type says when no device can hold the share asked for now, and the largest.
        unheld = _unheld_share(view, values["gpu_memory"] or view["sharing"]["default_text"])
        if unheld:
            view["free_text"] = sentences(view["free_text"], unheld)
    cpu = {"min": _plain_cpu(choices.cpu.min), "max": _plain_cpu(choices.cpu.max)}
    memory = {
        "min": format_memory(int(choices.memory.min)),
        "max": format_memory(int(choices.memory.max)),
    }
    return template.render(
        resource_words=resource_words(resources, cpu, memory),
        values=values,
        shared_memory_types=shared,
        images=list(choices.images),
        image_help=sentences(
            "The software environment your server starts in",
            *(f"{i.display_name}: {i.description}" for i in choices.images if i.description),
        ),
        custom_image=choices.custom_images,
        cpu=cpu,
        memory=memory,
        max_gpus=max_gpus,
        no_gpu_reason=no_gpu_reason,
        gpu_types=gpu_types,
        presets=list(presets),
        capacity_note=capacity_note,
        quota=quota,
        errors=errors,
        # A refused value stays in view with its sentence, whatever the type.
        share_shown=share_applies or "gpu_memory" in errors,
        share_type=share_type,
        notice=notice,
        budget=budget,
        budget_sentence=_budget_sentence(budget),
    )


def _budget_sentence(budget: Mapping[str, Any] | None) -> str:
    """What the form says of the user's GPU-hour budget: used, left, reset, and at the limit
    what happens to a GPU server (the hub checks it again on submit)."""
    if budget is None:
        return ""
    text = f"{budget['text']}."
    if budget["state"] != "over":
        return text
    if budget["at_limit"] == "refuse":
        return f"{text} Your budget is used up: GPU servers are refused until then; CPU-only servers start."
    return (
        f"{text} Your budget is used up: a GPU server starts only on GPUs nobody else waits "
        "for, and is the first stopped when someone within budget needs them."
    )


# What a platform does with the CPU and memory a server asks for: reserves them (Kubernetes:
# request = limit), holds the server to them (a workstation's cgroups), or neither.
RESOURCES = ("guaranteed", "capped", "unenforced")


def resource_words(
    resources: str, cpu: Mapping[str, Any], memory: Mapping[str, Any]
) -> dict[str, str]:
    """The CPU and memory fields' help, and a note under both, saying what holds: never
    "guaranteed" where nothing reserves them."""
    if resources not in RESOURCES:
        raise ValueError(f"resources must be one of {', '.join(RESOURCES)}, not {resources!r}")
    cores = f"{cpu['min']} to {cpu['max']} cores"
    written = f"{memory['min']} to {memory['max']}, written like 16G or 512Mi"
    if resources == "guaranteed":
        return {"cpu": f"{cores}, guaranteed to your server.", "memory": f"{written}.", "note": ""}
    if resources == "capped":
        return {
            "cpu": f"{cores}: your server and all it runs use at most this many.",
            "memory": f"{written}: your server and all it runs get at most this much; past "
            "it, its largest process is ended.",
            "note": "",
        }
    return {
        "cpu": f"{cores}.",
        "memory": f"{written}.",
        "note": "CPU and memory are not enforced on this machine: your server may use more "
        "than it asks for, and so may everyone else's.",
    }


def sentences(*parts: str) -> str:
    """Parts joined as sentences, each ending in one full stop: an admin's description may
    end in one or not ("Up to 2 per server. Fast GPUs.", never "GPUs.." or "GPUs .")."""
    said = []
    for part in parts:
        text = part.strip().rstrip(".").rstrip()
        if text:
            said.append(text if text.endswith(("!", "?", "\u2026")) else f"{text}.")
    return " ".join(said)


# What the form says of a GPU type that has no device now (none on any node, or none of its
# devices on this machine), instead of "0 of 0 free now, at most 0 together on one node".
NONE_ONLINE = "No GPU of this type is online now"


def capacity_text(capacity: GPUCapacity) -> str:
    """ "3 of 7 free now; at most 2 together on one node; 1 person waiting": what is free of
    a type of whole GPUs, one figure per fact (the node's figure only where it says more)."""
    if capacity.total == 0:
        text = NONE_ONLINE
    else:
        text = f"{capacity.free:,} of {capacity.total:,} free now"
        largest = capacity.largest_free
        if largest is not None and 0 < largest < capacity.free:
            text += f"; at most {largest:,} together on one node"
        if capacity.dra_devices:
            text += _free_devices_text(capacity)
    return text + _waiting_text(capacity)


# Devices (or nodes) a DRA type's line of the form names before "and N more".
SHOWN_DEVICES = 8


def _free_devices_text(capacity: GPUCapacity) -> str:
    """ " (GPU 1, GPU 2, GPU 3 on node a100-7; and 5 more)": which whole devices of a DRA
    type are free, by node (the figures carry a few hundred devices at most: the rest are
    counted)."""
    by_node: dict[str, list[str]] = {}
    for device in capacity.dra_devices:
        if device.free:
            by_node.setdefault(device.node, []).append(device.name)
    if not by_node:
        return ""
    nodes = list(by_node.items())[:SHOWN_DEVICES]
    shown = [f"{', '.join(names)} on node {node}" for node, names in nodes]
    more = capacity.free - sum(len(names) for _, names in nodes)
    if more > 0:
        shown.append(f"and {more:,} more")
    return f" ({'; '.join(shown)})"


def _device_memory_text(capacity: GPUCapacity) -> str:
    """ "GPU 3 on node a100-7: 24 GB of 80 GB free; GPU 0 on node a100-7: all 80 GB in
    use": each device of a DRA type shared by memory, most free first."""
    known = [d for d in capacity.dra_devices if d.memory_total is not None]
    if not known:
        return NONE_ONLINE
    shown = [
        f"{d.name} on node {d.node}: "
        + (
            f"{human_memory(d.memory_free)} of {human_memory(d.memory_total or 0)} free"
            if d.memory_free
            else f"all {human_memory(d.memory_total or 0)} in use"
        )
        for d in known[:SHOWN_DEVICES]
    ]
    more = capacity.total - len(shown)
    return "; ".join(shown) + (f"; and {words.plural(more, 'more GPU')}" if more > 0 else "")


def _waiting_text(capacity: GPUCapacity) -> str:
    """ "; 2 people waiting; likely free around 14:30 UTC": who waits, and when one more
    request likely starts where none is free (docs/architecture.md, "When, not only where")."""
    waiting = capacity.waiting
    text = f"; {words.plural(waiting, 'person', 'people')} waiting" if waiting else ""
    if capacity.likely_free and capacity.free == 0:
        text += f"; {capacity.likely_free}"
    return text


def _free_text(capacity: GPUCapacity | None, sharing: Mapping[str, Any] | None) -> str:
    if capacity is None:
        return ""
    if sharing is None:
        return capacity_text(capacity)
    return str(sharing["free_text"]) + _waiting_text(capacity)


def _limit_text(gpu_type: GPUType, offered: int, quota: QuotaView | None) -> str:
    """ "Up to 2 per server", "Up to 16G of one GPU per server", "Up to 1 share per server"."""
    sharing = gpu_type.sharing
    if sharing is None:
        return f"Up to {offered} per server"
    if sharing.memory is not None:
        most = sharing.max if quota is None else quota.most_memory(gpu_type)
        return f"Up to {format_memory(most)} of one GPU per server"
    return f"Up to {words.plural(offered, 'share')} per server"


def _sharing_view(
    gpu_type: GPUType, capacity: GPUCapacity | None, quota: QuotaView | None
) -> dict[str, Any] | None:
    """What the form says of a shared type: how it shares, what one server may ask for, and
    what is free, one figure per fact ("9 GB of 16 GB free on GPU 3")."""
    sharing = gpu_type.sharing
    if sharing is None:
        return None
    view: dict[str, Any] = {"by_memory": sharing.by_memory, "free_text": "", "note": ""}
    if sharing.memory is None:
        view["badge"] = "Time-sliced"
        view["note"] = (
            f"Each GPU is shared {sharing.replicas} ways by time, with no memory isolation: "
            "notebooks on the same GPU can use up each other's memory and slow each other down."
        )
        if capacity is not None and capacity.total == 0:
            view["free_text"] = NONE_ONLINE
        elif capacity is not None:
            gpus = f" ({words.gpus(capacity.devices)})" if capacity.devices else ""
            view["free_text"] = (
                f"{capacity.free:,} of {words.plural(capacity.total, 'share')} free now{gpus}"
            )
        return view
    most = sharing.max if quota is None else quota.most_memory(gpu_type)
    view.update(
        badge="Shared GPU",
        min=format_memory(sharing.min),
        max=format_memory(max(most, sharing.min)),
        default_text=format_memory(sharing.default),
        range_text=f"{format_memory(sharing.min)} to {format_memory(sharing.max)}",
        device_text=human_memory(sharing.memory),
        note=(
            f"Each GPU's {human_memory(sharing.memory)} is shared by memory: you get the "
            "memory you ask for on one GPU, and share its compute with the others on it."
        ),
    )
    if capacity is not None:
        view["free_text"] = _memory_free_text(capacity)
        view["used_pct"], view["free_pct"] = _memory_pcts(capacity)
    return view


def _memory_free_text(capacity: GPUCapacity) -> str:
    """ "9 GB of 16 GB free on GPU 3; 16 GB of 16 GB free on GPU 4" on a workstation; on a
    cluster the memory free in all, and what cannot be known."""
    if capacity.dra_devices:
        return _device_memory_text(capacity)
    if capacity.total == 0 and not capacity.per_device:
        return NONE_ONLINE
    if capacity.per_device:
        shown = [
            f"{human_memory(free)} of {human_memory(total)} free on GPU {index}"
            for index, free, total in capacity.per_device[:8]
        ]
        more = len(capacity.per_device) - len(shown)
        return "; ".join(shown) + (f"; and {words.plural(more, 'more GPU')}" if more else "")
    if capacity.memory_free is None or capacity.memory_total is None:
        gpus = f" on {words.gpus(capacity.devices)}" if capacity.devices else ""
        return (
            f"{capacity.free:,} of {capacity.total:,} slots free now{gpus}; how much memory is "
            "free the cluster does not say"
        )
    gpus = f" on {words.gpus(capacity.devices)}" if capacity.devices else ""
    text = (
        f"{human_memory(capacity.memory_free)} of {human_memory(capacity.memory_total)} free{gpus}"
    )
    largest = capacity.largest_share
    if largest is not None and 0 < largest < capacity.memory_free:
        text += f"; at most {human_memory(largest)} on one node"
    if capacity.spread_unknown:
        text += " (which of its GPUs has it is not known, so a server may wait)"
    return text


def _unheld_share(view: Mapping[str, Any], gpu_memory: Any) -> str:
    """ "No A100 can hold 90 GB now; the largest free share is 24 GB on GPU 3 of a100-7",
    for a DRA type shared by memory whose devices cannot hold ``gpu_memory`` now; ""."""
    capacity = view["capacity"]
    if capacity is None or not capacity.dra_devices:
        return ""
    try:
        memory = parse_memory(gpu_memory)
    except QuantityError:
        return ""  # the field says what is wrong with it on submit
    return capacity.unheld_share(view["display_name"], memory) or ""


def _memory_pcts(capacity: GPUCapacity) -> tuple[float, float]:
    total, free = capacity.memory_total, capacity.memory_free
    if not total or free is None:
        return 0.0, 0.0
    used = round(100 * (total - free) / total, 1)
    return used, round(100 - used, 1)


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


def said_in_place(problems: Iterable[tuple[str, str]]) -> bool:
    """Whether the form says every one of these problems next to its field: then the page
    need not say them again above it."""
    problems = list(problems)
    return bool(problems) and all(bool(_errors_by_field([p])) for p in problems)


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
        # The type radio is always posted; it (and a share's memory) means nothing without GPUs.
        options.pop("gpu_type", None)
        options.pop("gpu_memory", None)
    return options


def options_from_querydata(query: Mapping[str, list[str]]) -> dict[str, Any]:
    """Reshape a spawn link's options into raw ``user_options``.

    ``/hub/spawn?opt-gpus=1&opt-gpu_type=a100``: JupyterHub 6 strips the ``opt-`` prefix
    before the spawner sees the names (and then ignores names without it); 5.x passes every
    name as it is, so the prefix is stripped here the same way and one link works on both
    (``?gpus=1`` too, as 5.x always took it). The names read as the form's fields do, but a
    name that is no field is kept, not dropped: the shared validation then refuses it by name
    (``opt-gpu=1``), where dropping it would start a server without what the link asked for.
    """
    prefixed = {k[4:]: v for k, v in query.items() if k.startswith("opt-") and k[4:]}
    if prefixed:
        query = prefixed
    options = options_from_formdata(query)
    for name, values in query.items():
        if name in (*FIELDS, "custom_image", "_xsrf") or not values:
            continue  # "_xsrf": JupyterHub's own form token, which a 5.x-style link may carry
        if isinstance(values[0], str):
            options[name] = values[0]
    return options
