"""docs/architecture.md's layer table is the folder list of ``gpuhub``, and the import contracts
(.importlinter) read the same layers in the same order."""

from __future__ import annotations

import configparser
import re

from tests.support.paths import REPO

PACKAGE = REPO / "spawner" / "gpuhub"
FOLDER = re.compile(r"`spawner/gpuhub/([a-z0-9_/]+)/`")


def documented_folders() -> list[str]:
    """The folders of the layer table, top first, as package paths (``hub.web``)."""
    text = (REPO / "docs" / "architecture.md").read_text()
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
