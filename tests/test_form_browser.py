"""The spawn form in a real browser: progressive enhancement, keyboard use, a screenshot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.chromium import artifact, chromium
from tests.hub.process import PASSWORD, Hub, start_hub
from tests.test_local_hub import CONFIG

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("form-browser"), CONFIG)
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


def test_form_hides_what_does_not_apply_and_starts_a_server(hub: Hub) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 900})  # type: ignore[attr-defined]
        page.goto(f"{hub.url}/hub/login")
        page.fill("#username_input", "alice")
        page.fill("#password_input", PASSWORD)
        page.click("#login_submit")
        page.goto(f"{hub.url}/hub/spawn")

        types = page.locator("#gpuhub-gpu-type-group")
        # First view, 0 GPUs asked for: what is free is already there to see.
        assert types.is_visible()
        assert "3 of 3 free now" in types.inner_text()
        assert "Simulated GPU" in types.inner_text()
        page.screenshot(path=str(artifact("spawn-form-first-view.png")), full_page=True)
        page.focus("#gpuhub-gpus")
        page.keyboard.press("ArrowUp")  # keyboard alone can ask for a GPU
        assert page.input_value("#gpuhub-gpus") == "1"
        assert types.is_visible()
        assert page.get_attribute("#gpuhub-gpus", "max") == "3"
        page.fill("#gpuhub-gpus", "2")
        page.fill("#gpuhub-memory", "2G")
        page.screenshot(path=str(artifact("spawn-form.png")), full_page=True)

        page.click("button[type=submit]")
        page.wait_for_url("**/user/alice/lab**", timeout=90_000)
        model = hub.user_model("alice")
        assert model["servers"][""]["user_options"]["gpus"] in (2, "2")
