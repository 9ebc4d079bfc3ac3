"""Kubernetes resource quantities ("500m", "8Gi", "1.5", "2e3") as exact fractions."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The apiserver's own quantity grammar (k8s.io/apimachinery/pkg/api/resource).
_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?\d+))?"
)


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity; ``QuantityError`` if it is not one."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Fraction(value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        raise QuantityError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    number = Fraction(match["num"])
    if match["exp"] is not None:
        return number * Fraction(10) ** int(match["exp"])
    return number * _SUFFIX[match["suffix"] or ""]
