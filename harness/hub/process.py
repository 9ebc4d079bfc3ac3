"""A real JupyterHub (with configurable-http-proxy from npm) as a child process, for tests.

The hub runs from a temporary directory with a generated config that imports the caller's
settings; tests talk to it over HTTP exactly as a browser or a REST client would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import requests

from harness import e2e
from harness.paths import REPO

ROOT = REPO
API_TOKEN = "gpuhub-test-token-0123456789abcdef"
PASSWORD = "secret"
# gpuhub supports JupyterHub 5.3+ and 6 (README); where the hub itself answers differently,
# tests say which version answers what.
JUPYTERHUB_MAJOR = int(version("jupyterhub").split(".")[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Local servers' ports from the test worker's own range, below the ephemeral ports every
# other process binds from: JupyterHub's random_port() binds, closes and hands the port on,
# so side-by-side workers' hubs could give two servers one port (the second exits with "port
# in use" while the first answers the hub's check in its place).
SERVER_PORTS = textwrap.dedent(
    """
    import os as _os, random as _random, socket as _socket
    import jupyterhub.spawner as _spawner

    _worker = _os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    _low = 20000 + 1500 * (int(_worker) % 8 if _worker.isdigit() else 0)

    def _worker_port():
        for _ in range(200):
            port = _random.randrange(_low, _low + 1500)
            with _socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
        raise RuntimeError(f"no free port in {_low}-{_low + 1499}")

    _spawner.random_port = _worker_port
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dirs = [str(ROOT / "node_modules" / ".bin"), str(Path(sys.executable).parent)]
    env["PATH"] = os.pathsep.join([*bin_dirs, env.get("PATH", "")])
    env.pop("JUPYTERHUB_API_TOKEN", None)
    return env


class Hub:
    """Handle on a running hub: URLs, an admin API client and login sessions."""

    def __init__(
        self, workdir: Path, port: int, proc: subprocess.Popen[bytes], config: str
    ) -> None:
        self.workdir = workdir
        self.port = port
        self.proc = proc
        self.config = config
        self.url = f"http://127.0.0.1:{port}"
        self.api_url = f"{self.url}/hub/api"
        self.log_path = workdir / "hub.log"

    # -- REST API as an admin service ------------------------------------------------------
    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"token {API_TOKEN}"}
        return requests.request(
            method, f"{self.api_url}{path}", headers=headers, timeout=30, **kwargs
        )

    def user_model(self, name: str) -> dict[str, Any]:
        response = self.api("GET", f"/users/{name}")
        response.raise_for_status()
        return response.json()

    def wait_for_server(self, name: str, ready: bool = True, timeout: float = 60) -> dict[str, Any]:
        """Wait until the user's default server is ready (or gone, with ``ready=False``)."""
        deadline = time.monotonic() + timeout
        while True:
            model = self.user_model(name)
            server = model.get("servers", {}).get("")
            if ready and server and server.get("ready"):
                return model
            if not ready and not server:
                return model
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"server of {name} not {'ready' if ready else 'stopped'}: {model}\n{self.log()}"
                )
            time.sleep(0.2)

    def stop_server(self, name: str) -> None:
        response = self.api("DELETE", f"/users/{name}/server")
        assert response.status_code in (202, 204), response.text
        self.wait_for_server(name, ready=False)

    def login(self, name: str, password: str = PASSWORD) -> requests.Session:
        session = requests.Session()
        page = session.get(f"{self.url}/hub/login", timeout=30)
        page.raise_for_status()
        xsrf = session.cookies.get("_xsrf", path="/hub/")
        response = session.post(
            f"{self.url}/hub/login",
            data={"username": name, "password": password, "_xsrf": xsrf},
            allow_redirects=False,
            timeout=30,
        )
        assert response.status_code == 302, response.text
        return session

    def log_in_browser(self, page: Any, name: str, password: str = PASSWORD) -> None:
        """Log ``name`` in through the hub's login page in a Playwright ``page``."""
        page.goto(f"{self.url}/hub/login")
        page.fill("#username_input", name)
        page.fill("#password_input", password)
        page.click("#login_submit")
        # A user with a running server is sent on to it: only leaving the login page matters.
        page.wait_for_url(lambda url: "/hub/login" not in url, wait_until="commit")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_hub(
    workdir: Path,
    config: str,
    *,
    port: int | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> Hub:
    """Start JupyterHub in ``workdir`` with ``config`` (Python text) added to the test base;
    ``env``: more environment for the hub (its ``KUBECONFIG``, say)."""
    e2e.require("a JupyterHub")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    base = textwrap.dedent(
        f"""
        c = get_config()  # noqa
        c.JupyterHub.ip = "127.0.0.1"
        c.JupyterHub.port = {port}
        c.JupyterHub.hub_ip = "127.0.0.1"
        c.JupyterHub.hub_port = {free_port()}
        c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
        c.JupyterHub.authenticator_class = "dummy"
        c.DummyAuthenticator.password = {PASSWORD!r}
        c.Authenticator.allow_all = True
        c.JupyterHub.services = [{{"name": "gpuhub-test", "api_token": {API_TOKEN!r}}}]
        c.JupyterHub.load_roles = [{{"name": "admin", "services": ["gpuhub-test"]}}]
        c.JupyterHub.cleanup_servers = True
        c.Spawner.http_timeout = 60
        c.Spawner.start_timeout = 90
        c.Spawner.default_url = "/lab"
        """
    )
    (workdir / "jupyterhub_config.py").write_text(base + SERVER_PORTS + textwrap.dedent(config))
    log = open(workdir / "hub.log", "ab")  # noqa: SIM115 - lives as long as the hub
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py", "--debug"],
        cwd=workdir,
        env={**_env(), **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    hub = Hub(workdir, port, proc, config)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterHub exited with {proc.returncode}:\n{hub.log()}")
        try:
            if requests.get(f"{hub.api_url}/", timeout=2).status_code == 200:
                return hub
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            hub.stop()
            raise TimeoutError(f"JupyterHub did not answer in {timeout}s:\n{hub.log()}")
        time.sleep(0.2)


@contextmanager
def running_hub(workdir: Path, config: str) -> Iterator[Hub]:
    hub = start_hub(workdir, config)
    try:
        yield hub
    finally:
        hub.stop()


def spawn_json(hub: Hub, name: str, options: dict[str, Any]) -> requests.Response:
    return hub.api("POST", f"/users/{name}/server", data=json.dumps(options))


def spawn(hub: Hub, user: str, options: dict[str, Any], server: str = "") -> requests.Response:
    path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
    return hub.api("POST", path, data=json.dumps(options))


def wait_ready(hub: Hub, user: str, server: str = "", timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        model = hub.user_model(user)["servers"].get(server)
        if model and model.get("ready"):
            return model
        assert time.monotonic() < deadline, f"{user}/{server} did not start: {model}"
        time.sleep(0.3)


def stop(hub: Hub, user: str, server: str = "") -> None:
    path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
    hub.api("DELETE", path)
    deadline = time.monotonic() + 60
    while server in hub.user_model(user)["servers"]:
        assert time.monotonic() < deadline, f"{user}/{server} did not stop"
        time.sleep(0.3)
