"""Kubernetes resource quantities (``500m``, ``16G``, ``512Mi``) for CPU and memory.

Kubernetes semantics, not JupyterHub's: ``G`` is 10**9 and ``Gi`` is 2**30. Parsing is
strict (the whole string must be a quantity) because the values come from users.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

_QUANTITY = re.compile(
    r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]{1,3}))?"
)

# Longest number a user may type; keeps Decimal arithmetic and error messages small.
_MAX_LEN = 32


class QuantityError(ValueError):
    """A string or number is not a valid Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Parse a non-negative Kubernetes quantity (str, int or float) into a Decimal."""
    if isinstance(value, bool):
        raise QuantityError("expected a number or a quantity such as 16G, not true/false")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError("expected a finite number")
        number = Decimal(repr(value))
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > _MAX_LEN:
            raise QuantityError("expected a quantity such as 16G or 512Mi")
        match = _QUANTITY.fullmatch(text)
        if match is None:
            raise QuantityError(f"{text!r} is not a quantity such as 16G, 512Mi or 500m")
        try:
            number = Decimal(match["number"])
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
            raise QuantityError(f"{text!r} is not a number") from exc
        if match["exp"] is not None:
            number = number.scaleb(int(match["exp"]))
        else:
            number *= _SUFFIXES[match["suffix"] or ""]
    else:
        raise QuantityError(f"expected a number or a quantity string, not {type(value).__name__}")
    if number < 0:
        raise QuantityError("must not be negative")
    return number


def parse_cpu(value: object) -> float:
    """CPU cores from ``2``, ``0.5``, ``"1.5"`` or ``"500m"``."""
    return float(parse_quantity(value))


def parse_memory(value: object) -> int:
    """Memory in bytes from ``"16G"``, ``"512Mi"`` or a plain byte count."""
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def format_memory(num_bytes: int) -> str:
    """The shortest exact quantity for a byte count (``8Gi``, ``16G``); binary wins ties."""
    best = str(num_bytes)
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E"):
        unit = int(_SUFFIXES[suffix])
        if num_bytes and num_bytes % unit == 0:
            candidate = f"{num_bytes // unit}{suffix}"
            if len(candidate) < len(best) or (len(candidate) == len(best) and "i" in candidate):
                best = candidate
    return best


def format_cpu(cores: float) -> str:
    """CPU as Kubernetes writes it: whole cores plain, fractions in millicores."""
    if float(cores).is_integer():
        return str(int(cores))
    return f"{round(cores * 1000)}m"


def human_memory(num_bytes: int) -> str:
    """A person's reading of a byte count (``16 GB``, ``1.5 GiB``) for forms and messages."""
    binary = (("Ti", "TiB"), ("Gi", "GiB"), ("Mi", "MiB"))
    for suffix, label in binary:
        unit = int(_SUFFIXES[suffix])
        if num_bytes >= unit and num_bytes % unit == 0 and num_bytes // unit < 1024:
            return f"{num_bytes // unit} {label}"
    if num_bytes >= 1024 * int(_SUFFIXES["Mi"]) and num_bytes % int(_SUFFIXES["Mi"]) == 0:
        # A cluster's sum (565,035 GiB): in the unit the next figure uses too ("552 TiB of
        # 625 TiB"), not a long run of digits in a smaller one.
        for suffix, label in binary:
            unit = int(_SUFFIXES[suffix])
            if num_bytes >= unit:
                return f"{num_bytes / unit:.3g} {label}"
    for suffix, label in (("T", "TB"), ("G", "GB"), ("M", "MB"), ("k", "kB")):
        unit = int(_SUFFIXES[suffix])
        if num_bytes >= unit:
            value = num_bytes / unit
            return f"{value:.3g} {label}"
    return f"{num_bytes} bytes"
