"""Label and annotation keys have one home, :mod:`gpuhub.k8s.labels`.

Every key gpuhub writes or reads on Kubernetes objects is a constant there; other modules use
the constant, never the key spelt out (help texts and docstrings may name them in prose).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gpuhub.k8s import labels
from harness.paths import REPO

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


def _aliases(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each module-level ``NAME = KEY_CONSTANT`` in ``path``: a second name
    for a key, which would leave two names to search for."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value = node.value
            used = value.id if isinstance(value, ast.Name) else getattr(value, "attr", None)
            if used in names:
                found.append((node.lineno, used))
    return found


def test_no_module_renames_a_key() -> None:
    names = {name for name in vars(labels) if name.isupper()}
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(REPO).as_posix()
            if where != HOME:
                found += [f"{where}:{line}: {name}" for line, name in _aliases(path, names)]
    assert not found, "import gpuhub.k8s.labels' constant by its own name:\n" + "\n".join(found)
