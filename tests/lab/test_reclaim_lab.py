"""The reclaim warning in a real JupyterLab (Chromium): the time left, "Keep my GPUs", and
the idle clock in the GPU sidebar.

Everything is real: JupyterHub, its proxy, a LocalGPUSpawner server running JupyterLab with
gpuhub's extension, the hub's monitor and idle clocks. The GPUs are the stand-ins of
tests/support/hub/standin_gpus.py, whose utilization the test writes: idle from the start (warned
after 2 s, stopped 14 minutes later unless kept), busy once kept.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.hub.process import ROOT, Hub, spawn, start_hub, wait_ready
from harness.jupyter.server import SOURCE_PATHS, expose_lab_extension
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.standin_gpus import write as set_utilization

pytestmark = pytest.mark.browser

TIMEOUT = 120_000


def config(workdir: Path) -> str:
    """A hub whose servers run JupyterLab with the built extension (as the wheel installs it)."""
    expose_lab_extension(workdir)
    extensions = {"gpuhub_lab": True, "jupyterlab": True, "jupyter_lsp": False}
    (workdir / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": extensions}})
    )
    environment = {
        "JUPYTER_CONFIG_DIR": str(workdir / "config"),
        "JUPYTER_DATA_DIR": str(workdir / "data"),
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        # In a virtualenv Jupyter prefers the env's copy of the extension (installed by
        # `pip install -e .`, possibly older) over the fresh build linked in the data dir.
        "JUPYTER_PREFER_ENV_PATH": "0",
        "PYTHONPATH": ":".join(SOURCE_PATHS),
    }
    return f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.home_dir_template = {str(workdir / "users" / "{username}")!r}
c.LocalGPUSpawner.gpu_devices = [0, 1]
c.LocalGPUSpawner.default_limits = {{"max_gpus": 1}}
c.LocalGPUSpawner.gpu_idle_reclaim = {{
    "after": 2, "utilization_below": 0.05, "warn": 840, "max_postpones": 1,
}}
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_utilization_source = "tests.support.hub.standin_gpus.FileUtilization"
c.Spawner.environment = {environment!r}
c.Spawner.default_url = "/lab"
from gpuhub.hub.web.api import configure_hub
configure_hub(c)
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("reclaim-lab")
    set_utilization(workdir, {0: 0.0, 1: 0.0})
    running = start_hub(workdir, config(workdir))
    try:
        running.login("ann")  # creates the user
        answer = spawn(running, "ann", {"gpus": 1})
        assert answer.status_code in (201, 202), answer.text
        wait_ready(running, "ann")
        yield running
    finally:
        running.api("DELETE", "/users/ann/server")
        running.stop()


def clock(hub: Hub) -> dict[str, Any]:
    answer = hub.api("GET", "/gpuhub/reclaim/ann")
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["servers"].get("") or {})


def test_warning_keep_and_idle_clock(hub: Hub) -> None:
    scheme = "light"  # JupyterLab keeps its own theme setting, not the browser's scheme
    deadline = time.monotonic() + 60
    while not clock(hub).get("warned"):
        assert time.monotonic() < deadline, hub.log()[-3000:]
        time.sleep(0.3)
    with chromium() as browser:
        page = browser.new_page(  # type: ignore[attr-defined]
            viewport={"width": 1280, "height": 900}
        )
        page.set_default_timeout(60_000)
        try:
            hub.log_in_browser(page, "ann")
            page.goto(f"{hub.url}/user/ann/lab/workspaces/reclaim-{scheme}")
            toast = page.locator(".Toastify__toast", has_text="Your GPUs have been idle")
            toast.wait_for(timeout=TIMEOUT)
            assert re.search(r"stops in 1[34] min", toast.inner_text()), toast.inner_text()
            assert "your files are safe" in toast.inner_text()
            # The sidebar shows the same clock.
            page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
            idle = page.locator(".gpuhub-GpuPanel-idleClock")
            idle.wait_for(state="visible")
            assert re.search(r"stops in 1[34] min unless you keep them", idle.inner_text())
            page.screenshot(path=str(artifact(f"reclaim-warning-{scheme}.png")))
            toast.get_by_role("button", name="Keep my GPUs").click()
            page.locator(".Toastify__toast", has_text="This was the last time").wait_for()
            # The hub restarted the clock with the one keep this hub allows.
            kept = clock(hub)
            assert not kept["warned"] and kept["postpones"] == 1 and kept["postpones_left"] == 0
            set_utilization(hub.workdir, {0: 0.6, 1: 0.6})  # ann works again
            toast.wait_for(state="detached")
            page.wait_for_function(
                "document.querySelector('.gpuhub-GpuPanel-idleClock').textContent"
                ".startsWith('GPUs busy')"
            )
            page.screenshot(path=str(artifact(f"reclaim-kept-{scheme}.png")))
        except BaseException:
            page.screenshot(path=str(artifact(f"reclaim-failure-{scheme}.png")))
            raise
        finally:
            page.close()
    assert hub.user_model("ann")["servers"][""]["ready"]
