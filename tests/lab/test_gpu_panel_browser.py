"""The GPU sidebar in a real JupyterLab, driven by Playwright in Debian's Chromium.

* This machine has no GPU: the panel and the status bar say so, and why (real ``pynvml``).
* With the NVML stand-in: cards with live charts, a MIG slice, and the notebook that holds
  GPU memory, whose kernel the panel opens and shuts down.

Screenshots go to ``test-artifacts/`` (gpu-panel.png is the no-GPU state).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from harness import fake_nvml as fake
from harness.jupyter.server import TOKEN, JupyterServer, expose_lab_extension, jupyter_server
from harness.paths import REPO
from tests.support.browser.chromium import artifact, chromium
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.browser

TIMEOUT = 90_000  # ms; JupyterLab's first load on a busy 2-core machine
GIB = 2**30


def _lab(tmp: Path, env: dict[str, str] | None = None, config: str = "") -> Any:
    root = tmp / "home"
    write_notebook(root / "experiments" / "train.ipynb", "x = 1")
    expose_lab_extension(tmp)
    return jupyter_server(root, tmp, env=env, config=config, lab=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def open_lab(browser: Any, server: JupyterServer) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server.url}lab?token={TOKEN}")
    page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=TIMEOUT)
    return page


def open_panel_from_keyboard(page: Any) -> Any:
    """Command palette (keyboard only) -> "Show GPU Usage".

    The palette closes when it loses focus, which JupyterLab still settling after its first
    load (the launcher taking focus) may take at any moment until then; so the whole gesture
    (shortcut, typing, Enter) is repeated until the panel shows.
    """
    palette = page.locator(".lm-CommandPalette-input")
    command = page.locator(".lm-CommandPalette-item", has_text="Show GPU Usage")
    panel = page.locator("#gpuhub-gpu-panel")
    for _ in range(10):
        page.locator("body").press("Control+Shift+c")
        try:
            palette.wait_for(state="visible", timeout=2_000)
            palette.fill("Show GPU Usage")
            command.first.wait_for(state="visible", timeout=2_000)
            palette.press("Enter")
            panel.wait_for(state="visible", timeout=2_000)
            return panel
        except PlaywrightTimeoutError:
            page.wait_for_timeout(500)
    panel.wait_for(state="visible")
    return panel


def test_no_gpu_here_is_said_plainly_with_the_reason(browser: Any, tmp_path: Path) -> None:
    with _lab(tmp_path) as server:
        page = open_lab(browser, server)
        panel = open_panel_from_keyboard(page)
        empty = panel.locator(".gpuhub-GpuPanel-empty")
        empty.get_by_text("No GPU on this server").wait_for(timeout=30_000)
        reason = panel.locator(".gpuhub-GpuPanel-emptyReason").inner_text()
        assert "No NVIDIA driver on this server" in reason  # real pynvml, no driver here
        assert "NVIDIA GPU and driver" in panel.locator(".gpuhub-GpuPanel-emptyHint").inner_text()
        assert panel.locator(".gpuhub-GpuCard").count() == 0  # no empty charts
        status = page.locator(".gpuhub-GpuStatus")
        assert status.inner_text() == "No GPU"
        assert "No NVIDIA driver" in status.get_attribute("title")
        page.wait_for_timeout(300)
        page.screenshot(path=str(artifact("gpu-panel.png")))
        page.close()


def test_assigned_gpus_without_a_driver_are_shown_without_advice(
    browser: Any, tmp_path: Path
) -> None:
    """alice's server got GPUs 0 and 1 from the hub but its image has no driver."""
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "GPUHUB_GPUS": "2", "GPUHUB_GPU_TYPE": "a6000",
           "GPUHUB_GPU_TYPE_NAME": "NVIDIA RTX A6000"}  # fmt: skip  # as LocalGPUSpawner sets
    with _lab(tmp_path, env) as server:
        metrics = server.api("GET", "gpuhub/api/metrics").json()
        assert metrics["assigned"] == {
            "devices": [0, 1], "gpu_type": "NVIDIA RTX A6000", "simulated": False,
            "share": None, "gpu_memory": None, "share_text": None,  # whole GPUs, not a share
        }  # fmt: skip
        page = open_lab(browser, server)
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        panel = page.locator("#gpuhub-gpu-panel")
        title = panel.locator(".gpuhub-GpuPanel-emptyTitle")
        title.get_by_text("GPUs 0, 1 (NVIDIA RTX A6000) assigned").wait_for(timeout=30_000)
        text = panel.inner_text()
        assert "no live figures" in text and "no NVIDIA driver on this server" in text
        assert "No GPU" not in text and "again" not in text  # no advice to restart
        status = page.locator(".gpuhub-GpuStatus")
        assert status.inner_text() == "2 GPUs assigned · no live figures"
        assert status.get_attribute("title").startswith("GPUs 0, 1 (NVIDIA RTX A6000) assigned.")
        page.wait_for_timeout(300)
        page.screenshot(path=str(artifact("gpu-panel-assigned-no-driver.png")))
        page.close()


