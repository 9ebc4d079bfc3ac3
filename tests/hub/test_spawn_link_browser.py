"""A spawn link followed from a page of a user's own server, in a real browser (issue 39).

Without ``subdomain_host`` alice's JupyterLab (``/user/alice/lab``) shares the hub's origin:
Chromium says a navigation from it is ``same-origin``. It is not one of the hub's own pages,
so a link there to ``/hub/spawn/alice/big?opt-gpus=1…`` (a notebook's output, a rendered
Markdown cell) starts nothing: the form asks, filled in, until alice presses Start. The same
link from the hub's home page starts the server at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.hub.process import Hub, spawn, start_hub, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import LOCAL_HUB_CONFIG

pytestmark = pytest.mark.browser

CONFIG = (
    LOCAL_HUB_CONFIG.replace(
        "c.LocalGPUSpawner.gpu_devices = [0, 1, 2]",
        'c.LocalGPUSpawner.gpu_devices = "simulated:3"',
    )
    + "\nc.JupyterHub.allow_named_servers = True\n"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    assert "simulated:3" in CONFIG
    hub = start_hub(tmp_path_factory.mktemp("spawn-link-browser"), CONFIG)
    try:
        yield hub
    finally:
        for path in ("/users/alice/server", "/users/alice/servers/big"):
            hub.api("DELETE", path)
        hub.stop()


def test_a_spawn_link_on_a_page_of_a_users_server_asks_before_it_starts(hub: Hub) -> None:
    assert spawn(hub, "alice", {"gpus": 0}).status_code in (201, 202)
    wait_ready(hub, "alice")
    link = f"{hub.url}/hub/spawn/alice/big?opt-gpus=1&opt-gpu_type=gpu&opt-memory=2G"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 900})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "alice")
        sent: list[dict[str, str]] = []
        page.on(
            "request",
            lambda r: sent.append(r.headers) if "/hub/spawn/alice/big" in r.url else None,
        )
        page.goto(f"{hub.url}/user/alice/lab")
        page.wait_for_selector(".jp-LabShell", timeout=90_000)
        page.evaluate("(url) => { window.location.href = url; }", link)
        notice = page.locator("#gpuhub-link-notice")
        notice.wait_for(timeout=30_000)
        assert "Nothing has started yet" in notice.inner_text()
        assert page.input_value("#gpuhub-gpus") == "1"
        # What Chromium said of where it came from: the same origin, a page of the server.
        assert sent and sent[0].get("referer", "").startswith(f"{hub.url}/user/alice/")
        assert "big" not in hub.user_model("alice")["servers"]
        page.screenshot(path=str(artifact("spawn-link-from-a-server-page.png")), full_page=True)

        # The same link on the hub's own home page starts it at once.
        page.goto(f"{hub.url}/hub/home")
        page.evaluate("(url) => { window.location.href = url; }", link)
        page.wait_for_url("**/user/alice/big/**", timeout=90_000)
        assert hub.user_model("alice")["servers"]["big"]["user_options"]["gpus"] == 1
