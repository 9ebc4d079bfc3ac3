"""The demo's fleet admin does what the README says admins do (issue 39, item 11).

`make demo`'s own config (jupyter_config/jupyterhub_config.py, through
tests.support.hub.demo), with GPU-hour budgets switched on: alice, the fleet admin, reads
``/hub/metrics`` and grants extra GPU-hours on the fleet page; bob, who may not, reads on
the fleet page who may, and a grant he tries is refused with the sentence why (form and REST).
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.hub.process import Hub
from tests.support.hub.demo import DEMO_ADMIN, DEMO_PASSWORD, start_demo_hub

pytestmark = pytest.mark.e2e

BUDGETS = """
c.LocalGPUSpawner.gpu_hours = {"default": {"hours": 2, "per": "week"}}
"""
WHO = "JupyterHub admins and holders of the scope custom:gpuhub:budgets"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir: Path = tmp_path_factory.mktemp("demo-fleet-admin")
    hub = start_demo_hub(workdir, extra=BUDGETS)
    try:
        yield hub
    finally:
        hub.stop()


def test_the_fleet_admin_reads_metrics_and_grants_hours(hub: Hub) -> None:
    alice = hub.login(DEMO_ADMIN, DEMO_PASSWORD)
    metrics = alice.get(f"{hub.url}/hub/metrics", timeout=30)
    assert metrics.status_code == 200, metrics.text[:500]
    assert "gpuhub_gpus{" in metrics.text
    page = alice.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    assert 'id="gpuhub-grant"' in page and 'id="gpuhub-who-may-grant"' not in page
    xsrf = alice.cookies.get("_xsrf", path="/hub/")
    hub.login("bob", DEMO_PASSWORD)  # bob exists once he has logged in
    done = alice.post(
        f"{hub.url}/hub/gpuhub/fleet/grant",
        data={"_xsrf": xsrf, "user": "bob", "hours": "1", "reason": "poster deadline"},
        timeout=60,
    )
    assert done.status_code == 200 and "Granted bob 1 extra GPU-hours" in done.text, done.text
    [budget] = hub.api("GET", "/gpuhub/holdings/bob").json()["budgets"]
    assert budget["extra_hours"] == 1 and budget["grants"][0]["by"] == DEMO_ADMIN


def test_others_read_who_may_grant_and_why_they_may_not(hub: Hub) -> None:
    bob = hub.login("bob", DEMO_PASSWORD)
    assert bob.get(f"{hub.url}/hub/metrics", timeout=30).status_code == 403
    [before] = hub.api("GET", "/gpuhub/holdings/bob").json()["budgets"]
    page = bob.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    assert 'id="gpuhub-grant"' not in page
    assert f"Extra GPU-hours are granted here by {WHO}." in page
    xsrf = bob.cookies.get("_xsrf", path="/hub/")
    refused = bob.post(
        f"{hub.url}/hub/gpuhub/fleet/grant",
        data={"_xsrf": xsrf, "user": "bob", "hours": "9", "reason": "more"},
        timeout=60,
    )
    assert refused.status_code == 403
    said = f"Only {WHO} may grant extra GPU-hours; you (bob) are neither, so ask one of them."
    assert html.escape(said) in refused.text, refused.text[-3000:]
    token = hub.api("POST", "/users/bob/tokens", json={"note": "grant test"}).json()["token"]
    answer = requests.post(
        f"{hub.api_url}/gpuhub/budgets/bob/grants",
        headers={"Authorization": f"token {token}"},
        json={"hours": 9, "reason": "more"},
        timeout=30,
    )
    assert answer.status_code == 403 and WHO in answer.json()["message"], answer.text
    [budget] = hub.api("GET", "/gpuhub/holdings/bob").json()["budgets"]
    assert budget["extra_hours"] == before["extra_hours"]  # bob granted himself nothing
