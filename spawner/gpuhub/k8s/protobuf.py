"""Kubernetes' protobuf encoding, for the kinds gpuhub watches, decoded into the same dicts
as :mod:`gpuhub.k8s.objects` makes of JSON.

kube-apiserver encodes a pod in protobuf at about three quarters of the CPU JSON costs it,
in about 60 % of the bytes (``docs/benchmarks.md``): on a first sync of 150,000 pods, seconds
of the apiserver's time and hundreds of megabytes fewer for the hub to read. The messages
here are *subsets* of Kubernetes' own (``k8s.io/api/core/v1/generated.proto``,
``k8s.io/apimachinery``): each declares only the fields gpuhub reads, under Kubernetes' field
numbers, and the protobuf runtime (upb, in C) skips the rest of the bytes without building
them. What gpuhub reads is declared once, in :mod:`gpuhub.k8s.objects` (one ``TypedDict``
per shape); this module adds only where each field sits on the wire (:data:`WIRE`) and builds
the messages from both when first used.

The dicts match the JSON decoding's field for field, following Go's JSON rules: a field
marked ``omitempty`` is left out when empty (protobuf writes Go's empty strings and false),
a ``metav1.Time`` becomes the RFC 3339 string the JSON carries (left out when zero, as
kube-apiserver 1.36 leaves it out), a list Go writes without ``omitempty`` is ``None``
when empty, a quantity is its canonical string. ``tests/k8s/test_objects_protobuf.py`` compares both
encodings of the same objects from a real apiserver, fact by fact.

A kind not in :data:`WIRE` (a custom resource: the apiserver serves those as JSON only) is
read as JSON; :func:`supports` says which.

Wire formats (``k8s.io/apimachinery/pkg/runtime/serializer/protobuf``): a LIST answer is
``k8s\\0`` followed by a ``runtime.Unknown`` whose ``raw`` (field 2) is the list message; a
watch is a stream of frames, each a 4-byte big-endian length and a ``metav1.WatchEvent``
whose ``object.raw`` is again ``k8s\\0`` and an ``Unknown`` around the object.
"""

from __future__ import annotations

import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from google.protobuf import descriptor_pb2, message_factory

from gpuhub.k8s import objects

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
# What an apiserver answers a watch with when it streams protobuf.
STREAM_CONTENT_TYPE = CONTENT_TYPE + ";stream=watch"
# Every protobuf object and list from the apiserver starts with these four bytes.
MAGIC = b"k8s\x00"

# Where each field of :mod:`gpuhub.k8s.objects`' shapes sits in Kubernetes' messages: its
# number, and how Go's JSON writes it where that differs from "left out when empty":
#   "keep"  no ``omitempty``: written even when empty ("" or false)
#   "set"   a pointer: written when set, even to false
#   "time"  a ``metav1.Time``: an RFC 3339 string, left out when zero
WIRE: dict[str, dict[str, int | tuple[int, str]]] = {
    # k8s.io/apimachinery/pkg/apis/meta/v1
    "ObjectMeta": {
        "name": 1,
        "namespace": 3,
        "resourceVersion": 6,
        "creationTimestamp": (8, "time"),
        "labels": 11,
        "annotations": 12,
        "ownerReferences": 13,
    },
    "OwnerReference": {
        "kind": (1, "keep"),
        "name": (3, "keep"),
        "uid": (4, "keep"),
        "controller": (6, "set"),
    },
    # k8s.io/api/core/v1
    "Pod": {"metadata": 1, "spec": 2, "status": 3},
    "PodSpec": {
        "nodeName": 10,
        "containers": (2, "keep"),
        "initContainers": 20,
        "schedulingGates": 38,
    },
    "Container": {"resources": 8, "env": 7},
    "ResourceRequirements": {"limits": 1, "requests": 2},
    "EnvVar": {"name": (1, "keep"), "value": 2},
    "SchedulingGate": {"name": (1, "keep")},  # PodSchedulingGate
    "PodStatus": {"phase": 1},
    "Node": {"metadata": 1, "spec": 2, "status": 3},
    "NodeSpec": {"unschedulable": 4, "taints": 5},
    "Taint": {"key": (1, "keep"), "value": 2, "effect": (3, "keep")},
    "NodeStatus": {"capacity": 1, "allocatable": 2, "conditions": 4},
    "NodeCondition": {"type": (1, "keep"), "status": (2, "keep")},
}

