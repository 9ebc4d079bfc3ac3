"""The built lab extension: what JupyterLab loads, and the shipped-JS budget (< 250 KB gzip)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harness.paths import REPO

BUILT = REPO / "labextension" / "gpuhub_lab" / "labextension"
BUDGET_KB = 250


@pytest.fixture(scope="module")
def built() -> Path:
    if not (BUILT / "package.json").exists():
        pytest.fail("The lab extension is not built; `pip install -e .` or `npm run build:prod`.")
    return BUILT


def test_shipped_js_is_within_budget(built: Path):
    files = list((built / "static").glob("*.js"))
    assert files
    gz_kb = sum(len(gzip.compress(f.read_bytes(), 9)) for f in files) / 1024
    assert gz_kb < BUDGET_KB, f"{gz_kb:.1f} KB gzip"


def test_package_metadata_and_settings_schema_are_shipped(built: Path):
    meta = json.loads((built / "package.json").read_text())
    assert meta["name"] == "gpuhub"
    assert meta["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
    schema = json.loads((built / "schemas" / "gpuhub" / "gpu.json").read_text())
    interval = schema["properties"]["refreshInterval"]
    from gpuhub_lab.metrics.sampler import MIN_INTERVAL

    # Never poll faster than the server can sample (0.1 s; the stream pushes every sample).
    assert MIN_INTERVAL <= interval["minimum"] <= 1.0
