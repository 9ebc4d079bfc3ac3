"""The part of CEL that DRA device selectors are written in, evaluated against one device.

Kubernetes evaluates a DeviceClass's and a claim's ``selectors[].cel.expression`` with the
full Common Expression Language; gpuhub needs the same answer for the spawn form's figures
("which devices could serve this type?") without a CEL engine. This module parses the forms
the admin guide documents and the NVIDIA driver's classes use, and refuses anything else at
hub start with a sentence (:class:`SelectorError`), never at a user's spawn:

* ``device.driver``, ``device.allowMultipleAllocations``,
  ``device.attributes['<domain>'].<name>`` and ``device.capacity['<domain>'].<name>``
  (``['<name>']`` works too), and ``has(...)`` of any of these;
* string, integer, float and boolean literals; lists ``[...]`` with ``in``;
* ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``!``, ``&&``, ``||``, parentheses;
* on strings ``startsWith``, ``endsWith``, ``contains``, ``matches``, ``size()``;
* ``quantity('40Gi')`` and ``semver('1.2.3')`` with ``compareTo``, ``isGreaterThan``,
  ``isLessThan`` (and ``asInteger()`` of a quantity).

Semantics follow Kubernetes': an unknown domain is an empty map, a missing attribute is an
error, and an error makes the device not match (the scheduler would not allocate it either);
``&&`` and ``||`` absorb an error where the other side decides, as CEL's do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache, total_ordering
from typing import Any

from gpuhub.core.quantity import QuantityError, parse_quantity

# The limit Kubernetes puts on one selector expression (resource.k8s.io CELSelectorExpressionMaxLength).
MAX_LENGTH = 10 * 1024


class SelectorError(ValueError):
    """A selector gpuhub cannot evaluate (not CEL, or CEL outside the supported part)."""


class _NoValue(Exception):
    """A runtime error inside an expression (a missing attribute, a type mismatch)."""


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes quantity as CEL's ``quantity()`` makes it (exact)."""

    value: Decimal

    def compare(self, other: Any) -> int:
        if not isinstance(other, Quantity):
            raise _NoValue("compareTo needs a quantity")
        return (self.value > other.value) - (self.value < other.value)


@total_ordering
@dataclass(frozen=True)
class Version:
    """A semantic version (``major.minor.patch[-pre]``), as DRA's version attributes are."""

    major: int
    minor: int
    patch: int
    pre: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        return _version(text)

    def _key(self) -> tuple[int, int, int, int, str]:
        # A pre-release sorts before its release (1.0.0-rc1 < 1.0.0).
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, self.pre)

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def compare(self, other: Any) -> int:
        if not isinstance(other, Version):
            raise _NoValue("compareTo needs a version")
        return (self > other) - (self < other)


@dataclass(frozen=True)
class DeviceView:
    """What an expression sees of a device: its driver, and attributes and capacity by their
    fully qualified names (``gpu.nvidia.com/productName``; the slice's unqualified names are
    in the driver's domain). Attribute values are str, int, bool or :class:`Version`;
    capacity values are :class:`Quantity`."""

    driver: str
    attributes: Mapping[str, Any]
    capacity: Mapping[str, Quantity]
    allow_multiple: bool = False


Evaluate = Callable[[DeviceView], Any]

_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


