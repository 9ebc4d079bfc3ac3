"""The fleet page follows the fleet by itself, in Chromium: a server stopped or started
elsewhere leaves or joins the page without a reload, well before the monitor's next tick
(30 s in the demo), and what the admin is typing stays."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.hub.process import Hub, spawn, stop, wait_ready
from tests.support.browser.chromium import chromium
from tests.support.hub.demo import DEMO_ADMIN, log_in, start_demo_hub

pytestmark = pytest.mark.browser

# Under the demo's 30 s monitor tick: the page's own reads bring the change, not the tick.
FOLLOWS_MS = 20_000
ROW = "#gpuhub-holders tr[data-user='{}'][data-kind='server']"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_demo_hub(Path(tmp_path_factory.mktemp("fleet-live")))
    try:
        yield hub
    finally:
        for user in ("bob", "carol"):
            hub.api("DELETE", f"/users/{user}/server")
        hub.stop()


def test_the_fleet_page_follows_stops_and_starts_without_a_reload(hub: Hub) -> None:
    assert spawn(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "bob")
    with chromium() as browser:
        page = browser.new_page()  # type: ignore[attr-defined]
        log_in(page, hub, DEMO_ADMIN)
        page.goto(f"{hub.url}/hub/gpuhub/fleet")
        page.locator(ROW.format("bob")).wait_for()
        page.evaluate("window.gpuhubSameLoad = true")
        page.fill("#gpuhub-stop-reason", "half typed")
        page.mouse.move(0, 0)  # not over the rows, where the page holds them still

        stop(hub, "bob")  # through the REST API, not this page
        page.locator(ROW.format("bob")).wait_for(state="detached", timeout=FOLLOWS_MS)
        page.locator("#gpuhub-no-holders").wait_for(timeout=FOLLOWS_MS)

        assert spawn(hub, "carol", {"gpus": 1}).status_code in (201, 202)
        wait_ready(hub, "carol")
        page.locator(ROW.format("carol")).wait_for(timeout=FOLLOWS_MS)
        assert page.locator("#gpuhub-no-holders").count() == 0
        # The same page all along, the admin's half-typed reason kept, times in one form.
        assert page.evaluate("window.gpuhubSameLoad") is True
        assert page.input_value("#gpuhub-stop-reason") == "half typed"
        since = page.locator(ROW.format("carol") + " time.gpuhub-time")
        assert "UTC" not in since.inner_text()
