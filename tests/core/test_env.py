"""The environment contract has one home, :mod:`gpuhub.core.env`.

Every ``GPUHUB_*`` name gpuhub writes or reads is a constant there; other modules use the
constant, never a ``"GPUHUB_..."`` literal. The job runner is the exception: it runs in job pods
without gpuhub, so it keeps copies, which must agree with env.py's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpuhub.core import env
from gpuhub.jobs import run_notebook
from harness.paths import REPO

SOURCES = (REPO / "spawner" / "gpuhub", REPO / "labextension" / "gpuhub_lab")
PREFIX = "GPUHUB_"

# Where the names may be written out: their home, and the runner's copies.
HOMES = {"spawner/gpuhub/core/env.py", "spawner/gpuhub/jobs/run_notebook.py"}


def _constants(module: object) -> dict[str, str]:
    """The module's ``NAME = "GPUHUB_..."`` constants."""
    return {
        name: value
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and value.startswith(PREFIX)
    }


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string literal in ``path`` that starts with ``GPUHUB_``."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(PREFIX)
    ]


def test_the_runner_copies_agree_with_the_contract() -> None:
    copies = _constants(run_notebook)
    assert copies, "the job runner names no GPUHUB_ variable as a constant"
    for name, value in copies.items():
        assert getattr(env, name, None) == value, (
            f"gpuhub.jobs.run_notebook.{name} = {value!r}, but gpuhub.core.env has "
            f"{getattr(env, name, None)!r}"
        )


def test_every_name_in_the_contract_is_one_variable() -> None:
    names = _constants(env)
    names.pop("GPU_ENV_PREFIX")  # the prefix the ledger reads pods' GPU variables by
    values = list(names.values())
    assert len(values) == len(set(values)), "two constants of gpuhub.core.env name one variable"
    assert all(name.endswith("_ENV") for name in names), sorted(names)


def test_no_module_spells_out_a_variable_name() -> None:
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            where = path.relative_to(REPO).as_posix()
            if where in HOMES:
                continue
            found += [f"{where}:{line}: {text!r}" for line, text in _literals(path)]
    assert not found, "use gpuhub.core.env's constant instead:\n" + "\n".join(found)


def test_the_runner_imports_nothing_of_gpuhub() -> None:
    """Its copies exist because a job's pod runs it without gpuhub installed."""
    path = Path(run_notebook.__file__)
    tree = ast.parse(path.read_text(), str(path))
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.split(".")[0] in ("gpuhub", "gpuhub_lab")]