@lru_cache(maxsize=1024)
def _version(text: str) -> Version:
    """A version, parsed once: a cluster's devices repeat a handful (driver, CUDA)."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a semantic version such as 1.2.3")
    return Version(int(match[1]), int(match[2]), int(match[3]), match[4] or "")


class _Domain:
    """``device.attributes['<domain>']`` or ``device.capacity['<domain>']``: a lazy map."""

    __slots__ = ("domain", "values")

    def __init__(self, values: Mapping[str, Any], domain: str) -> None:
        self.values, self.domain = values, domain

    def get(self, name: str) -> Any:
        key = f"{self.domain}/{name}"
        if key not in self.values:
            raise _NoValue(f"no such key: {name}")
        return self.values[key]

    def has(self, name: str) -> bool:
        return f"{self.domain}/{name}" in self.values


_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d+|\d+)(?P<unsigned>[uU])?|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[<>!()\[\].,])|(?P<ident>[A-Za-z_][A-Za-z0-9_]*))"
)
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    at = 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise SelectorError(f"cannot read {text[at : at + 20]!r} at character {at + 1}")
        at = match.end()
        if match["num"] is not None:
            num = match["num"]
            out.append(("lit", float(num) if "." in num else int(num)))
        elif match["str"] is not None:
            body = match["str"][1:-1]
            out.append(("lit", re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[1]), body)))
        elif match["op"] is not None:
            out.append(("op", match["op"]))
        else:
            ident = match["ident"]
            if ident in ("true", "false"):
                out.append(("lit", ident == "true"))
            elif ident == "in":
                out.append(("op", "in"))
            else:
                out.append(("ident", ident))
    out.append(("end", None))
    return out


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _NoValue("not a boolean")
    return value


def _same_kind(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return True
    return type(a) is type(b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "in":
        if not isinstance(b, list):
            raise _NoValue("'in' needs a list")
        return any(_same_kind(a, x) and a == x for x in b)
    if not _same_kind(a, b):
        if op in ("==", "!="):  # CEL: no overload; Kubernetes' heterogeneous equality is false
            return op == "!="
        raise _NoValue("values of different kinds")
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if isinstance(a, (bool, list, Quantity)):
        raise _NoValue(f"{op} does not apply here")  # quantities compare with compareTo
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def _method(name: str, target: Any, args: list[Any]) -> Any:
    if isinstance(target, str):
        if name == "size" and not args:
            return len(target)
        if len(args) == 1 and isinstance(args[0], str):
            if name == "startsWith":
                return target.startswith(args[0])
            if name == "endsWith":
                return target.endswith(args[0])
            if name == "contains":
                return args[0] in target
            if name == "matches":
                return re.search(args[0], target) is not None
    if isinstance(target, (Quantity, Version)) and len(args) == 1:
        if name == "compareTo":
            return target.compare(args[0])
        if name == "isGreaterThan":
            return target.compare(args[0]) > 0
        if name == "isLessThan":
            return target.compare(args[0]) < 0
    if isinstance(target, Quantity) and name == "asInteger" and not args:
        return int(target.value)
    raise _NoValue(f"no method {name} here")


_STRING_METHODS = {"startsWith": 1, "endsWith": 1, "contains": 1, "matches": 1, "size": 0}
_ORDERED_METHODS = {"compareTo": 1, "isGreaterThan": 1, "isLessThan": 1, "asInteger": 0}


class _Parser:
    """Recursive descent over CEL's grammar (Expr → Or → And → Relation → Unary → Member),
    producing closures; anything outside the supported part is a :class:`SelectorError`."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, Any]:
        return self.tokens[self.at]

    def take(self, kind: str, value: Any = None) -> Any:
        token = self.tokens[self.at]
        if token[0] != kind or (value is not None and token[1] != value):
            wanted = repr(value) if value is not None else kind
            got = "the end" if token[0] == "end" else repr(token[1])
            raise SelectorError(f"expected {wanted} but found {got}")
        self.at += 1
        return token[1]

    def parse(self) -> Evaluate:
        node = self.or_()
        self.take("end")
        return node

    def or_(self) -> Evaluate:
        node = self.and_()
        while self.peek() == ("op", "||"):
            self.at += 1
            node = _either(node, self.and_())
        return node

    def and_(self) -> Evaluate:
        node = self.relation()
        while self.peek() == ("op", "&&"):
            self.at += 1
            node = _both(node, self.relation())
        return node

    def relation(self) -> Evaluate:
        node = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("==", "!=", "<", "<=", ">", ">=", "in"):
            op = self.take("op")
            left, right = node, self.unary()
            node = _relation(op, left, right)
        return node

    def unary(self) -> Evaluate:
        if self.peek() == ("op", "!"):
            self.at += 1
            inner = self.unary()
            return lambda d: not _truth(inner(d))
        return self.member()

    def member(self) -> Evaluate:
        node, path = self.primary()
        while True:
            token = self.peek()
            if token == ("op", "."):
                self.at += 1
                name = self.take("ident")
                if self.peek() == ("op", "("):
                    args = self.args()
                    node, path = _call(name, node, args), None
                else:
                    node, path = self.select(node, path, name)
            elif token == ("op", "["):
                self.at += 1
                key = self.take("lit")
                self.take("op", "]")
                if not isinstance(key, str):
                    raise SelectorError("an index must be a quoted name such as ['gpu.nvidia.com']")
                node, path = self.select(node, path, key)
            else:
                return node

    def select(self, node: Evaluate, path: str | None, name: str) -> tuple[Evaluate, str | None]:
        """``.name`` or ``['name']`` on what the path so far is."""
        if path == "device":
            if name == "driver":
                return (lambda d: d.driver), "value"
            if name == "allowMultipleAllocations":
                return (lambda d: d.allow_multiple), "value"
            if name == "attributes":
                return (lambda d: d.attributes), "attributes"
            if name == "capacity":
                return (lambda d: d.capacity), "capacity"
            raise SelectorError(
                f"device.{name} is not a field gpuhub reads (driver, attributes, capacity, "
                "allowMultipleAllocations)"
            )
        if path in ("attributes", "capacity"):
            return (lambda d, _n=node: _Domain(_n(d), name)), "domain"
        if path == "domain":
            return (lambda d, _n=node: _n(d).get(name)), "value"
        raise SelectorError(f"cannot select {name!r} here")

    def args(self) -> list[Evaluate]:
        self.take("op", "(")
        out: list[Evaluate] = []
        if self.peek() != ("op", ")"):
            out.append(self.or_())
            while self.peek() == ("op", ","):
                self.at += 1
                out.append(self.or_())
        self.take("op", ")")
        return out

    def primary(self) -> tuple[Evaluate, str | None]:
        kind, value = self.peek()
        if kind == "lit":
            self.at += 1
            return (lambda d, _v=value: _v), None
        if (kind, value) == ("op", "("):
            self.at += 1
            node = self.or_()
            self.take("op", ")")
            return node, None
        if (kind, value) == ("op", "["):
            self.at += 1
            items: list[Evaluate] = []
            if self.peek() != ("op", "]"):
                items.append(self.or_())
                while self.peek() == ("op", ","):
                    self.at += 1
                    items.append(self.or_())
            self.take("op", "]")
            return (lambda d: [item(d) for item in items]), None
        if kind == "ident":
            self.at += 1
            if value == "device":
                return (lambda d: d), "device"
            if value == "has":
                return self.has(), None
            if value in ("quantity", "semver"):
                return self.constructor(value), None
            raise SelectorError(
                f"{value!r} is not something gpuhub evaluates (device, has, quantity, semver)"
            )
        raise SelectorError(
            "expected a value but found " + ("the end" if kind == "end" else repr(value))
        )

    def has(self) -> Evaluate:
        """``has(device.attributes['d'].name)``: whether the device has that attribute."""
        self.take("op", "(")
        start = self.at
        self.take("ident", "device")
        self.take("op", ".")
        which = self.take("ident")
        if which not in ("attributes", "capacity"):
            raise SelectorError(
                "has() takes device.attributes['<domain>'].<name> or device.capacity[...]"
            )
        self.take("op", "[")
        domain = self.take("lit")
        self.take("op", "]")
        if self.peek() == ("op", "["):
            self.at += 1
            name = self.take("lit")
            self.take("op", "]")
        else:
            self.take("op", ".")
            name = self.take("ident")
        self.take("op", ")")
        if not (isinstance(domain, str) and isinstance(name, str)):
            raise SelectorError(f"has() takes quoted names (from character {start})")
        key = f"{domain}/{name}"
        if which == "attributes":
            return lambda d: key in d.attributes
        return lambda d: key in d.capacity

    def constructor(self, name: str) -> Evaluate:
        self.take("op", "(")
        text = self.take("lit")
        self.take("op", ")")
        if not isinstance(text, str):
            raise SelectorError(f"{name}() takes a quoted string, such as {name}('40Gi')")
        if name == "quantity":
            try:
                value: Any = Quantity(parse_quantity(text))
            except QuantityError as exc:
                raise SelectorError(f"quantity({text!r}): {exc}") from None
        else:
            try:
                value = Version.parse(text)
            except ValueError as exc:
                raise SelectorError(f"semver({text!r}): {exc}") from None
        return lambda d: value


