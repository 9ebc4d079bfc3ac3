"""docs/architecture.md's layer table is the folder list of ``gpuhub``, and the import contracts
(.importlinter) read the same layers in the same order; the page names only files, modules and
symbols that exist, and every package folder of the repository."""

from __future__ import annotations

import configparser
import contextlib
import functools
import importlib
import inspect
import pkgutil
import re
import subprocess
from types import ModuleType
from typing import Any

import pytest

from harness.paths import REPO

PACKAGE = REPO / "spawner" / "gpuhub"
PAGE = REPO / "docs" / "architecture.md"
FOLDER = re.compile(r"`spawner/gpuhub/([a-z0-9_/]+)/`")


def documented_folders() -> list[str]:
    """The folders of the layer table, top first, as package paths (``hub.web``)."""
    text = PAGE.read_text()
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    folders = []
    for row in rows:
        found = FOLDER.search(row.split("|")[2])
        if found:
            folders.append(found.group(1).replace("/", "."))
    return folders


def package_folders() -> set[str]:
    return {
        ".".join(init.parent.relative_to(PACKAGE).parts)
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE and "__pycache__" not in init.parts
    }


def test_every_folder_of_gpuhub_is_a_row_of_the_layer_table() -> None:
    documented = documented_folders()
    assert len(documented) == len(set(documented)), f"a folder is listed twice: {documented}"
    missing = package_folders() - set(documented)
    assert not missing, f"docs/architecture.md's layer table lacks {sorted(missing)}"
    gone = set(documented) - package_folders()
    assert not gone, f"docs/architecture.md lists folders that do not exist: {sorted(gone)}"


def test_every_module_lives_in_a_folder_not_at_the_root() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at gpuhub's root belong to no layer: {loose}"


