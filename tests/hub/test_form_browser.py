"""The spawn form in a real browser, then alice's lab on simulated GPUs.

The hub offers 3 simulated GPUs (``gpu_devices = "simulated:3"``, what ``make demo`` does on a
machine without a driver). The form shows their capacity on first view; alice asks for 2; her
lab's sidebar and status bar show GPUs 0 and 1 as simulated; a busy cell moves their charts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from harness.hub.process import Hub, start_hub
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import LOCAL_HUB_CONFIG as CONFIG
from tests.support.hub.local import server_env

pytestmark = pytest.mark.browser

SIMULATED = CONFIG.replace(
    "c.LocalGPUSpawner.gpu_devices = [0, 1, 2]", 'c.LocalGPUSpawner.gpu_devices = "simulated:3"'
)
BUSY_CELL = (
    "import time; x = bytearray(600 * 2**20); end = time.time() + 60\nwhile time.time() < end: pass"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    assert SIMULATED != CONFIG
    hub = start_hub(tmp_path_factory.mktemp("form-browser"), SIMULATED)
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


def test_form_hides_what_does_not_apply_and_starts_a_server(hub: Hub) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 900})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "alice")
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
        # The spawn page's last word (JupyterHub's ready event) names the GPUs too.
        progress = hub.api("GET", "/users/alice/server/progress")
        assert "with GPUs 0, 1 (Simulated GPU)" in progress.text, progress.text
        env = server_env(hub, "alice")
        assert (env["CUDA_VISIBLE_DEVICES"], env["GPUHUB_SIMULATED_GPUS"]) == ("0,1", "3")
        assert env["GPUHUB_GPU_TYPE_NAME"] == "Simulated GPU"

        # alice's lab: the status bar and the sidebar show her 2 GPUs, as simulated ones.
        status = page.locator(".gpuhub-GpuStatus")
        page.wait_for_function(
            "() => document.querySelector('.gpuhub-GpuStatus')?.textContent.startsWith('Simulated GPU')",
            timeout=90_000,
        )
        assert status.inner_text().startswith("Simulated GPU \u00d72 ")
        assert status.get_attribute("title").startswith("GPUs 0, 1 (Simulated GPU) assigned.")
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        panel = page.locator("#gpuhub-gpu-panel")
        cards = panel.locator(".gpuhub-GpuCard")
        cards.nth(1).wait_for(timeout=30_000)
        assert cards.count() == 2
        assert "GPU 0 · Simulated GPU" in cards.nth(0).inner_text()
        assert "GPU 1 · Simulated GPU" in cards.nth(1).inner_text()
        header = panel.locator(".gpuhub-GpuPanel-status").inner_text()
        assert header.startswith("GPUs 0, 1 (Simulated GPU) assigned. Simulated:")

        # A busy cell in a new notebook: its kernel sees GPUs 0 and 1, so both charts move.
        page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
        editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
        editor.wait_for(timeout=90_000)
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=90_000)
        editor.click()
        page.keyboard.type(BUSY_CELL)
        page.keyboard.press("Shift+Enter")
        # A kernel connection JupyterLab is still settling may drop the first run (the prompt
        # stays "[ ]:"); run the cell again from the keyboard until the kernel has it.
        prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
        for _ in range(5):
            try:
                page.wait_for_function(
                    "(p) => /\\[(\\*|\\d+)\\]/.test(p.textContent)",
                    arg=prompt.element_handle(),
                    timeout=10_000,
                )
                break
            except PlaywrightTimeoutError:
                editor.click()
                page.keyboard.press("Control+Enter")
        value = cards.nth(0).locator(".gpuhub-GpuCard-value").first
        page.wait_for_function(
            """() => {
              const v = document.querySelector('#gpuhub-gpu-panel .gpuhub-GpuCard .gpuhub-GpuCard-value');
              return v && parseInt(v.textContent, 10) >= 50;
            }""",
            timeout=60_000,
        )
        assert int(value.inner_text().split()[0]) >= 50
        holder = cards.nth(0).locator(".gpuhub-GpuCard-holder", has_text="Untitled")
        holder.wait_for(timeout=30_000)
        page.wait_for_timeout(3000)  # a few more samples on the chart
        page.screenshot(path=str(artifact("gpu-panel-simulated.png")))


def test_a_gpu_link_on_another_site_asks_before_it_starts_anything(hub: Hub) -> None:
    """Issue 31: a link to ``/hub/spawn?opt-gpus=1…`` on another site is followed with the
    hub's login cookie. Chromium says it comes from another site (``Sec-Fetch-Site``): the
    form asks, filled in, and nothing holds a GPU until alice presses Start. The same link
    followed from the hub's own page starts the server at once, as before."""
    link = f"{hub.url}/hub/spawn?opt-gpus=1&opt-gpu_type=gpu&opt-memory=2G"
    hub.api("DELETE", "/users/alice/server")  # a running server would take the link instead
    hub.wait_for_server("alice", ready=False)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 900})  # type: ignore[attr-defined]
        hub.log_in_browser(page, "alice")
        try:
            # Another site, served by the test: https://elsewhere.example/ with the link.
            bait = f'<p>Free GPUs! <a id="bait" href="{link}">Try it</a></p>'
            page.route(
                "https://elsewhere.example/**",
                lambda route: route.fulfill(body=bait, content_type="text/html"),
            )
            page.goto("https://elsewhere.example/")
            page.click("#bait")
            notice = page.locator("#gpuhub-link-notice")
            notice.wait_for(timeout=30_000)
            assert "Nothing has started yet" in notice.inner_text()
            assert page.input_value("#gpuhub-gpus") == "1"
            assert page.input_value("#gpuhub-memory") == "2G"
            assert "3 of 3 free now" in page.locator("#gpuhub-gpu-type-group").inner_text()
            assert not hub.user_model("alice")["servers"]
            page.screenshot(path=str(artifact("spawn-link-from-elsewhere.png")), full_page=True)

            page.click("button[type=submit]")  # alice confirms: the form's own post
            page.wait_for_url("**/user/alice/**", timeout=90_000)
            assert server_env(hub, "alice")["CUDA_VISIBLE_DEVICES"] == "0"
            hub.stop_server("alice")

            page.goto(f"{hub.url}/hub/home")
            page.evaluate("(url) => { window.location.href = url; }", link)
            page.wait_for_url("**/user/alice/**", timeout=90_000)
            assert server_env(hub, "alice")["CUDA_VISIBLE_DEVICES"] == "0"
        finally:
            hub.api("DELETE", "/users/alice/server")
            hub.wait_for_server("alice", ready=False)
