"""The GPU sidebar and status bar fed by the pushed metrics stream, in a real JupyterLab.

Debian's Chromium under Playwright, a real Jupyter server with the NVML stand-in sampling
five times a second: one WebSocket per tab at ``gpuhub/api/metrics/stream`` serves the panel
and the status bar alike (no polling while it is open), the panel's figures follow the
frames, and the socket closes when neither shows and opens again when one does. Through a
proxy that refuses WebSockets, the same page polls instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import fake_nvml as fake
from harness.jupyter.server import TOKEN, JupyterServer, expose_lab_extension, jupyter_server
from harness.paths import REPO
from tests.support.browser.chromium import artifact, chromium
from tests.support.jupyter.notebooks import write_notebook
from tests.support.jupyter.plain_proxy import plain_proxy

pytestmark = pytest.mark.browser

TIMEOUT = 90_000  # ms; JupyterLab's first load on a busy 2-core machine
GIB = 2**30
STREAM = "/gpuhub/api/metrics/stream"


@pytest.fixture
def streaming_lab(tmp_path: Path) -> Iterator[tuple[JupyterServer, Path]]:
    scenario_path = tmp_path / "nvml.json"
    scenario_path.write_text(fake.a100s(1, utilization=63, memory_used=21 * GIB).to_json())
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", "x = 1")
    expose_lab_extension(tmp_path)
    env = {
        "PYTHONPATH": str(REPO),
        "GPUHUB_FAKE_NVML": str(scenario_path),
        # The build linked into the test's data dir, not the copy `pip install` left in the
        # venv's share/jupyter (which a venv otherwise prefers): this tests this tree's JS.
        "JUPYTER_PREFER_ENV_PATH": "0",
    }
    config = (
        "c.GPUSampler.nvml_module = 'harness.fake_nvml'\n"
        "c.GPUSampler.interval = 0.2\n"
        # window.jupyterapp: the test hides the panel and the status bar as the menus do.
        "c.LabApp.expose_app_in_browser = True\n"
    )
    with jupyter_server(root, tmp_path, env=env, config=config, lab=True) as server:
        yield server, scenario_path


class Sockets:
    """Every stream socket the page opens, the frames each received, and the polls."""

    def __init__(self, page: Any) -> None:
        self.opened: list[Any] = []
        self.frames: dict[int, int] = {}
        self.closed: set[int] = set()
        self.polls: list[str] = []
        page.on("websocket", self._on_socket)
        page.on("request", self._on_request)

    def _on_socket(self, socket: Any) -> None:
        if STREAM not in socket.url:
            return
        key = len(self.opened)
        self.opened.append(socket)
        self.frames[key] = 0
        socket.on("framereceived", lambda _payload: self._count(key))
        socket.on("close", lambda _socket: self.closed.add(key))

    def _count(self, key: int) -> None:
        self.frames[key] += 1

    def _on_request(self, request: Any) -> None:
        if "/gpuhub/api/metrics" in request.url and STREAM not in request.url:
            self.polls.append(request.url)

    def live(self) -> list[int]:
        return [key for key in range(len(self.opened)) if key not in self.closed]


def wait_until(page: Any, condition: Any, what: str, seconds: float = 30) -> None:
    """Let the page run (and Playwright deliver its events) until ``condition()`` holds."""
    for _ in range(int(seconds * 10)):
        if condition():
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def test_panel_and_status_bar_share_one_pushed_stream(
    browser: Any, streaming_lab: tuple[JupyterServer, Path]
) -> None:
    server, scenario_path = streaming_lab
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    sockets = Sockets(page)
    page.goto(f"{server.url}lab?token={TOKEN}")
    page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=TIMEOUT)
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
    panel = page.locator("#gpuhub-gpu-panel")
    card = panel.locator(".gpuhub-GpuCard")
    card.wait_for(timeout=30_000)
    utilization = card.locator(".gpuhub-GpuCard-value").first
    page.wait_for_function(
        "() => document.querySelector('#gpuhub-gpu-panel .gpuhub-GpuCard-value')"
        "?.textContent === '63 %'",
        timeout=30_000,
    )
    status = page.locator(".gpuhub-GpuStatus")
    assert status.inner_text().startswith("GPU 63% · 21.0/"), status.inner_text()

    # One socket for the panel and the status bar, frames arriving at the sampler's pace.
    wait_until(page, lambda: sockets.opened, "a stream socket (the page polls instead)")
    seen = sockets.frames[0]
    wait_until(page, lambda: sockets.frames[0] >= seen + 10, "ten more frames")
    assert len(sockets.opened) == 1, [s.url for s in sockets.opened]
    assert sockets.live() == [0]

    # The panel follows the frames: a new figure in the stand-in shows up pushed, not polled.
    scenario = fake.a100s(1, utilization=17, memory_used=30 * GIB)
    scenario_path.write_text(scenario.to_json())
    page.wait_for_function(
        "() => document.querySelector('#gpuhub-gpu-panel .gpuhub-GpuCard-value')"
        "?.textContent === '17 %'",
        timeout=30_000,
    )
    assert utilization.inner_text() == "17 %"
    page.wait_for_function(
        "() => document.querySelector('.gpuhub-GpuStatus')?.textContent.startsWith('GPU 17%')",
        timeout=30_000,
    )
    # The chart moved with the samples (a line of many points).
    points = page.evaluate(
        "() => (document.querySelector('#gpuhub-gpu-panel .gpuhub-Sparkline-util "
        ".gpuhub-Sparkline-line')?.getAttribute('d') || '').split('L').length"
    )
    assert points >= 10, points
    assert sockets.polls == []  # nothing polled while the stream is open
    page.screenshot(path=str(artifact("gpu-panel-stream.png")))

    # Panel hidden, status bar still showing: the socket stays (past the model's 2 s
    # grace before it closes an unwatched socket).
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    panel.wait_for(state="hidden")
    page.wait_for_timeout(3000)
    assert sockets.live() == [0]
    # And the status bar hidden too: nobody shows the figures, the socket closes.
    page.evaluate("() => window.jupyterapp.commands.execute('statusbar:toggle')")
    status.wait_for(state="hidden")
    wait_until(page, lambda: not sockets.live(), "the stream to close")
    frames = dict(sockets.frames)
    page.wait_for_timeout(1000)  # five samples' time: no socket, no frame, no poll
    assert len(sockets.opened) == 1 and sockets.frames == frames
    assert sockets.polls == []

    # Shown again: one new socket, and the panel fills from its first message.
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
    panel.wait_for(state="visible")
    wait_until(page, lambda: sockets.live() == [1], "one new stream")
    wait_until(page, lambda: sockets.frames[1] >= 5, "its frames")
    assert utilization.inner_text() == "17 %"
    page.close()

    # Through a proxy that refuses WebSockets: a few tries, then the page polls.
    with plain_proxy(server.url) as proxied:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        sockets = Sockets(page)
        page.goto(f"{proxied}lab?token={TOKEN}")
        page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=TIMEOUT)
        # The workspace restores the panel as the first page left it: show it, whatever.
        page.wait_for_function(
            "() => window.jupyterapp?.commands.hasCommand('gpuhub:show-gpu-panel')",
            timeout=TIMEOUT,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('gpuhub:show-gpu-panel')")
        panel = page.locator("#gpuhub-gpu-panel")
        panel.locator(".gpuhub-GpuCard").wait_for(timeout=30_000)
        scenario_path.write_text(fake.a100s(1, utilization=41).to_json())
        page.wait_for_function(
            "() => document.querySelector('#gpuhub-gpu-panel .gpuhub-GpuCard-value')"
            "?.textContent === '41 %'",
            timeout=30_000,
        )
        wait_until(page, lambda: len(sockets.polls) >= 2, "polls")
        assert len(sockets.opened) == 3, [s.url for s in sockets.opened]
        assert sockets.live() == []
        page.close()
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
