"""Every gpuhub handler of the user's server asks Jupyter's authorizer, as Jupyter's own do
(issue 31, item 5): with an authorizer that lets a user read and nothing more, they see their
GPUs, jobs and reclaim clock, and can neither submit nor cancel a job nor keep their GPUs, as
they cannot write a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.jupyter.server import JupyterServer, jupyter_server
from tests.support.jupyter.notebooks import write_notebook
from tests.support.jupyter.read_only import DOTTED

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def read_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    tmp: Path = tmp_path_factory.mktemp("read-only")
    root = tmp / "home"
    write_notebook(root / "train.ipynb", "print('trained')")
    config = f"c.ServerApp.authorizer_class = {DOTTED!r}\n"
    with jupyter_server(root, tmp, env={"CUDA_VISIBLE_DEVICES": "0"}, config=config) as server:
        yield server


def test_a_reader_reads_gpuhub_and_changes_nothing(read_only: JupyterServer) -> None:
    # Jupyter's own handlers: reading yes, writing no.
    assert read_only.api("GET", "api/contents").status_code == 200
    assert read_only.api("POST", "api/contents", json={"type": "file"}).status_code == 403
    # gpuhub's: the same.
    for path in ("gpuhub/api/holdings", "gpuhub/api/reclaim", "gpuhub/api/jobs"):
        answer = read_only.api("GET", path)
        assert answer.status_code == 200, (path, answer.status_code, answer.text)
    submit = read_only.api("POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb"})
    assert submit.status_code == 403, submit.text
    assert submit.json()["message"] == "This Jupyter server does not let you write gpuhub's jobs."
    assert read_only.api("GET", "gpuhub/api/jobs").json()["jobs"] == []
    assert read_only.api("DELETE", "gpuhub/api/jobs/some-job").status_code == 403
    assert read_only.api("POST", "gpuhub/api/reclaim/keep").status_code == 403
