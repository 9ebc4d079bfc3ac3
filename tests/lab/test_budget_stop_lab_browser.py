"""A budget's stop in a real JupyterLab (Chromium), issue 39 item 8: the lab counts down to
the stop the hub has scheduled (the holding's ``stops_at``), saves the open notebook's
changes before it, and its stopped dialog says truthfully what was saved and which changes
were lost.

Everything is real: JupyterHub with its proxy and monitor, a LocalGPUSpawner server running
JupyterLab with gpuhub's built extension, a GPU-hour budget of 0.01 hours (36 GPU-seconds)
and a grace of 45 s, so the stop comes about 80 s after the server got its GPU.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.hub.process import ROOT, Hub, spawn, start_hub, wait_ready
from harness.jupyter.server import SOURCE_PATHS, expose_lab_extension
from tests.support.browser.chromium import artifact, chromium
from tests.support.jupyter.notebooks import write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

TIMEOUT = 150_000


def config(workdir: Path) -> str:
    """A hub whose servers run JupyterLab with the built extension, and a small budget."""
    expose_lab_extension(workdir)
    extensions = {"gpuhub_lab": True, "jupyterlab": True, "jupyter_lsp": False}
    (workdir / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": extensions}})
    )
    environment = {
        "JUPYTER_CONFIG_DIR": str(workdir / "config"),
        "JUPYTER_DATA_DIR": str(workdir / "data"),
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        "JUPYTER_PREFER_ENV_PATH": "0",
        "PYTHONPATH": ":".join(SOURCE_PATHS),
    }
    return f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.home_dir_template = {str(workdir / "users" / "{username}")!r}
c.LocalGPUSpawner.gpu_devices = "simulated:2"
c.LocalGPUSpawner.default_limits = {{"max_gpus": 1}}
c.LocalGPUSpawner.gpu_monitor_interval = 1
c.LocalGPUSpawner.gpu_hours = {{
    "default": {{"hours": 0.01, "per": "day"}}, "at_limit": "refuse", "grace": 45,
}}
c.Spawner.environment = {environment!r}
c.Spawner.default_url = "/lab"
from gpuhub.hub.web.api import configure_hub
configure_hub(c)
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("budget-stop-lab")
    write_notebook(workdir / "users" / "ann" / "work.ipynb", "# my analysis")
    running = start_hub(workdir, config(workdir))
    try:
        running.login("ann")
        yield running
    finally:
        running.api("DELETE", "/users/ann/server")
        running.stop()


def saved_sources(hub: Hub) -> str:
    """The code of ann's work.ipynb as saved on disk."""
    notebook = json.loads((hub.workdir / "users" / "ann" / "work.ipynb").read_text())
    return "\n".join(
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in notebook["cells"]
    )


def type_in_first_code_cell(page: Any, text: str) -> None:
    editor = page.locator(".jp-NotebookPanel:visible .jp-CodeCell .cm-content").first
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def test_the_lab_counts_down_saves_and_says_what_was_lost(hub: Hub) -> None:
    answer = spawn(hub, "ann", {"gpus": 1})
    assert answer.status_code in (201, 202), answer.text
    wait_ready(hub, "ann", timeout=120)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        page.set_default_timeout(60_000)
        try:
            hub.log_in_browser(page, "ann")
            page.goto(f"{hub.url}/user/ann/lab/workspaces/budget-stop/tree/work.ipynb")
            page.locator(".jp-NotebookPanel:visible .jp-CodeCell .cm-content").first.wait_for(
                timeout=TIMEOUT
            )
            type_in_first_code_cell(page, "\nx = 42")
            # The countdown, once the budget is used up and its grace runs.
            toast = page.locator(".Toastify__toast", has_text="This server stops in")
            toast.wait_for(timeout=TIMEOUT)
            assert "your GPU-hour budget is used up and its grace runs out" in toast.inner_text()
            page.screenshot(path=str(artifact("budget-stop-countdown.png")))
            [held] = hub.api("GET", "/gpuhub/holdings/ann").json()["holdings"]
            if time.time() < held["stops_at"] - 35:  # the lab saves 30 s before the stop
                # Not saved by anyone yet (on a loaded machine the toast may come later).
                assert "x = 42" not in saved_sources(hub)
            # Saved before the stop, without anyone pressing save.
            deadline = time.monotonic() + 90
            while "x = 42" not in saved_sources(hub):
                assert time.monotonic() < deadline, "work.ipynb was not saved before the stop"
                assert hub.user_model("ann")["servers"], "the server stopped before the save"
                time.sleep(0.25)
            assert hub.user_model("ann")["servers"][""]["ready"]
            # A change after the save is lost with the stop, and the dialog says so.
            type_in_first_code_cell(page, "\ny = 7")
            dialog = page.locator(".jp-Dialog", has_text="Your server was stopped")
            dialog.wait_for(timeout=TIMEOUT)
            text = dialog.inner_text()
            assert "used all 0.01 GPU-hours" in text, text
            assert "Saved just before the stop: work.ipynb." in text, text
            assert (
                "Unsaved changes to work.ipynb were not saved before the stop and are lost" in text
            ), text
            assert "No unsaved changes" not in text
            page.screenshot(path=str(artifact("budget-stop-dialog.png")))
            assert "x = 42" in saved_sources(hub) and "y = 7" not in saved_sources(hub)
        except BaseException:
            page.screenshot(path=str(artifact("budget-stop-failure.png")))
            raise
        finally:
            page.close()
