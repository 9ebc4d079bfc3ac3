"""One precision for GPU-hours on every screen: the hub's sentences and REST answers
(gpuhub.core.budgets.hours_words, lasts_words), the fleet page's macro, the spawn form's
script and the lab (labextension/src/gpu/budgets.ts, its jest test) all write the figures of
one table, labextension/src/__tests__/gpu/gpu-hours.json."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess

import pytest

from gpuhub.core.budgets import hours_words, lasts_words
from harness.paths import REPO
from tests.support.hub.templates import hub_templates

TABLE = json.loads((REPO / "labextension/src/__tests__/gpu/gpu-hours.json").read_text())
FORM = REPO / "spawner/gpuhub/hub/web/templates/spawn_form.html"


@pytest.mark.parametrize(("value", "text"), TABLE["hours"])
def test_the_hub_writes_gpu_hours_by_the_table(value: float, text: str) -> None:
    assert hours_words(value) == text


@pytest.mark.parametrize(("value", "text"), TABLE["lasts"])
def test_the_hub_says_how_long_hours_last_by_the_table(value: float, text: str) -> None:
    assert lasts_words(value) == text


def test_the_fleet_page_writes_gpu_hours_by_the_table() -> None:
    macro = hub_templates().from_string(
        '{% from "gpuhub_fleet_hours.html" import gpu_hours %}{{ gpu_hours(value) }}'
    )

    async def written() -> list[str]:
        return [await macro.render_async(value=value) for value, _ in TABLE["hours"]]

    assert asyncio.run(written()) == [f"{text} GPU-h" for _, text in TABLE["hours"]]


def test_the_spawn_forms_script_writes_gpu_hours_by_the_table() -> None:
    """The form's own functions, run by Node as the browser would run them."""
    node = shutil.which("node")
    assert node is not None, "Node runs the lab's build; it is needed here too"
    script = FORM.read_text()
    functions = [
        re.search(rf"  function {name}\(value\) \{{\n.*?\n  \}}\n", script, re.S)
        for name in ("hours", "lasts")
    ]
    assert all(functions), "the form's hours() and lasts() were not found"
    source = "".join(f.group(0) for f in functions if f) + (
        f"const t = {json.dumps(TABLE)};\n"
        "console.log(JSON.stringify([t.hours.map(([v]) => hours(v)),"
        " t.lasts.map(([v]) => lasts(v))]));\n"
    )
    done = subprocess.run([node, "-e", source], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hours, lasts = json.loads(done.stdout)
    assert hours == [text for _, text in TABLE["hours"]]
    assert lasts == [text for _, text in TABLE["lasts"]]