@pytest.fixture
def gpu_lab(tmp_path: Path) -> Iterator[tuple[JupyterServer, Path]]:
    scenario_path = tmp_path / "nvml.json"
    scenario_path.write_text(fake.a100s(1).to_json())
    env = {"PYTHONPATH": str(REPO), "GPUHUB_FAKE_NVML": str(scenario_path)}
    config = "c.GPUSampler.nvml_module = 'harness.fake_nvml'\nc.GPUSampler.interval = 0.5\n"
    with _lab(tmp_path, env, config) as server:
        yield server, scenario_path


def _kernel_pid(server: JupyterServer, kernel_id: str) -> int:
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if any(f"kernel-{kernel_id}.json" in part for part in child.cmdline()):
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no process for kernel {kernel_id}")


def test_gpus_charts_mig_and_the_notebook_holding_memory(
    browser: Any, gpu_lab: tuple[JupyterServer, Path]
) -> None:
    server, scenario_path = gpu_lab
    response = server.api(
        "POST",
        "api/sessions",
        json={
            "path": "experiments/train.ipynb",
            "name": "train.ipynb",
            "type": "notebook",
            "kernel": {"name": "python3"},
        },
    )
    assert response.status_code == 201, response.text
    kernel_id = response.json()["kernel"]["id"]
    kernel_pid = _kernel_pid(server, kernel_id)

    scenario = fake.a100s(2, utilization=63, memory_used=21 * GIB, temperature=58)
    scenario.gpus[0].power_mw = 231_000
    scenario.gpus[0].processes = [
        fake.FakeProcess(kernel_pid, 17 * GIB),
        fake.FakeProcess(4_000_000, 4 * GIB),  # no such pid here: someone else's process
    ]
    scenario.gpus[1].mig = [
        fake.FakeMig("MIG-3c9b1e4a-0001", "3g.40gb", 40 * GIB, 6 * GIB),
    ]
    scenario_path.write_text(scenario.to_json())

    page = open_lab(browser, server)
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
    panel = page.locator("#gpuhub-gpu-panel")
    panel.wait_for(state="visible")
    cards = panel.locator(".gpuhub-GpuCard")
    cards.nth(1).wait_for(timeout=30_000)
    assert cards.count() == 2
    first, mig = cards.nth(0), cards.nth(1)
    assert "GPU 0 · NVIDIA A100-SXM4-80GB" in first.locator(".gpuhub-GpuCard-title").inner_text()
    assert "63 %" in first.inner_text() and "58 °C · 231 W" in first.inner_text()
    assert mig.locator(".gpuhub-GpuCard-badge").is_visible()  # shown as MIG
    assert "MIG 3g.40gb" in mig.inner_text()
    mig_util = mig.locator(".gpuhub-GpuCard-value").first
    assert mig_util.inner_text() == "n/a"
    assert "no utilization for a MIG slice" in mig_util.get_attribute("title")
    holder = first.locator(".gpuhub-GpuCard-holder", has_text="train.ipynb")
    holder.wait_for(timeout=15_000)
    assert "17.0 GiB" in holder.inner_text()
    assert "Other process (pid 4000000)" in first.inner_text()
    # The charts fill up as samples arrive (a line path with several points).
    page.wait_for_function(
        """() => {
          const d = document.querySelector('#gpuhub-gpu-panel .gpuhub-Sparkline-util .gpuhub-Sparkline-line')?.getAttribute('d') || '';
          return (d.match(/L/g) || []).length >= 3;
        }""",
        timeout=30_000,
    )
    status = page.locator(".gpuhub-GpuStatus").inner_text()
    assert status.startswith("GPU \u00d72 63% · 27.0/")
    page.screenshot(path=str(artifact("gpu-panel-gpus.png")))

    # Dark theme: the panel follows JupyterLab's theme variables.
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel").get_by_text("JupyterLab Dark", exact=True).click()
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifact("gpu-panel-dark.png")))
    # Keyboard: the Open button is reachable and opens the notebook.
    open_button = holder.get_by_role("button", name="Open experiments/train.ipynb")
    open_button.focus()
    open_button.press("Enter")
    page.locator(".jp-NotebookPanel").first.wait_for(timeout=TIMEOUT)

    # Shut down, confirmed in a dialog: the kernel goes away on the server.
    holder.get_by_role("button", name="Shut down the kernel of train.ipynb").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Shut down").click()
    page.wait_for_function(
        "() => !document.querySelector('#gpuhub-gpu-panel')?.textContent.includes('train.ipynb')",
        timeout=30_000,
    )
    kernels = server.api("GET", "api/kernels").json()
    assert kernel_id not in {k["id"] for k in kernels}
    page.close()
