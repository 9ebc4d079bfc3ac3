"""The reclaim warning in a real JupyterLab (Chromium): the time left, "Keep my GPUs", and
the idle clock in the GPU sidebar.

The lab server runs as under a hub (JUPYTERHUB_* variables) but the hub is a stand-in that
answers gpuhub's reclaim API and records the calls, so the test can put the server in the
warning at once; the real hub's side of the same API is tested in test_reclaim_local.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.process import free_port
from tests.support.jupyter.server import TOKEN, JupyterServer, expose_lab_extension, jupyter_server

pytestmark = pytest.mark.browser

SERVER_TOKEN = "server-token-of-ann-0123456789"
TIMEOUT = 120_000


class StandInHub:
    """``/hub/api/gpuhub/reclaim/ann[/keep]`` with one warned idle clock."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, Any]] = []
        self.clock: dict[str, Any] = {
            "idle_seconds": 7260,
            "warn_after_seconds": 7200,
            "warned": True,
            "seconds_left": 840,
            "postpones": 2,
            "postpones_left": 1,
            "utilization_below": 0.05,
        }
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self, body: Any = None) -> bool:
                auth = self.headers.get("Authorization", "")
                hub.calls.append((self.command, self.path, auth, body))
                if auth != f"token {SERVER_TOKEN}":
                    self._answer(403, {"message": "bad token"})
                    return False
                return True

            def do_GET(self) -> None:
                if self._record() and self.path == "/hub/api/gpuhub/reclaim/ann":
                    self._answer(200, {"enabled": True, "servers": {"": hub.clock}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                if self._record(body) and self.path == "/hub/api/gpuhub/reclaim/ann/keep":
                    hub.clock = {
                        **hub.clock,
                        "idle_seconds": 0,
                        "warned": False,
                        "seconds_left": None,
                        "postpones": 3,
                        "postpones_left": 0,
                    }
                    self._answer(200, hub.clock)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hub/api"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hub() -> Iterator[StandInHub]:
    hub = StandInHub()
    yield hub
    hub.server.shutdown()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, hub: StandInHub) -> Iterator[JupyterServer]:
    tmp = tmp_path_factory.mktemp("reclaim-lab")
    root = tmp / "home"
    root.mkdir()
    expose_lab_extension(tmp)
    env = {
        "JUPYTERHUB_API_URL": hub.url,
        "JUPYTERHUB_API_TOKEN": SERVER_TOKEN,
        "JUPYTERHUB_USER": "ann",
        "JUPYTERHUB_SERVER_NAME": "",
        # In a virtualenv Jupyter prefers the env's copy of the extension (installed by
        # `pip install -e .`, possibly older) over the fresh build linked in the data dir.
        "JUPYTER_PREFER_ENV_PATH": "0",
    }
    with jupyter_server(root, tmp, lab=True, env=env) as server:
        yield server


def test_warning_keep_and_idle_clock(lab: JupyterServer, hub: StandInHub) -> None:
    scheme = "light"  # JupyterLab keeps its own theme setting, not the browser's scheme
    hub.clock.update(warned=True, seconds_left=840, postpones_left=1, idle_seconds=7260)
    with chromium() as browser:
        page = browser.new_page(  # type: ignore[attr-defined]
            viewport={"width": 1280, "height": 900}
        )
        page.set_default_timeout(60_000)
        try:
            page.goto(f"{lab.url}lab/workspaces/reclaim-{scheme}?token={TOKEN}")
            toast = page.locator(".Toastify__toast", has_text="Your GPUs have been idle")
            toast.wait_for(timeout=TIMEOUT)
            assert "stops in 14 min" in toast.inner_text()
            assert "your files are safe" in toast.inner_text()
            # The sidebar shows the same clock.
            page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
            clock = page.locator(".gpuhub-GpuPanel-idleClock")
            clock.wait_for(state="visible")
            assert "stops in 14 min unless you keep them" in clock.inner_text()
            page.screenshot(path=str(artifact(f"reclaim-warning-{scheme}.png")))
            keeps = len([c for c in hub.calls if c[0] == "POST"])
            toast.get_by_role("button", name="Keep my GPUs").click()
            page.locator(".Toastify__toast", has_text="This was the last time").wait_for()
            toast.wait_for(state="detached")
            posts = [c for c in hub.calls if c[0] == "POST"]
            assert len(posts) == keeps + 1
            assert posts[-1][1:] == (
                "/hub/api/gpuhub/reclaim/ann/keep",
                f"token {SERVER_TOKEN}",
                {"server": ""},
            )
            page.wait_for_function(
                "document.querySelector('.gpuhub-GpuPanel-idleClock').textContent"
                ".startsWith('GPUs busy')"
            )
            page.screenshot(path=str(artifact(f"reclaim-kept-{scheme}.png")))
        except BaseException:
            page.screenshot(path=str(artifact(f"reclaim-failure-{scheme}.png")))
            raise
        finally:
            page.close()
