"""Label and annotation keys have one home, :mod:`gpuhub.k8s.labels`.

Every key gpuhub writes or reads on Kubernetes objects is a constant there; other modules use
the constant, never the key spelt out (help texts and docstrings may name them in prose).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gpuhub.k8s import labels
from tests.support.paths import REPO

SOURCES = (REPO / "spawner" / "gpuhub", REPO / "labextension" / "gpuhub_lab")
HOME = "spawner/gpuhub/k8s/labels.py"
# Values too common to look for as they are (a label's value, a plain word).
COMMON = {labels.MANAGED_BY, labels.COMPONENT_LABEL}


def _keys() -> set[str]:
    return {
        value
        for name, value in vars(labels).items()
        if name.isupper() and isinstance(value, str) and value not in COMMON
    }


def _spelt_out(path: Path, keys: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each string literal in ``path`` that is a key, or a label selector or
    ``key=value`` naming one."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and keys & set(re.split(r"[,=]", node.value))
    ]


def test_every_key_has_one_name() -> None:
    found = [
        value for name, value in vars(labels).items() if name.isupper() and isinstance(value, str)
    ]
    assert len(found) == len(set(found)), "two constants of gpuhub.k8s.labels name one key"


def test_no_module_spells_out_a_key() -> None:
    keys = _keys()
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(REPO).as_posix()
            if where == HOME:
                continue
            found += [f"{where}:{line}: {text!r}" for line, text in _spelt_out(path, keys)]
    assert not found, "use gpuhub.k8s.labels' constant instead:\n" + "\n".join(found)
