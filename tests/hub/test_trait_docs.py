"""The README's trait table and the traits' own ``help=`` text tell the same story."""

from __future__ import annotations

import re

from gpuhub.hub.gpu_spawner import GPUSpawner
from gpuhub.hub.local_gpu_spawner import LocalGPUSpawner
from gpuhub.hub.spawner_mixin import GPUSpawnerMixin
from harness.paths import REPO

README = REPO / "README.md"


def readme_rows() -> dict[str, str]:
    """``{trait: its row}`` of the README's table (a row may name several traits)."""
    text = README.read_text()
    table = text.split("| trait | what it sets |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines():
        first = line.split("|")[1] if line.count("|") >= 3 else ""
        for name in re.findall(r"`([A-Za-z_.]+)`", first):
            rows[name] = line
    return rows


def test_every_admin_trait_is_in_the_readme_and_nothing_else() -> None:
    # The mixin's own and the policy's (gpuhub.core.policy_traits): what both spawners share.
    shared = set(GPUSpawnerMixin.class_traits(config=True))
    local = {
        f"LocalGPUSpawner.{name}"
        for name in LocalGPUSpawner.class_own_traits(config=True)
        if name != "home_dir_template"  # documented inside run_as_hub_user's row
    }
    kube = {f"GPUSpawner.{name}" for name in GPUSpawner.class_own_traits(config=True)}
    named = set(readme_rows())
    assert shared | local <= named, "traits missing from the README's table"
    assert named <= shared | local | kube, "the README's table names traits that do not exist"


def test_readme_and_help_agree_on_defaults_and_rules() -> None:
    rows = readme_rows()
    help_of = {n: t.help for n, t in GPUSpawnerMixin.class_traits(config=True).items()}
    # The default image: an explicit "default": True wins, else the first.
    assert '"default": True' in rows["images"] and '"default": True' in help_of["images"]
    # Group limits: one group must allow the whole request; custom images need the flag.
    for text in (rows["group_limits"], help_of["group_limits"]):
        assert "one of the user's groups allows all of it together" in " ".join(
            text.replace("*", "").split()
        )
        assert "custom_images" in text
    # The quota: None by default, the largest among the user's groups.
    for text in (rows["gpu_quota"], help_of["gpu_quota"]):
        assert "None" in text and "largest among" in " ".join(text.split())
    assert GPUSpawner.class_traits()["gpu_quota"].default() == {}
