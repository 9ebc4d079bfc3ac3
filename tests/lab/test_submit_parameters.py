"""``%submit -p`` and ``POST /gpuhub/api/jobs`` with parameters on a notebook without a cell
tagged "parameters" (issue 39, item 10): the user is warned, the job runs without them, and
its record lists none; with the cell, they are applied and recorded. A real Jupyter server,
IPython kernel and papermill.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from jupyter_client import BlockingKernelClient

from gpuhub.jobs.parameters_cell import has_parameters_cell
from harness.jupyter.server import JupyterServer, jupyter_server
from tests.support.jupyter.kernel import ready_kernel_client, run
from tests.support.jupyter.notebooks import read_outputs, write_notebook

pytestmark = pytest.mark.e2e

WARNING = (
    'exp/plain.ipynb has no cell tagged "parameters", so the parameter lr would not replace '
    "the notebook's own values: the job runs without them."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    tmp = tmp_path_factory.mktemp("submit-parameters")
    root = tmp / "home"
    write_notebook(root / "exp" / "plain.ipynb", "lr = 0.1\nprint('lr', lr)")
    write_notebook(root / "exp" / "tagged.ipynb", "print('lr', lr)", parameters="lr = 0.1")
    with jupyter_server(root, tmp) as server:
        yield server


@pytest.fixture(scope="module")
def kernel(server: JupyterServer) -> Iterator[BlockingKernelClient]:
    session = server.api(
        "POST",
        "api/sessions",
        json={"path": "exp/plain.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    ).json()
    client = ready_kernel_client(server.runtime_dir / f"kernel-{session['kernel']['id']}.json")
    loaded = run(client, "%load_ext gpuhub_lab")
    assert loaded.error is None, loaded
    yield client
    client.stop_channels()
    server.api("DELETE", f"api/sessions/{session['id']}")


def test_submit_warns_and_records_no_parameter_it_could_not_apply(
    server: JupyterServer, kernel: BlockingKernelClient
) -> None:
    out = run(kernel, "%submit exp/plain.ipynb -p lr=0.25 --wait")
    assert out.error is None, out
    assert f"Warning: {WARNING}" in out.stderr, out
    ident = re.search(r"Submitted (\S+) ", out.stdout)
    assert ident, out
    job = server.api("GET", f"gpuhub/api/jobs/{ident.group(1)}").json()
    assert job["status"] == "succeeded" and job["parameters"] == {}, job
    assert "lr 0.1" in read_outputs(server.root / job["output"])  # what really ran


def test_the_rest_api_says_it_too_and_applies_them_where_a_cell_is_tagged(
    server: JupyterServer,
) -> None:
    plain = server.api(
        "POST", "gpuhub/api/jobs", json={"notebook": "exp/plain.ipynb", "parameters": {"lr": 2}}
    )
    assert plain.status_code == 201 and plain.json()["warning"] == WARNING + (
        ' Tag the cell that sets them "parameters" (in the cell\'s property inspector), save, '
        "and submit again."
    ), plain.text
    assert plain.json()["job"]["parameters"] == {}
    tagged = server.api(
        "POST", "gpuhub/api/jobs", json={"notebook": "exp/tagged.ipynb", "parameters": {"lr": 2}}
    )
    assert tagged.status_code == 201 and "warning" not in tagged.json(), tagged.text
    assert tagged.json()["job"]["parameters"] == {"lr": 2}
    for answer in (plain, tagged):
        server.api("DELETE", f"gpuhub/api/jobs/{answer.json()['id']}")


def test_only_a_code_cell_tagged_parameters_counts() -> None:
    def cell(kind: str, tags: object) -> dict[str, object]:
        return {"cell_type": kind, "metadata": {"tags": tags}, "source": ""}

    assert has_parameters_cell({"cells": [cell("code", ["x", "parameters"])]})
    assert not has_parameters_cell({"cells": [cell("markdown", ["parameters"])]})
    assert not has_parameters_cell({"cells": [cell("code", "parameters")]})
    assert not has_parameters_cell({"cells": "nope"}) and not has_parameters_cell([])
