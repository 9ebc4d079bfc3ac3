"""Where a job's files go, for every backend: ``<notebook dir>/gpuhub-runs/<id>/<id>.ipynb``.

The local backend writes there on this server, a cluster job with a shared home volume
writes there in its pod, and without one the user's server fetches the executed notebook
to the same place, so "open result" finds it whichever way the job ran.

A notebook that is itself inside a ``gpuhub-runs`` folder (``%%train`` writes its notebooks
to ``gpuhub-runs/train/``) has its runs in that folder, not in a ``gpuhub-runs`` of its own:
no runs in runs.
"""

from __future__ import annotations

from pathlib import PurePath, PurePosixPath
from typing import TypeVar

from gpuhub.jobs.model import output_name

RUNS_DIR = "gpuhub-runs"
#: Where ``%%train`` writes the notebooks it makes of a cell, relative to the notebook's folder.
TRAIN_DIR = f"{RUNS_DIR}/train"

_Path = TypeVar("_Path", bound=PurePath)


def run_dir(notebook_dir: _Path, job_id: str, root: _Path) -> _Path:
    """The folder of job ``job_id`` of a notebook in ``notebook_dir``, below ``root``: both
    absolute (on disk), or both relative (``root`` is ``PurePosixPath(".")``)."""
    runs = notebook_dir / RUNS_DIR
    for folder in (notebook_dir, *notebook_dir.parents):
        if folder == root or root not in folder.parents:
            break
        if folder.name == RUNS_DIR:
            runs = folder
            break
    return runs / job_id


def output_path(notebook: str, job_id: str) -> str:
    """Where the executed notebook of ``notebook`` (a path relative to the user's root, as
    the contents API spells it) goes, relative to the same root, "/"-separated."""
    folder = run_dir(PurePosixPath(notebook).parent, job_id, PurePosixPath("."))
    return str(folder / output_name(job_id))
