"""The spawn form as the hub serves it, before (or without) its script: what it posts matches
what it shows. The demo's hub: whole simulated GPUs (the default type) and one shared by
memory, whose "GPU memory" field must not ride along with a whole-GPU request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.hub.process import Hub, stop, wait_ready
from tests.support.browser.chromium import chromium
from tests.support.hub.demo import log_in, start_demo_hub

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_demo_hub(Path(tmp_path_factory.mktemp("form-served")))
    try:
        yield hub
    finally:
        hub.stop()


def submit(page: object, hub: Hub, user: str) -> dict[str, object]:
    """Submit the form as it stands; the options the hub started the server with."""
    page.click("button[type=submit]")  # type: ignore[attr-defined]
    page.wait_for_url(lambda url: "/hub/spawn/" not in url and not url.endswith("/hub/spawn"))  # type: ignore[attr-defined]
    wait_ready(hub, user)
    options = hub.user_model(user)["servers"][""]["user_options"]
    stop(hub, user)
    return dict(options)


def test_the_form_without_its_script_posts_what_it_shows(hub: Hub) -> None:
    with chromium() as browser:
        context = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
        page = context.new_page()
        log_in(page, hub, "bob")
        page.goto(f"{hub.url}/hub/spawn")
        # The default type gives whole GPUs: no GPU memory in view, none posted.
        assert page.is_checked("input[name=gpu_type][value=gpu]")
        assert not page.is_visible("#gpuhub-gpu-memory-group")
        assert page.is_disabled("#gpuhub-gpu-memory")
        page.fill("#gpuhub-gpus", "1")
        options = submit(page, hub, "bob")
        assert options["gpus"] in (1, "1") and options.get("gpu_type") == "gpu", options
        assert "gpu_memory" not in options, options

        # Served again with his last choice (1 whole GPU): still nothing of a share.
        page.goto(f"{hub.url}/hub/spawn")
        assert page.input_value("#gpuhub-gpus") == "1"
        assert page.is_disabled("#gpuhub-gpu-memory")
        # The shared type, chosen without the script: its default share, as the hub gives it.
        page.check("input[name=gpu_type][value=shared]")
        options = submit(page, hub, "bob")
        assert options.get("gpu_type") == "shared" and "gpu_memory" not in options, options

        # Served with that choice, the field is there with the share he had.
        page.goto(f"{hub.url}/hub/spawn")
        assert page.is_checked("input[name=gpu_type][value=shared]")
        assert page.is_visible("#gpuhub-gpu-memory-group")
        assert not page.is_disabled("#gpuhub-gpu-memory")
        assert page.input_value("#gpuhub-gpu-memory") == "4G"
        context.close()