def _contract_layers(section: str) -> list[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    layers = config[f"importlinter:contract:{section}"]["layers"].split("\n")
    return [name.strip() for line in layers if line.strip() for name in line.split("|")]


def test_the_table_orders_the_layers_as_the_import_contracts_do() -> None:
    documented = documented_folders()
    top = [f for f in documented if "." not in f]
    contract = _contract_layers("layers")
    # Siblings of one contract layer (hub | service) may come in either order.
    assert sorted(top) == sorted(contract)
    assert [f for f in top if f not in ("hub", "service")] == [
        f for f in contract if f not in ("hub", "service")
    ]
    in_hub = [f.split(".", 1)[1] for f in documented if f.startswith("hub.")]
    hub_layers = _contract_layers("hub-layers")
    assert [f for f in hub_layers if f in in_hub] == in_hub


# -- what the page names exists ----------------------------------------------------------------
# Where the page's package folders live: every folder with an __init__.py under these roots
# must be named on the page (`labextension/gpuhub_lab/metrics/`); the test trees' own folders
# follow the package and are not listed one by one.
PACKAGE_ROOTS = (
    "spawner/gpuhub",
    "labextension/gpuhub_lab",
    "localk8s",
    "benchmarks",
    "harness",
    "tests/support",
)
# The Python packages whose modules the page names by dotted path (`jobs.model.new_job_id`,
# `monitor.GPUMonitor`): gpuhub's own, imported to resolve them.
CODE_PACKAGES = ("gpuhub", "gpuhub_lab")
# Dotted names on the page that are no code of gpuhub's: configuration keys (the service's,
# the chart's values, the policy's) and Kubernetes fields. A new one goes here.
NOT_CODE = frozenset(
    {
        "capacity.requests.memory",
        "consumedCapacity.memory",
        "device.driver",
        "dra.capacity",
        "jobs.kueue.createLocalQueue",
        "jobs.kueue.queueName",
        "jobs.trainer.serviceAccount",
        "kueue.queue_name",
        "line.order",
        "sharing.replicas",
        "spec.runPolicy.suspend",
        "spec.suspend",
        "status.trainerStatus",
        "trainer.numNodes",
        "trainer.runtimes",
    }
)
CODE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
FILE_NAME = re.compile(r"[\w.-]+(?:/[\w.-]+)*\.(?:py|ts|js|css|html|yaml|yml|json|toml|md|c|go)")
FOLDER_NAME = re.compile(r"[\w.-]+(?:/[\w.-]+)*/")


def page_names() -> list[str]:
    """Every name the page sets in code type (`...`), a call's arguments left out."""
    return [name.split("(", 1)[0] for name in re.findall(r"`([^`\n]+)`", PAGE.read_text())]


@functools.cache
def repository_files() -> frozenset[str]:
    """The repository's files, as paths from its root: committed or new, not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return frozenset(path for path in listed if (REPO / path).is_file())


def exists_in_repository(name: str) -> bool:
    """Whether ``name`` is a file or folder of the repository: a path from its root, or the
    end of one (the page says `ledger.py` and `k8s/pods.py` where its context gives the
    folder)."""
    files = repository_files()
    if name.endswith("/"):
        return any(f.startswith(name) or f"/{name}" in f"/{f}" for f in files)
    return any(f == name or f.endswith(f"/{name}") for f in files)


@functools.cache
def code_modules() -> dict[str, ModuleType]:
    """Every module of gpuhub and its lab extension, imported, by dotted name (a package's
    ``__main__`` left out: it runs the program)."""
    modules: dict[str, ModuleType] = {}
    for root in CODE_PACKAGES:
        package = importlib.import_module(root)
        modules[root] = package
        for info in pkgutil.walk_packages(package.__path__, f"{root}."):
            if not info.name.endswith(".__main__"):
                modules[info.name] = importlib.import_module(info.name)
    return modules


MISSING = object()


def defines(owner: Any, name: str) -> Any:
    """What ``owner`` (a module or class) calls ``name``, else ``MISSING``: an attribute, a
    dataclass field or annotation, or what its methods set on ``self``; a package also
    answers for its modules' names."""
    if hasattr(owner, name):
        return getattr(owner, name)
    if isinstance(owner, ModuleType):
        prefix = f"{owner.__name__}."
        return next(
            (
                getattr(module, name)
                for dotted, module in code_modules().items()
                if dotted.startswith(prefix) and hasattr(module, name)
            ),
            MISSING,
        )
    if isinstance(owner, type):
        for cls in owner.__mro__:
            if name in getattr(cls, "__annotations__", {}):
                return name
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                continue
            if re.search(rf"self\.{re.escape(name)}\s*(?::[^=\n]+)?=[^=]", source):
                return name
    return MISSING


def resolves(owner: Any, rest: list[str]) -> bool:
    for name in rest:
        owner = defines(owner, name)
        if owner is MISSING:
            return False
    return True


def starts(first: list[str]) -> list[Any]:
    """What a dotted name's first parts may be: a module of gpuhub's whose dotted path ends
    with them (`jobs.model`, `monitor`), a class of gpuhub's of that name, or a module
    Python imports by that name (`yaml`)."""
    found: list[Any] = [
        module
        for dotted, module in code_modules().items()
        if dotted.split(".")[-len(first) :] == first
    ]
    if len(first) == 1:
        found += [
            value
            for module in code_modules().values()
            for value in vars(module).values()
            if isinstance(value, type)
            and value.__name__ == first[0]
            and value.__module__ == module.__name__
        ]
        if not found and first[0].isidentifier():
            with contextlib.suppress(ImportError):
                found.append(importlib.import_module(first[0]))
    if not found and ".".join(first).startswith(CODE_PACKAGES):
        # gpuhub 0.1's module paths import as aliases of their new homes
        with contextlib.suppress(ImportError):
            found.append(importlib.import_module(".".join(first)))
    return found


def names_code_that_exists(name: str) -> bool:
    """Whether a dotted name is a module, class or symbol of gpuhub's (or of what it imports),
    read from its longest start that is one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        if any(resolves(owner, parts[cut:]) for owner in starts(parts[:cut])):
            return True
    return False


def test_the_page_names_only_files_and_folders_that_exist() -> None:
    gone = sorted(
        {
            name
            for name in page_names()
            if (FILE_NAME.fullmatch(name) or FOLDER_NAME.fullmatch(name))
            and not exists_in_repository(name)
        }
    )
    assert not gone, (
        f"docs/architecture.md names files or folders the repository lacks: {gone}; name "
        "what exists (a moved file by its new path), or drop the mention"
    )


def test_the_page_names_only_modules_and_symbols_that_exist() -> None:
    gone = sorted(
        {
            name
            for name in page_names()
            if CODE_NAME.fullmatch(name)
            and not FILE_NAME.fullmatch(name)
            and name not in NOT_CODE
            and not names_code_that_exists(name)
        }
    )
    assert not gone, (
        f"docs/architecture.md names modules or symbols gpuhub lacks: {gone}; name what exists "
        "(`module.symbol` or `Class.attribute`), or, for a configuration key or Kubernetes "
        "field, add it to NOT_CODE in tests/test_architecture.py"
    )


def package_folders_of_the_repository() -> list[str]:
    return sorted(
        {
            str(init.parent.relative_to(REPO)) + "/"
            for root in PACKAGE_ROOTS
            for init in (REPO / root).rglob("__init__.py")
            if "__pycache__" not in init.parts
        }
    )


def test_the_page_lists_every_package_folder() -> None:
    named = {name for name in page_names() if FOLDER_NAME.fullmatch(name)}
    missing = [folder for folder in package_folders_of_the_repository() if folder not in named]
    assert not missing, (
        f"docs/architecture.md does not list the package folders {missing}: add each, as "
        '`<folder>/` with what runs there, to the "Layers" tables (gpuhub\'s folders to the '
        "layer table and to .importlinter)"
    )


@pytest.mark.parametrize(
    ("name", "exists"),
    [
        ("jobs.model.new_job_id", True),
        ("monitor.GPUMonitor", True),
        ("GPUMonitor.budget_view", True),  # set in __init__
        ("gpuhub.kube", True),  # gpuhub 0.1's path, an alias
        ("JobRequest.parse", True),
        ("monitor.no_such_name", False),
        ("GPUMonitor.no_such_attribute", False),
        ("no_such_module.GPUMonitor", False),
        ("gpuhub.no_such_module", False),
    ],
)
def test_the_check_tells_code_that_exists_from_names_that_do_not(name: str, exists: bool) -> None:
    assert names_code_that_exists(name) is exists
