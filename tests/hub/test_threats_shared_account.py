"""Threat: ``run_as_hub_user`` servers share one OS account, exposed beyond the machine.

Every user can read every other user's files, ``/proc/<pid>/environ`` (their
``JUPYTERHUB_API_TOKEN``) and the hub's secrets. The hub therefore refuses to start such
servers on a non-loopback address unless the admin acknowledges it, and homes are 0700 so
at least other OS accounts on the workstation stay out.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from gpuhub.hub.local_account import is_loopback, public_host
from gpuhub.hub.local_gpu_spawner import LocalGPUSpawner
from harness.hub.process import Hub, spawn_json, start_hub

EXPOSED = """
c.JupyterHub.ip = "0.0.0.0"
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = []
"""


@pytest.fixture(scope="module")
def exposed_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("exposed-hub"), EXPOSED)
    try:
        hub.api("POST", "/users/mallory")
        yield hub
    finally:
        hub.api("DELETE", "/users/mallory/server")
        hub.stop()


@pytest.mark.e2e
def test_threat_shared_account_on_a_public_address_is_refused(exposed_hub):
    response = spawn_json(exposed_hub, "mallory", {})
    assert response.status_code == 403, response.text
    assert response.json()["message"] == (
        "This hub runs every server as one shared OS account and listens on 0.0.0.0, so it "
        "will not start servers until the admin sets "
        "LocalGPUSpawner.run_as_hub_user_acknowledge_shared_account = True or binds "
        "JupyterHub.ip to 127.0.0.1."
    )
    assert not exposed_hub.user_model("mallory")["servers"]
    assert not (exposed_hub.workdir / "gpuhub-users" / "mallory").exists()  # nothing made
    assert "can read every other user's files and API tokens" in exposed_hub.log()


@pytest.mark.parametrize(
    ("hub_config", "host", "loopback"),
    [
        ({}, "", False),  # JupyterHub's default: every address
        ({"ip": "127.0.0.1"}, "127.0.0.1", True),
        ({"ip": "::1"}, "::1", True),
        ({"ip": "localhost"}, "localhost", True),
        ({"ip": "10.0.0.5"}, "10.0.0.5", False),
        ({"ip": "127.0.0.1", "bind_url": "http://0.0.0.0:8000/"}, "0.0.0.0", False),
        ({"bind_url": "http://[::1]:8000/"}, "::1", True),
        ({"ip": "hub.example.org"}, "hub.example.org", False),
    ],
)
def test_public_host_follows_jupyterhub_bind_settings(hub_config, host, loopback):
    config = Config({"JupyterHub": hub_config})
    assert public_host(config) == host
    assert is_loopback(host) is loopback


def test_acknowledged_or_loopback_starts():
    def check(acknowledged: bool, ip: str) -> None:
        spawner = SimpleNamespace(
            run_as_hub_user_acknowledge_shared_account=acknowledged,
            config=Config({"JupyterHub": {"ip": ip}}),
            log=SimpleNamespace(error=lambda *a: None),
            _log_name="mallory",
        )
        LocalGPUSpawner.check_shared_account_exposure(spawner)  # type: ignore[arg-type]

    check(True, "0.0.0.0")
    check(False, "127.0.0.1")
    with pytest.raises(Exception, match="acknowledge_shared_account"):
        check(False, "0.0.0.0")


def test_threat_homes_are_private(tmp_path, monkeypatch):
    home = tmp_path / "gpuhub-users" / "mallory"
    home.parent.mkdir()
    home.mkdir(mode=0o755)  # as an older gpuhub made it
    spawner = SimpleNamespace(
        run_as_hub_user=True, home_dir=str(home), check_shared_account_exposure=lambda: None
    )
    monkeypatch.chdir(tmp_path)
    LocalGPUSpawner._shared_account_preexec(spawner, "mallory")()  # type: ignore[arg-type]
    assert home.stat().st_mode & 0o777 == 0o700
    fresh = tmp_path / "gpuhub-users" / "eve"
    spawner.home_dir = str(fresh)
    LocalGPUSpawner._shared_account_preexec(spawner, "eve")()  # type: ignore[arg-type]
    assert fresh.stat().st_mode & 0o777 == 0o700
