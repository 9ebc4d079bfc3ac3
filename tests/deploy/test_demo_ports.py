"""What both demos' shared set-up (jupyter_config/demo_common.py) promises beyond the walk in
test_demo_config.py: the hub's own ports are free ones, a hub that fails leaves no proxy
behind, and `make demo-k8s`'s hub and jobs service pick one default GPU type."""

from __future__ import annotations

import contextlib
import os
import runpy
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from traitlets.config import Config

from gpuhub.core.options import parse_launch_options
from gpuhub.core.policy import Policy
from gpuhub.core.policy_traits import POLICY_KEYS
from gpuhub.service.config import ServiceConfig
from harness.hub.process import ROOT, _env, free_port

DEMO_CONFIG = ROOT / "jupyter_config" / "jupyterhub_config.py"
K8S_CONFIG = ROOT / "jupyter_config" / "jupyterhub_config_k8s.py"


@contextlib.contextmanager
def listening(port: int) -> Iterator[socket.socket]:
    """Something else listening on 127.0.0.1:``port`` meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield sock


def start_demo(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    env = {**_env(), "GPUHUB_DEMO_PORT": str(port), "GPUHUB_DEMO_GPUS": "0,1"}
    env.pop("GPUHUB_DEMO_PASSWORD", None)
    with open(tmp_path / "hub.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(DEMO_CONFIG), *extra],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def proxy_pid(tmp_path: Path) -> int:
    """The proxy the hub started (JupyterHub writes its pid beside the hub)."""
    return int((tmp_path / "jupyterhub-proxy.pid").read_text())


@pytest.mark.e2e
def test_the_demo_moves_off_a_taken_hub_port(tmp_path: Path) -> None:
    """JupyterHub's own port is the demo's + 81 and the proxy's API + 1 where those are free;
    taken (another demo, another program), the hub takes free ones instead of failing."""
    port = free_port()
    with listening(port + 81), listening(port + 1):
        hub = start_demo(tmp_path, port)
        try:
            deadline = time.monotonic() + 90
            while True:
                with contextlib.suppress(requests.ConnectionError):
                    answer = requests.get(f"http://127.0.0.1:{port}/hub/login", timeout=5)
                    if answer.status_code == 200:
                        break
                log = (tmp_path / "hub.log").read_text()
                assert hub.poll() is None and time.monotonic() < deadline, log
                time.sleep(0.3)
            proxy = proxy_pid(tmp_path)
        finally:
            hub.terminate()
            hub.wait(30)
    assert "Failed to bind" not in (tmp_path / "hub.log").read_text()
    assert not alive(proxy)


@pytest.mark.e2e
def test_a_hub_that_fails_to_start_leaves_no_proxy(tmp_path: Path) -> None:
    """JupyterHub starts its proxy first, in a session of its own; a hub that then cannot bind
    its port exits, and the demo stops the proxy rather than leave it on the demo's port."""
    port, taken = free_port(), free_port()
    with listening(taken):
        hub = start_demo(tmp_path, port, f"--JupyterHub.hub_bind_url=http://127.0.0.1:{taken}")
        assert hub.wait(90) != 0
    log = (tmp_path / "hub.log").read_text()
    assert "Failed to bind hub" in log, log
    assert "stopping the hub's proxy" in log, log
    assert not alive(proxy_pid(tmp_path)), log
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # the demo's port is free again


def test_the_kubernetes_demos_hub_and_service_pick_one_default_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make demo-k8s` writes the service's policy with yaml.safe_dump, which sorts the types;
    a request naming no type gets the one the demo says is the default, on both."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUHUB_DEMO_PORT", str(free_port()))
    config = Config()
    runpy.run_path(str(K8S_CONFIG), init_globals={"get_config": lambda: config})
    hub = Policy.from_config(
        **{k: config.GPUSpawner[k] for k in POLICY_KEYS if k in config.GPUSpawner}
    )
    service = ServiceConfig.load(tmp_path / "gpuhub-service.yaml").policy
    assert list(service.gpu_types) == sorted(hub.gpu_types)  # what safe_dump did
    assert next(iter(hub.gpu_types)) == "sim" != sorted(hub.gpu_types)[0]
    for groups in ([], ["staff"], ["students"]):
        for policy in (hub, service):
            picked = parse_launch_options({"gpus": 1}, policy, groups).gpu_type
            assert picked is not None and picked.key == "sim", (groups, picked)
            assert policy.choices_for(groups).gpu_types[0].gpu_type.key == "sim"
