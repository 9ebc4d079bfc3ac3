"""The jobs dialog says what %submit says (issue 39, item 10): parameters given for a
notebook without a cell tagged "parameters" are not applied, in a warning that stays until
closed. A real jupyter server with JupyterLab and the built extension, in Debian's Chromium;
the job runs with the local backend.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.jupyter.server import TOKEN, JupyterServer, expose_lab_extension, jupyter_server
from tests.support.browser.chromium import artifact, chromium
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.browser

TIMEOUT = 120_000


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    tmp = tmp_path_factory.mktemp("submit-parameters-browser")
    root = tmp / "home"
    write_notebook(root / "plain.ipynb", "lr = 0.1\nprint('lr', lr)")
    expose_lab_extension(tmp)
    with jupyter_server(root, tmp, lab=True, env={"CUDA_VISIBLE_DEVICES": ""}) as server:
        yield server


def test_the_dialog_warns_of_parameters_it_could_not_apply(lab: JupyterServer) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        page.set_default_timeout(60_000)
        try:
            page.goto(f"{lab.url}lab/workspaces/params/tree/plain.ipynb?token={TOKEN}")
            page.locator(
                '.jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator[data-status="idle"]'
            ).wait_for(timeout=TIMEOUT)
            button = '.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]'
            page.locator(button).click()
            dialog = page.locator(".gpuhub-JobDialog")
            dialog.wait_for(state="visible")
            form = dialog.locator(".gpuhub-JobForm")
            form.get_by_role("button", name="Add parameter").click()
            form.get_by_label("Parameter name").last.fill("lr")
            form.get_by_label("Value of lr").fill("2")
            dialog.get_by_role("button", name="Submit job").click()
            toast = page.locator(".Toastify__toast", has_text='has no cell tagged "parameters"')
            toast.wait_for(timeout=TIMEOUT)
            assert "so the parameter lr would not replace the notebook's own values" in (
                toast.inner_text()
            )
            page.screenshot(path=str(artifact("submit-parameters-warning.png")))
            [job] = lab.api("GET", "gpuhub/api/jobs").json()["jobs"]
            assert job["parameters"] == {}, job
        except BaseException:
            page.screenshot(path=str(artifact("submit-parameters-failure.png")))
            raise
        finally:
            page.close()