_PACKAGE = "gpuhub.k8s.wire"
_LABEL_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_LABEL_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_T = descriptor_pb2.FieldDescriptorProto
_SCALARS = {str: _T.TYPE_STRING, bool: _T.TYPE_BOOL}

# A field's converter: the protobuf value to what the JSON decoding gives (None: leave out).
Convert = Callable[[Any], Any]


def supports(kind: str) -> bool:
    """Whether the watch ``kind`` (a key of :data:`gpuhub.k8s.objects.KINDS`) is read in
    protobuf: its shape has wire numbers here (a shape within it without them fails the
    first decoding, naming the field: never a field silently missing)."""
    shape = objects.KINDS.get(kind)
    return shape is not None and shape.__name__ in WIRE


def _bare(hint: Any) -> Any:
    """``X | None`` -> ``X``."""
    if isinstance(hint, types.UnionType) or get_origin(hint) is typing.Union:
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        return hint  # Quantity: str | int | float
    return hint


def _is_shape(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__")


class _Schema:
    """The file of subset messages, built once, and a converter per shape."""

    def __init__(self) -> None:
        self.file = descriptor_pb2.FileDescriptorProto(
            name="gpuhub_k8s_wire.proto", package=_PACKAGE, syntax="proto2"
        )
        self.plans: dict[str, list[_Field]] = {}
        self.converters: dict[str, Convert] = {}
        # Shared messages: a quantity, a time, an envelope's parts, a watch event, a Status.
        self._message("Quantity", [("string", 1, _T.TYPE_STRING, None, False)])
        self._message(
            "Time",
            [("seconds", 1, _T.TYPE_INT64, None, False), ("nanos", 2, _T.TYPE_INT32, None, False)],
        )
        self._message("RawExtension", [("raw", 1, _T.TYPE_BYTES, None, False)])
        self._message(
            "WatchEvent",
            [("type", 1, _T.TYPE_STRING, None, False), ("object", 2, None, "RawExtension", False)],
        )
        self._message(
            "ListMeta",
            [
                ("resourceVersion", 2, _T.TYPE_STRING, None, False),
                ("continue", 3, _T.TYPE_STRING, None, False),
            ],
        )
        self._message(
            "Status",
            [
                ("message", 3, _T.TYPE_STRING, None, False),
                ("reason", 4, _T.TYPE_STRING, None, False),
                ("code", 6, _T.TYPE_INT32, None, False),
            ],
        )
        self._envelope("Status")
        for shape in objects.KINDS.values():
            if shape.__name__ in WIRE:
                self._shape(shape)
                name = shape.__name__
                self._message(
                    f"{name}List",
                    [
                        ("metadata", 1, None, "ListMeta", False),
                        ("items", 2, None, name, True),
                    ],
                )
                self._envelope(name)
                self._envelope(f"{name}List")
        pool_classes = message_factory.GetMessages([self.file])
        self.classes = {full.rsplit(".", 1)[1]: cls for full, cls in pool_classes.items()}

    def _message(
        self, name: str, fields: list[tuple[str, int, int | None, str | None, bool]]
    ) -> None:
        """Declare message ``name``: (field, number, scalar type or None, message, repeated)."""
        message = self.file.message_type.add(name=name)
        for field, number, scalar, ref, repeated in fields:
            entry = message.field.add(
                name=field,
                number=number,
                label=_LABEL_REPEATED if repeated else _LABEL_OPTIONAL,
                json_name=field,
            )
            if scalar is not None:
                entry.type = scalar
            else:
                entry.type = _T.TYPE_MESSAGE
                entry.type_name = f".{_PACKAGE}.{ref}"

    def _envelope(self, name: str) -> None:
        """``runtime.Unknown`` around ``name``: its ``raw`` bytes read as that message (the
        wire is the same for bytes and an embedded message)."""
        self._message(f"{name}Object", [("raw", 2, None, name, False)])

    def _map(self, owner: descriptor_pb2.DescriptorProto, field: str, quantity: bool) -> str:
        """A ``map<string, string|Quantity>`` field's entry message, nested in ``owner``."""
        entry = owner.nested_type.add(name=f"{field[0].upper()}{field[1:]}Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, label=_LABEL_OPTIONAL, type=_T.TYPE_STRING)
        value = entry.field.add(name="value", number=2, label=_LABEL_OPTIONAL)
        if quantity:
            value.type, value.type_name = _T.TYPE_MESSAGE, f".{_PACKAGE}.Quantity"
        else:
            value.type = _T.TYPE_STRING
        return entry.name

    def _shape(self, shape: Any) -> None:
        """Declare the message of a ``TypedDict`` of :mod:`gpuhub.k8s.objects` (and those it
        holds), and its plan: how each field becomes what the JSON decoding gives."""
        name = shape.__name__
        if name in self.plans:
            return
        numbers = WIRE.get(name)
        if numbers is None:
            raise TypeError(f"gpuhub.k8s.protobuf.WIRE has no field numbers for {name}")
        message = self.file.message_type.add(name=name)
        plan: list[_Field] = []
        self.plans[name] = plan
        hints = get_type_hints(shape)
        missing = set(hints) - set(numbers)
        if missing:
            raise TypeError(f"gpuhub.k8s.protobuf.WIRE has no number for {name}.{min(missing)}")
        for field, hint in hints.items():
            spec = numbers[field]
            number, rule = (spec, "omit") if isinstance(spec, int) else spec
            hint = _bare(hint)
            entry = message.field.add(
                name=field, number=number, label=_LABEL_OPTIONAL, json_name=field
            )
            inner = ""
            if rule == "time":
                entry.type, entry.type_name = _T.TYPE_MESSAGE, f".{_PACKAGE}.Time"
                form = "time"
            elif get_origin(hint) is dict:
                quantity = _bare(get_args(hint)[1]) is not str
                entry.label = _LABEL_REPEATED
                entry.type = _T.TYPE_MESSAGE
                entry.type_name = f".{_PACKAGE}.{name}.{self._map(message, field, quantity)}"
                form = "quantities" if quantity else "strings"
            elif get_origin(hint) is list:
                item = get_args(hint)[0]
                self._shape(item)
                entry.label = _LABEL_REPEATED
                entry.type, entry.type_name = _T.TYPE_MESSAGE, f".{_PACKAGE}.{item.__name__}"
                form, inner = "list", item.__name__
            elif _is_shape(hint):
                self._shape(hint)
                entry.type, entry.type_name = _T.TYPE_MESSAGE, f".{_PACKAGE}.{hint.__name__}"
                form, inner = "struct", hint.__name__
                rule = "keep"  # a struct, not a pointer: Go writes it in both encodings
            elif hint in _SCALARS:
                entry.type = _SCALARS[hint]
                form = "scalar"
            else:
                raise TypeError(f"{name}.{field}: no protobuf form for {hint!r}")
            plan.append(_Field(field, form, inner, rule))

    def converter(self, name: str) -> Convert:
        """The function that turns one ``name`` message into its dict: straight-line code
        with every shape inside inlined, one line or two per field (calls and loops over a
        plan cost twice as much on 150,000 pods)."""
        found = self.converters.get(name)
        if found is None:
            lines = [f"def convert_{name}(m0):", "    d0 = {}"]
            self._emit(name, 0, 1, lines)
            lines.append("    return d0")
            scope: dict[str, Any] = {"_time": _time}
            exec("\n".join(lines), scope)  # code made above from the declared fields only
            found = self.converters[name] = scope[f"convert_{name}"]
        return found

    def _emit(self, name: str, depth: int, indent: int, lines: list[str]) -> int:
        """Lines that fill ``d<depth>`` from message ``m<depth>`` of shape ``name``; the
        deepest variable number used."""
        pad = "    " * indent
        m, d = f"m{depth}", f"d{depth}"
        deepest = depth
        for f in self.plans[name]:
            key, value = repr(f.name), f"{m}.{f.name}"
            if f.form == "scalar" and f.rule == "keep":
                lines.append(f"{pad}{d}[{key}] = {value}")
            elif f.form == "scalar" and f.rule == "set":
                lines.append(f"{pad}if {m}.HasField({key}): {d}[{key}] = {value}")
            elif f.form == "time":
                lines.append(f"{pad}v = _time({value})")
                lines.append(f"{pad}if v is not None: {d}[{key}] = v")
            elif f.form == "struct":
                inner = deepest + 1
                lines.append(f"{pad}m{inner} = {value}")
                lines.append(f"{pad}d{inner} = {d}[{key}] = {{}}")
                deepest = self._emit(f.inner, inner, indent, lines)
            else:  # omitempty: "", false, an empty map or list are left out
                lines.append(f"{pad}v = {value}")
                if f.rule == "keep":  # a list without omitempty: Go writes nil as null
                    lines.append(f"{pad}if not v: {d}[{key}] = None")
                lines.append(f"{pad}if v:")
                if f.form == "scalar":
                    lines.append(f"{pad}    {d}[{key}] = v")
                elif f.form == "strings":
                    lines.append(f"{pad}    {d}[{key}] = dict(v)")
                elif f.form == "quantities":
                    lines.append(f"{pad}    {d}[{key}] = {{k: q.string for k, q in v.items()}}")
                else:  # a list of shapes
                    inner = deepest + 1
                    lines.append(f"{pad}    l{inner} = {d}[{key}] = []")
                    lines.append(f"{pad}    for m{inner} in v:")
                    lines.append(f"{pad}        d{inner} = {{}}")
                    deepest = self._emit(f.inner, inner, indent + 2, lines)
                    lines.append(f"{pad}        l{inner}.append(d{inner})")
        return deepest


@dataclass(frozen=True)
class _Field:
    """How one field of a shape becomes the JSON decoding's value: ``form`` "scalar",
    "time", "strings" (a map), "quantities" (a map of quantities), "struct" or "list" (of
    the shape ``inner``); ``rule`` as in :data:`WIRE` ("omit": left out when empty)."""

    name: str
    form: str
    inner: str
    rule: str


_times: dict[int, str] = {}


def _time(value: Any) -> str | None:
    """A ``metav1.Time`` as Go's JSON writes it: RFC 3339 in UTC to the second (``Time``
    drops the nanoseconds); None for the zero time, which JSON leaves out."""
    seconds = value.seconds
    if not seconds and not value.nanos:
        return None
    found = _times.get(seconds)
    if found is None:
        if len(_times) > 4096:  # pods made in bursts share their second; keep it small
            _times.clear()
        found = _times[seconds] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    return found


_schema: _Schema | None = None


def _built() -> _Schema:
    global _schema
    if _schema is None:
        _schema = _Schema()
    return _schema


def _object(body: bytes | memoryview, envelope: str) -> Any:
    """The message inside ``k8s\\0`` + ``runtime.Unknown``."""
    if bytes(body[:4]) != MAGIC:
        raise ValueError(f"not a Kubernetes protobuf object: it starts {bytes(body[:8])!r}")
    message = _built().classes[f"{envelope}Object"]()
    try:
        message.ParseFromString(body[4:])
    except Exception as exc:  # google.protobuf.message.DecodeError
        raise ValueError(f"a Kubernetes protobuf {envelope} that does not parse: {exc}") from None
    return message.raw


def decode_list(kind: str, body: bytes) -> objects.ListPage:
    """One protobuf LIST answer for the watch ``kind`` (:func:`supports` it)."""
    schema = _built()
    name = objects.KINDS[kind].__name__
    listed = _object(memoryview(body), f"{name}List")
    convert = schema.converter(name)
    return objects.ListPage(
        items=[convert(item) for item in listed.items],
        version=listed.metadata.resourceVersion,
        token=getattr(listed.metadata, "continue") or None,
    )


def decode_event(kind: str, frame: bytes | memoryview) -> objects.Event:
    """One frame of a protobuf watch of ``kind`` (its length prefix removed). An ``ERROR``
    event's object is the API's ``Status`` (``code``, ``reason``, ``message``)."""
    schema = _built()
    event = schema.classes["WatchEvent"]()
    try:
        event.ParseFromString(frame)
    except Exception as exc:  # google.protobuf.message.DecodeError
        raise ValueError(f"a watch of {kind} sent a frame that does not parse: {exc}") from None
    raw = memoryview(event.object.raw)
    if event.type == "ERROR":
        status = _object(raw, "Status")
        obj = {"code": status.code, "reason": status.reason, "message": status.message}
    else:
        name = objects.KINDS[kind].__name__
        obj = schema.converter(name)(_object(raw, name))
    return {"type": event.type, "object": obj}


def split_frames(data: bytes) -> tuple[list[memoryview], int]:
    """The whole frames at the start of ``data`` (each a 4-byte big-endian length, then
    that many bytes), and how many bytes they take: a partial frame waits for more."""
    view = memoryview(data)
    found, start, end = [], 0, len(data)
    while end - start >= 4:
        size = int.from_bytes(view[start : start + 4], "big")
        if end - start - 4 < size:
            break
        found.append(view[start + 4 : start + 4 + size])
        start += 4 + size
    return found, start
