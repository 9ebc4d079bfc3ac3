"""`npm ci` on the Node the project supports says nothing about engines.

The README asks for Node 20+, and the machines run Node 20: every package in
package-lock.json must accept it, or `npm ci` (`make install`, `make demo`) prints npm's
EBADENGINE warnings, which a newcomer reads as a broken install.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from harness.paths import REPO

CHECK = """
const semver = require(process.argv[1] + '/node_modules/semver');
const lock = require(process.argv[1] + '/package-lock.json');
const bad = [];
for (const [path, pkg] of Object.entries(lock.packages)) {
  const range = pkg.engines && pkg.engines.node;
  if (range && !semver.satisfies(process.argv[2], range)) {
    bad.push(`${path || 'gpuhub'} ${pkg.version || ''} wants node ${range}`);
  }
}
console.log(JSON.stringify(bad));
"""


@pytest.mark.parametrize("node", ["20.0.0", "20.19.0"])
def test_every_locked_package_runs_on_node_20(node: str) -> None:
    if shutil.which("node") is None or not (REPO / "node_modules" / "semver").is_dir():
        pytest.skip("needs node and `npm ci`")
    result = subprocess.run(
        ["node", "-e", CHECK, str(REPO), node], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == [], f"EBADENGINE on Node {node}: {result.stdout}"
