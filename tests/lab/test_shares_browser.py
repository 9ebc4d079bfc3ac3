"""Shares of one GPU between users, in the browser (issue 24): a real JupyterHub with
LocalGPUSpawner (simulated GPUs) and a type shared by memory. bob holds 8 GB of GPU 0 through
the REST API; alice's form says what is left on that GPU, she asks for 4 GB of it, and her
lab's GPU sidebar says her share and what she holds, in the hub's words."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from harness.hub.process import Hub, start_hub
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import LOCAL_HUB_CONFIG, server_env

pytestmark = pytest.mark.browser

CONFIG = (
    LOCAL_HUB_CONFIG
    + """
from gpuhub.hub.web.api import configure_hub
configure_hub(c)
c.LocalGPUSpawner.gpu_types = {
    "shared": {
        "display_name": "Simulated GPU, shared",
        "devices": [0],
        "sharing": {"memory": "16G", "min": "1G", "default": "2G"},
    },
}
c.LocalGPUSpawner.default_limits = {"max_gpus": 1}
c.LocalGPUSpawner.gpu_quota = {"default": 1}
"""
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("shares-browser"), CONFIG)
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.api("DELETE", "/users/bob/server")
        hub.stop()


def test_two_users_share_one_gpu_and_the_form_and_sidebar_say_their_shares(hub: Hub) -> None:
    bob = hub.api(
        "POST",
        "/users/bob/server",
        data=json.dumps({"gpus": 1, "gpu_type": "shared", "gpu_memory": "8G"}),
    )
    assert bob.status_code in (201, 202), bob.text
    hub.wait_for_server("bob")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 900})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "alice")
        page.goto(f"{hub.url}/hub/spawn")
        free = page.locator(".gpuhub-share-free")
        free.wait_for(timeout=30_000)
        assert "8 GB of 16 GB free on GPU 0" in free.inner_text()
        page.fill("#gpuhub-gpus", "1")
        page.fill("#gpuhub-gpu-memory", "4G")
        page.screenshot(path=str(artifact("shares-form.png")), full_page=True)
        page.click("button[type=submit]")
        page.wait_for_url("**/user/alice/lab**", timeout=90_000)
        page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=90_000)
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        panel = page.locator("#gpuhub-gpu-panel")
        panel.get_by_text("Your share: 4 GB of GPU 0 (Simulated GPU, shared)").first.wait_for(
            timeout=60_000
        )
        holdings = page.locator(".gpuhub-Holdings")
        holdings.get_by_text("You hold 0.25 of your 1 GPU.").wait_for(timeout=60_000)
        assert "4 GB of GPU 0 (Simulated GPU, shared), 0.25 GPU" in holdings.inner_text()
        # No driver here: the status bar says a share was assigned, not a whole GPU.
        page.get_by_text("GPU share assigned · no live figures").wait_for(timeout=30_000)
        page.screenshot(path=str(artifact("shares-sidebar.png")), full_page=True)

    env = server_env(hub, "alice")
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["GPUHUB_GPU_SHARE"] == "1/4"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3815M"  # 4 GB in MiB, rounded up
