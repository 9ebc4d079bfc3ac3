"""Where a job's executed notebook goes (gpuhub.jobs.paths): one rule for the local backend,
the cluster's pods on a shared home, and the outputs a user's server fetches."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from gpuhub.jobs.paths import RUNS_DIR, TRAIN_DIR, output_path, run_dir


@pytest.mark.parametrize(
    ("notebook", "output"),
    [
        ("train.ipynb", "gpuhub-runs/j-1/j-1.ipynb"),
        ("exp/train.ipynb", "exp/gpuhub-runs/j-1/j-1.ipynb"),
        # %%train's notebooks: runs go to the enclosing gpuhub-runs, no runs in runs.
        (f"{TRAIN_DIR}/demo.ipynb", "gpuhub-runs/j-1/j-1.ipynb"),
        (f"exp/{TRAIN_DIR}/demo.ipynb", "exp/gpuhub-runs/j-1/j-1.ipynb"),
    ],
)
def test_output_path(notebook: str, output: str) -> None:
    assert output_path(notebook, "j-1") == output


def test_on_disk_and_relative_agree(tmp_path: Path) -> None:
    for notebook in ("a.ipynb", "x/y/a.ipynb", f"x/{TRAIN_DIR}/a.ipynb"):
        on_disk = run_dir((tmp_path / notebook).parent, "j-1", tmp_path)
        relative = run_dir(PurePosixPath(notebook).parent, "j-1", PurePosixPath("."))
        assert on_disk == tmp_path / str(relative)
        assert output_path(notebook, "j-1") == f"{relative}/j-1.ipynb"


def test_a_runs_folder_above_the_root_does_not_count(tmp_path: Path) -> None:
    root = tmp_path / RUNS_DIR / "home"
    assert run_dir(root / "exp", "j", root) == root / "exp" / RUNS_DIR / "j"
    assert run_dir(root, "j", root) == root / RUNS_DIR / "j"
