"""Label and field selectors as the apiserver parses them.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``,
joined by commas (logical AND). Field selectors: ``path=value``, ``path==value``,
``path!=value`` over the fields each resource type supports (others are a 400, as in
Kubernetes: ``field label not supported: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Requirement = Callable[[Mapping[str, str]], bool]


class SelectorError(ValueError):
    pass


_KEY = re.compile(
    r"([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
)
_SET_RE = re.compile(r"\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in (p.strip() for p in parts) if p]


def _check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r}")
    return key


def parse_label_selector(text: str | None) -> Requirement:
    """A predicate over an object's labels."""
    requirements: list[Requirement] = []
    for part in _split_top(text or ""):
        set_match = _SET_RE.fullmatch(part)
        if set_match:
            key = _check_key(set_match["key"])
            values = {v.strip() for v in set_match["values"].split(",") if v.strip()}
            if set_match["op"] == "in":
                requirements.append(lambda labels, k=key, v=values: labels.get(k) in v)
            else:
                requirements.append(lambda labels, k=key, v=values: labels.get(k) not in v)
            continue
        for op in ("!=", "==", "="):
            if op in part:
                key, value = (s.strip() for s in part.split(op, 1))
                _check_key(key)
                if op == "!=":
                    requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
                else:
                    requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
                break
        else:
            if part.startswith("!"):
                key = _check_key(part[1:].strip())
                requirements.append(lambda labels, k=key: k not in labels)
            else:
                key = _check_key(part)
                requirements.append(lambda labels, k=key: k in labels)
    return lambda labels: all(r(labels) for r in requirements)


def parse_field_selector(
    text: str | None, fields: Callable[[Mapping[str, Any]], Mapping[str, str]], supported: set[str]
) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a whole object, through ``fields`` (its selectable field values)."""
    terms: list[tuple[str, str, bool]] = []
    for part in _split_top(text or ""):
        for op in ("!=", "==", "="):
            if op in part:
                path, value = (s.strip() for s in part.split(op, 1))
                break
        else:
            raise SelectorError(f"invalid selector: '{part}'; can't understand '{part}'")
        if path not in supported:
            raise SelectorError(f"field label not supported: {path}")
        terms.append((path, value, op == "!="))
    if not terms:
        return lambda obj: True

    def matches(obj: Mapping[str, Any]) -> bool:
        values = fields(obj)
        return all(
            (values.get(p, "") != v) if neg else (values.get(p, "") == v) for p, v, neg in terms
        )

    return matches
