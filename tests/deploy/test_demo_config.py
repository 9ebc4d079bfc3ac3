"""`make demo`'s jupyterhub_config.py, started for real: log in, see the form, get a server."""

from __future__ import annotations

import contextlib
import os
import re
import runpy
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from traitlets.config import Config

from harness.hub.process import ROOT, _env, free_port, spawn, stop, wait_ready
from tests.support.hub.demo import DEMO_ADMIN, start_demo_hub

pytestmark = pytest.mark.e2e

DEMO_CONFIG = ROOT / "jupyter_config" / "jupyterhub_config.py"


def test_demo_hub_logs_in_and_spawns_with_a_gpu(tmp_path: Path) -> None:
    port = free_port()
    env = {**_env(), "GPUHUB_DEMO_PORT": str(port), "GPUHUB_DEMO_GPUS": "0,1"}
    env.pop("GPUHUB_DEMO_PASSWORD", None)
    log = open(tmp_path / "hub.log", "wb")  # noqa: SIM115 - closed below
    hub = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterhub",
            "-f",
            str(DEMO_CONFIG),
            # The demo's internal ports are JupyterHub's defaults; tests must not collide.
            f"--JupyterHub.hub_port={free_port()}",
            f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{free_port()}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    session = requests.Session()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if session.get(f"{url}/hub/login", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert hub.poll() is None and time.monotonic() < deadline, (
                tmp_path / "hub.log"
            ).read_text()
            time.sleep(0.3)
        banner = (tmp_path / "hub.log").read_text()
        assert "log in as alice" in banner and "'gpuhub-demo'" in banner
        assert "all users' servers run as one OS account" in banner
        assert "can read every other user's files and API tokens" in banner

        xsrf = session.cookies.get("_xsrf", path="/hub/")
        login = session.post(
            f"{url}/hub/login",
            data={"username": "alice", "password": "gpuhub-demo", "_xsrf": xsrf},
            allow_redirects=False,
            timeout=30,
        )
        assert login.status_code == 302, login.text
        form = session.get(f"{url}/hub/spawn", timeout=30).text
        assert re.search(r'name="gpus"[^>]*max="2"', form)  # staff: up to 4, but 2 GPUs exist
        assert "2 of 2 free now" in form

        xsrf = session.cookies.get("_xsrf", path="/hub/")
        spawn = session.post(
            f"{url}/hub/spawn",
            data={"cpu": "1", "memory": "1G", "gpus": "1", "gpu_type": "gpu", "_xsrf": xsrf},
            timeout=120,
        )
        assert spawn.status_code == 200, spawn.text[-2000:]
        deadline = time.monotonic() + 90  # the pending page follows the spawn until it is up
        while "JupyterLab" not in (lab := session.get(f"{url}/user/alice/lab", timeout=30)).text:
            assert time.monotonic() < deadline, lab.text[-2000:]
            time.sleep(0.5)
        home = tmp_path / "gpuhub-users" / "alice"  # the run_as_hub_user home
        assert home.is_dir() and home.stat().st_mode & 0o777 == 0o700
    finally:
        session.close()
        os.killpg(hub.pid, signal.SIGTERM)
        hub.wait(timeout=30)
        log.close()


def _load_demo_config(monkeypatch: pytest.MonkeyPatch, gpus: str | None) -> Config:
    if gpus is None:
        monkeypatch.delenv("GPUHUB_DEMO_GPUS", raising=False)
    else:
        monkeypatch.setenv("GPUHUB_DEMO_GPUS", gpus)
    config = Config()
    runpy.run_path(str(DEMO_CONFIG), init_globals={"get_config": lambda: config})
    return config


def test_demo_without_a_driver_offers_four_simulated_gpus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuhub.core import devices

    monkeypatch.setattr(devices, "discover", lambda: devices.Discovery((), "no driver"))
    config = _load_demo_config(monkeypatch, None)
    assert config.LocalGPUSpawner.gpu_devices == "simulated:4"
    banner = capsys.readouterr().out
    assert "alice" in banner and "bob or carol" in banner
    assert "4 simulated GPUs" in banner
    # Three whole GPUs, and the last shared by memory, to try gpu_memory (README's demo).
    types = config.LocalGPUSpawner.gpu_types
    assert types["gpu"]["devices"] == [0, 1, 2]
    assert (types["shared"]["devices"], types["shared"]["sharing"]["memory"]) == ([3], "16G")
    assert 'GPU 3 is shared by memory ("Shared simulated GPU"' in banner
    assert "Shared simulated GPU" in (ROOT / "README.md").read_text()
    # The fleet page can be tried from the README: the demo says who its admin is.
    (role,) = config.JupyterHub.load_roles
    assert role["users"] == [DEMO_ADMIN] and "custom:gpuhub:fleet" in role["scopes"]
    assert f"{DEMO_ADMIN} is the demo's GPU fleet admin" in banner and "/hub/gpuhub/fleet" in banner


def test_demo_with_a_driver_hands_out_the_real_gpus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuhub.core import devices

    found = devices.Discovery((devices.Device(0, "NVIDIA RTX A6000", "GPU-1", 48 * 2**30),), None)
    monkeypatch.setattr(devices, "discover", lambda: found)
    assert _load_demo_config(monkeypatch, None).LocalGPUSpawner.gpu_devices == "auto"
    assert "0 (NVIDIA RTX A6000)" in capsys.readouterr().out
    assert _load_demo_config(monkeypatch, "simulated:2").LocalGPUSpawner.gpu_devices == (
        "simulated:2"
    )
    assert _load_demo_config(monkeypatch, "0,1").LocalGPUSpawner.gpu_devices == [0, 1]
    # Real or pretend GPUs: one type of them all, as LocalGPUSpawner makes by itself.
    assert not _load_demo_config(monkeypatch, "0,1").LocalGPUSpawner.gpu_types


def test_the_demos_shared_gpu_gives_servers_the_memory_they_ask_for(tmp_path: Path) -> None:
    """The demo's last simulated GPU is shared by memory: the form offers "GPU memory", and
    two students get 2G and 4G of the same GPU 3, the whole GPUs left free (alice's form)."""
    hub = start_demo_hub(tmp_path)
    try:
        session = requests.Session()
        page = session.get(f"{hub.url}/hub/login", timeout=30)
        xsrf = session.cookies.get("_xsrf", path="/hub/")
        login = session.post(
            f"{hub.url}/hub/login",
            data={"username": "alice", "password": "gpuhub-demo", "_xsrf": xsrf},
            allow_redirects=False,
            timeout=30,
        )
        assert page.ok and login.status_code == 302, login.text
        form = session.get(f"{hub.url}/hub/spawn", timeout=30).text
        assert "Shared simulated GPU" in form and 'name="gpu_memory"' in form
        assert "16 GB of 16 GB free on GPU 3" in form and "3 of 3 free now" in form
        for user, memory in (("carol", "2G"), ("bob", "4G")):
            options = {"gpus": 1, "gpu_type": "shared", "gpu_memory": memory}
            answer = spawn(hub, user, options)
            assert answer.status_code in (201, 202), answer.text
            wait_ready(hub, user)
            assert hub.user_model(user)["servers"][""]["state"]["gpus"] == [3]
        form = session.get(f"{hub.url}/hub/spawn", timeout=30).text
        assert "10 GB of 16 GB free on GPU 3" in form and "3 of 3 free now" in form
    finally:
        for user in ("carol", "bob"):
            stop(hub, user)
        hub.stop()


# What an admin need not read at start and stop (issue 22): npm's engine warnings, JupyterHub's
# deprecation of extra_handlers (gpuhub's own handlers), a failed stop with an empty reason,
# "nvml" for simulated GPUs, jupyter_events' schema warning.
NOISE = (
    "EBADENGINE",
    "extra_handlers is deprecated",
    "Failed to stop user",
    "GPU metrics from nvml",
    "JupyterEventsVersionWarning",
    "Traceback",
)


def test_demo_starts_and_stops_with_a_clean_log(tmp_path: Path) -> None:
    """The demo's hub, a server started and stopped, another one running at shutdown: the
    hub's warnings are only those an admin needs (plain HTTP, said by JupyterHub itself)."""
    hub = start_demo_hub(tmp_path)
    stopping: threading.Thread | None = None
    try:
        assert "gpu-fleet-admin" in hub.user_model(DEMO_ADMIN)["roles"]
        for _ in range(2):
            answer = spawn(hub, "alice", {"gpus": 2})
            assert answer.status_code in (201, 202), answer.text
            wait_ready(hub, "alice")
            stop(hub, "alice")
        answer = spawn(hub, "bob", {"gpus": 1})
        assert answer.status_code in (201, 202), answer.text
        wait_ready(hub, "bob")

        # Shut down while bob's server is stopping: the hub's cleanup stops it a second time.
        def stop_bob() -> None:
            with contextlib.suppress(requests.ConnectionError):  # the hub goes meanwhile
                hub.api("DELETE", "/users/bob/server")

        stopping = threading.Thread(target=stop_bob)
        stopping.start()
        time.sleep(0.2)
    finally:
        hub.stop()
        if stopping is not None:
            stopping.join(30)
    log = hub.log()
    assert "GPU metrics from simulated GPUs" in log
    for noise in NOISE:
        assert noise not in log, f"{noise!r} in the demo's log:\n{log[-4000:]}"
    # Until the shutdown; after it, a request still in flight (the DELETE above) may fail
    # with the hub, which is the request's own business.
    running = log.partition("initiating shutdown")[0]
    hub_warnings = [
        line
        for line in running.splitlines()
        if re.match(r"\[[WE] \S+ \S+ JupyterHub ", line)
        # What JupyterHub rightly says on a loaded machine, or of the demo's plain HTTP.
        and not any(said in line for said in ("without SSL", "is slow to"))
    ]
    assert hub_warnings == [], hub_warnings


def test_the_hubs_log_keeps_real_failures_to_stop() -> None:
    """Only the double stop's KeyError is left out; any other failure to stop is logged."""
    import logging

    from gpuhub.hub.web.api import QuietHubNoise

    def record(error: Exception) -> logging.LogRecord:
        return logging.LogRecord(
            "JupyterHub", logging.ERROR, "app.py", 1, "Failed to stop user: %s", (error,), None
        )

    quiet = QuietHubNoise()
    assert not quiet.filter(record(KeyError("")))
    assert quiet.filter(record(RuntimeError("the process would not die")))