def _either(left: Evaluate, right: Evaluate) -> Evaluate:
    def run(d: DeviceView) -> bool:
        try:
            if _truth(left(d)):
                return True
        except _NoValue:
            if _truth(right(d)):  # an error on one side is absorbed when the other is true
                return True
            raise
        return _truth(right(d))

    return run


def _both(left: Evaluate, right: Evaluate) -> Evaluate:
    def run(d: DeviceView) -> bool:
        try:
            if not _truth(left(d)):
                return False
        except _NoValue:
            if not _truth(right(d)):  # ... when the other is false
                return False
            raise
        return _truth(right(d))

    return run


def _relation(op: str, left: Evaluate, right: Evaluate) -> Evaluate:
    return lambda d: _compare(op, left(d), right(d))


def _call(name: str, target: Evaluate, args: list[Evaluate]) -> Evaluate:
    wanted = _STRING_METHODS.get(name, _ORDERED_METHODS.get(name))
    if wanted is None:
        known = ", ".join([*_STRING_METHODS, *_ORDERED_METHODS])
        raise SelectorError(f"{name}() is not a function gpuhub evaluates ({known})")
    if len(args) != wanted:
        raise SelectorError(f"{name}() takes {wanted} argument{'s' if wanted != 1 else ''}")
    return lambda d: _method(name, target(d), [a(d) for a in args])


@dataclass(frozen=True)
class Selector:
    """One compiled expression; :meth:`matches` says whether a device satisfies it."""

    expression: str
    run: Evaluate

    def matches(self, device: DeviceView) -> bool:
        """True only for a true result: false, an error or a non-boolean are no match."""
        try:
            return self.run(device) is True
        except _NoValue:
            return False
        except (TypeError, re.error):
            return False


@lru_cache(maxsize=256)
def compile_selector(expression: str) -> Selector:
    """Parse ``expression`` once (cached: DeviceClasses repeat); :class:`SelectorError` with
    the reason when it is not in the supported part of CEL."""
    if not isinstance(expression, str) or not expression.strip():
        raise SelectorError("a selector must be a non-empty CEL expression")
    if len(expression) > MAX_LENGTH:
        raise SelectorError(f"a selector may be at most {MAX_LENGTH} characters (as Kubernetes')")
    return Selector(expression, _Parser(expression).parse())
