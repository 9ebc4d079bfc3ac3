"""Hostile JSON for the property tests: what an attacker sends, not what a client would.

``json_values`` covers every JSON type, nested, with lone surrogates, non-ASCII digits,
numbers as text, huge and non-finite numbers, and values nested past any sane depth.
:func:`encode` writes what Python's ``json`` can send over the wire (``NaN``, ``\\ud800``).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from hypothesis import strategies as st

# Values the issue reproduced, and their relatives.
NASTY: list[Any] = [
    "\u00b2",  # "²".isdigit() is True, int("²") raises
    "\u0661",  # ARABIC-INDIC DIGIT ONE
    "2",
    " 2 ",
    "\ud800",  # a lone surrogate: not encodable as UTF-8
    "x\udfffy",
    10**30,
    -(10**30),
    2**63,
    1e308,
    float("inf"),
    float("nan"),
    -0.0,
    True,
    "",
    "\0",
    "../../etc/passwd",
]


class Deep:
    """A JSON array nested ``depth`` levels deep (``json.dumps`` itself would recurse)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"

    @property
    def text(self) -> str:
        return "[" * self.depth + "1" + "]" * self.depth


text = st.text(st.characters(exclude_categories=()), max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    text,
    st.sampled_from(NASTY),
)
json_values = st.one_of(
    st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3)
        ),
        max_leaves=6,
    ),
    st.integers(min_value=40, max_value=3000).map(Deep),
)


def encode(value: Any) -> bytes:
    """The JSON text of ``value`` as Python writes it (ASCII; NaN, surrogates and deep
    nesting included: what a hostile client can put on the wire)."""
    deep: list[Deep] = []

    def placeholder(item: Any) -> str:
        if not isinstance(item, Deep):
            raise TypeError(type(item).__name__)
        deep.append(item)
        return f"@@deep{len(deep) - 1}@@"

    out = json.dumps(value, default=placeholder)
    for n, item in enumerate(deep):
        out = out.replace(f'"@@deep{n}@@"', item.text)
    return out.encode()


def gzip_bomb(mebibytes: int) -> bytes:
    """A valid gzip stream of ``mebibytes`` MiB of zeros, made in about a second.

    Each MiB is deflated alone (a full flush resets the compressor), so every MiB after the
    first compresses to the same bytes, which are repeated; the trailer's CRC and size are
    those of the whole. Nothing is ever held inflated.
    """
    zeros = bytes(1024 * 1024)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()[:-8]  # the final empty block; the trailer is rewritten below
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, (mebibytes * len(zeros)) % 2**32)
    return first + again * (mebibytes - 1) + end + trailer
