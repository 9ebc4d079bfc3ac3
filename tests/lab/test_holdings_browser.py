"""What a user holds, in the browser: the spawn form's quota line and the lab's GPU sidebar.

A real JupyterHub with LocalGPUSpawner (simulated GPUs), the hub's ledger endpoints and a
quota; alice's lab, in Chromium, lists her servers holding GPUs against her quota.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from harness.hub.process import Hub, start_hub
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import LOCAL_HUB_CONFIG as CONFIG

pytestmark = pytest.mark.browser

HOLDINGS = (
    CONFIG
    + """
from gpuhub.hub.web.api import configure_hub
configure_hub(c)
c.JupyterHub.allow_named_servers = True
c.LocalGPUSpawner.gpu_quota = {"default": 1, "groups": {"staff": 3}}
"""
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("holdings-browser"), HOLDINGS)
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/servers/second")
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


def test_the_form_and_the_sidebar_say_what_you_hold(hub: Hub) -> None:
    second = hub.api("POST", "/users/alice/servers/second", data=json.dumps({"gpus": 1}))
    assert second.status_code in (201, 202), second.text
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 850})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "alice")
        page.goto(f"{hub.url}/hub/spawn")
        quota = page.locator("#gpuhub-quota")
        quota.wait_for(timeout=30_000)
        assert "You hold 1 of your 3 GPUs (server 'second': 1)" in quota.inner_text()
        assert "may have up to 2" in quota.inner_text()
        page.fill("#gpuhub-gpus", "2")
        page.click("button[type=submit]")
        page.wait_for_url("**/user/alice/lab**", timeout=90_000)
        page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=90_000)
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        section = page.locator(".gpuhub-Holdings")
        section.get_by_text("You hold 3 of your 3 GPUs.").wait_for(timeout=60_000)
        items = section.locator(".gpuhub-Holdings-item")
        assert items.count() == 2
        text = section.inner_text()
        assert "Server 'default'" in text and "Server 'second'" in text
        page.wait_for_timeout(300)
        page.screenshot(path=str(artifact("gpu-panel-holdings.png")), full_page=True)
