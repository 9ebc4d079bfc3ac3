"""The house's structural rules, checked from the source.

The test tree's one rule for sharing: a test module imports no other test module. What tests
share (helpers, constants, fixtures) lives in ``tests/support/``; fixtures reach a folder
through its ``conftest.py``. A module that imported another test module would run that
module's tests' imports (and, for pytest, make its autouse fixtures and module-level state
part of the importer), and moving either file would break the other.

Rooms a newcomer can hold: no module of gpuhub over 600 lines, no class over 400 (issue 40).
A file past them holds several jobs; split it along its seams into modules named for what
they do.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.paths import REPO

TEST_TREES = (REPO / "tests", REPO / "localk8s" / "tests")


def python_files() -> Iterator[Path]:
    for tree in TEST_TREES:
        yield from (p for p in sorted(tree.rglob("*.py")) if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def imported_modules(source: str, importer: str) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every module ``source`` imports, relative imports resolved
    against ``importer`` (a dotted module name); ``from a import b`` yields ``a`` and ``a.b``,
    since ``b`` may be a module."""
    package = importer.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def imports_of_test_modules(source: str, importer: str) -> list[str]:
    """The test modules (``test_*``) among what ``source`` imports, as ``line: module``."""
    return sorted(
        {
            f"{line}: {module}"
            for line, module in imported_modules(source, importer)
            if module.rsplit(".", 1)[-1].startswith("test_")
        }
    )


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from tests.hub.test_form import page", ["1: tests.hub.test_form"]),
        ("from .test_fleet import rows", ["1: tests.hub.web.test_fleet"]),
        ("from ..ledger import test_device_book", ["1: tests.hub.ledger.test_device_book"]),
        ("import tests.core.test_policy as p", ["1: tests.core.test_policy"]),
        ("from tests.support.wait import eventually, until", []),
        ("from tests.support import cluster\nimport pytest", []),
    ],
)
def test_the_rule_sees_every_way_of_importing_a_test_module(source: str, found: list[str]) -> None:
    assert imports_of_test_modules(source, "tests.hub.web.test_here") == found


def test_no_test_module_imports_another_test_module() -> None:
    offences = [
        f"{path.relative_to(REPO)}:{hit}"
        for path in python_files()
        for hit in imports_of_test_modules(path.read_text(), module_name(path))
    ]
    assert not offences, (
        "a test module imports another test module; move what they share into tests/support/ "
        "(fixtures: a support module the folder's conftest.py imports):\n" + "\n".join(offences)
    )


# -- sizes -------------------------------------------------------------------------------------
PACKAGE = REPO / "spawner" / "gpuhub"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def oversized(source: str, where: str) -> list[str]:
    """What of ``source`` passes the limits: the module itself over ``MAX_MODULE_LINES`` lines,
    and each class (nested ones too) over ``MAX_CLASS_LINES``, from its ``class`` line to its
    last."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{where}: {lines} lines, over {MAX_MODULE_LINES}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            size = node.end_lineno - node.lineno + 1
            if size > MAX_CLASS_LINES:
                found.append(f"{where}:{node.lineno}: class {node.name}, {size} lines")
    return found


def _class_of(lines: int) -> str:
    return "class C:\n" + "    x = 0\n" * (lines - 1)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("x = 0\n" * 600, []),
        ("x = 0\n" * 601, ["m.py: 601 lines, over 600"]),
        (_class_of(400), []),
        (_class_of(401), ["m.py:1: class C, 401 lines"]),
        ("def f():\n    " + _class_of(401).replace("\n", "\n    "), ["m.py:2: class C, 401 lines"]),
    ],
)
def test_the_size_rule_sees_long_modules_and_classes(source: str, found: list[str]) -> None:
    assert oversized(source, "m.py") == found


def test_no_module_of_gpuhub_passes_600_lines_nor_a_class_400() -> None:
    offences = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in path.parts
        for hit in oversized(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not offences, (
        "a module or class of gpuhub is past the house's limits (600 lines a module, 400 a "
        "class); split it along its seams into modules named for what they do:\n"
        + "\n".join(offences)
    )
