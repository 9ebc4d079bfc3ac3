"""A CPU-only server with a used-up GPU-hour budget, in a real JupyterLab (Chromium), issue 39
item 14: the GPU sidebar's advice never contradicts its budget card. The card says GPU servers
are refused until the budget resets; the hint under "No GPU on this server" says the same,
not "start it again with a GPU type selected".

Real JupyterHub, LocalGPUSpawner on 2 simulated GPUs, a budget of 0.0003 GPU-hours (about a
second) spent by a first server with a GPU, which the hub stops; then a CPU-only server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.hub.process import ROOT, Hub, spawn, start_hub, wait_ready
from harness.jupyter.server import SOURCE_PATHS, expose_lab_extension
from tests.support.browser.chromium import artifact, chromium
from tests.support.wait import until

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

TIMEOUT = 150_000  # ms: JupyterLab's first load on a busy 2-core machine


def config(workdir: Path) -> str:
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
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.LocalGPUSpawner.gpu_hours = {{
    "default": {{"hours": 0.0003, "per": "week"}}, "at_limit": "refuse", "grace": 1,
}}
c.Spawner.environment = {environment!r}
c.Spawner.default_url = "/lab"
from gpuhub.hub.web.api import configure_hub
configure_hub(c)
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("cpu-only-advice")
    running = start_hub(workdir, config(workdir))
    try:
        running.login("ann")  # the hub knows her from her first login
        yield running
    finally:
        running.api("DELETE", "/users/ann/server")
        running.stop()


def test_a_cpu_only_server_is_not_told_to_start_with_a_gpu_the_hub_refuses(hub: Hub) -> None:
    assert spawn(hub, "ann", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "ann")
    # The budget runs out within seconds; after the grace the hub stops the server.
    until("ann's GPU server stopped by her budget", lambda: not hub.user_model("ann")["servers"])
    refused = spawn(hub, "ann", {"gpus": 1})
    assert refused.status_code == 403, refused.text
    assert spawn(hub, "ann", {"gpus": 0}).status_code in (201, 202)
    wait_ready(hub, "ann")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "ann")
        page.goto(f"{hub.url}/user/ann/lab")
        page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=TIMEOUT)
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        panel = page.locator("#gpuhub-gpu-panel")
        panel.get_by_text("No GPU on this server").wait_for(timeout=60_000)
        card = panel.locator(".gpuhub-Budget-limit")
        card.wait_for(timeout=60_000)
        assert card.inner_text().startswith("New GPU servers and jobs are refused until it resets")
        hint = panel.locator(".gpuhub-GpuPanel-emptyHint")
        page.wait_for_function(
            "() => document.querySelector('.gpuhub-GpuPanel-emptyHint')?.textContent"
            ".startsWith('GPU servers and jobs are refused until your GPU-hour budget resets')",
            timeout=60_000,
        )
        assert "start it again with a GPU" not in hint.inner_text()
        page.screenshot(path=str(artifact("cpu-only-advice.png")))
