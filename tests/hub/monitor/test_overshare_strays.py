"""No process escapes the over-share watch by dropping ``GPUHUB_LAUNCH`` (issue 39).

Where users have their own OS accounts, a process without its grant counts for the share
of that GPU held by the user its account is named for (then the watch warns and stops that
server as for any over-share). Otherwise its memory proves no holder: the hub ends the
process once that has lasted ``gpu_share_grace`` and tells the fleet admins its pid and OS
account. The second is checked through a real hub whose servers share one OS account
(``run_as_hub_user``), on a simulated GPU no other test uses (others run side by side).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator
from fractions import Fraction

import pytest

from gpuhub.core.env import LAUNCH_ENV, MACHINERY_ENV
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.launches import Proof, launch_key
from gpuhub.hub.monitor.overshare import ShareWatch, StrayWatch
from gpuhub.hub.monitor.utilization import (
    GPUSample,
    NVMLUtilization,
    Unexplained,
    account_name,
    attribute,
    holding_key,
)
from harness import fake_nvml
from harness.hub.process import Hub, spawn, start_hub, wait_ready
from tests.support.hub.local import LOCAL_HUB_CONFIG, server_env

GB = 10**9
KEY = launch_key(b"the stray tests' cookie secret")
ME = pwd.getpwuid(os.getuid()).pw_name
NOBODY = 65534


def share(user: str, memory: int, device: int = 0) -> Holding:
    return Holding(
        user,
        "server",
        "",
        1,
        "T4",
        devices=(device,),
        share=Fraction(memory, 16 * GB),
        memory=memory,
    )


def test_without_its_grant_a_process_counts_for_its_accounts_users_share() -> None:
    holdings = [share(ME, 4 * GB), share("bob", 4 * GB)]
    processes = {0: [(101, 5 * GB), (102, GB)]}
    accounts = {101: os.getuid(), 102: NOBODY}
    own, [stray] = attribute(processes, {}, holdings, accounts, Proof(KEY))
    # Each user's own account: the process is its user's, and over that user's share.
    assert own == {(0, ME, ""): 5 * GB}
    assert (stray.pids, stray.accounts, stray.used) == ((102,), (account_name(NOBODY),), GB)
    watch = ShareWatch(grace=60)
    sample = (GPUSample("0", 0.5, 6 * GB, own[(0, ME, "")]),)
    warned, _ = watch.observe([((ME, "server", ""), holdings[0], sample)], now=0)
    assert warned == [(ME, "server", "")]
    # One account for every server (run_as_hub_user): the account proves nobody's share.
    own, [stray] = attribute(processes, {}, holdings, accounts, Proof(KEY, shared_account=True))
    assert own == {} and stray.pids == (101, 102) and stray.used == 6 * GB
    # Nor does an account whose user holds no share of that GPU.
    own, [stray] = attribute(processes, {}, [share("bob", 4 * GB)], accounts, Proof(KEY))
    assert own == {} and stray.pids == (101, 102)


def test_nvml_reads_whose_account_a_process_without_its_grant_runs_as(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the NVML stand-in and a real process of this test's own OS account, which
    carries no grant: the hub reads its account from the process itself."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
        env={k: v for k, v in os.environ.items() if k != LAUNCH_ENV},
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        scenario = fake_nvml.a100s(1, memory_used=6 * GB)
        scenario.gpus[0].processes = [fake_nvml.FakeProcess(proc.pid, 5 * GB)]
        fake_nvml.install(scenario)
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
        holdings = [share(ME, 4 * GB), share("bob", 4 * GB)]
        own_accounts = NVMLUtilization(proof=Proof(KEY))
        samples = asyncio.run(own_accounts.sample(holdings))
        [mine] = samples[holding_key(holdings[0])]
        assert mine.own_memory == 5 * GB and own_accounts.unexplained[0].used == 0
        shared = NVMLUtilization(proof=Proof(KEY, shared_account=True))
        asyncio.run(shared.sample(holdings))
        [stray] = shared.unexplained
        assert (stray.pids, stray.accounts, stray.used) == ((proc.pid,), (ME,), 5 * GB)
    finally:
        proc.kill()
        proc.wait()


def test_unexplained_processes_are_ended_after_the_grace_and_the_admins_told() -> None:
    watch = StrayWatch(grace=10)
    seen = Unexplained("0", "T4", 3 * GB, (7, 8), ("carol", "root"))
    assert watch.observe([seen], now=100) == []
    assert watch.observe([seen], now=105) == []
    # 8 ended by itself: it is forgotten; 7 has lasted the grace.
    assert watch.observe([Unexplained("0", "T4", GB, (7,), ("carol",))], now=110) == [7]
    said = watch.ended(7, 110)
    assert "ended process 7 (OS account carol) on shared GPU 0" in said and "10 s" in said
    # Memory that is all explained ends nothing.
    assert watch.observe([Unexplained("0", "T4", 0, (), ())], now=200) == []


STRAYS = (
    LOCAL_HUB_CONFIG
    + """
c.Authenticator.admin_users = {"root"}
from gpuhub import configure_hub
configure_hub(c)
c.LocalGPUSpawner.gpu_devices = "simulated:4"
c.LocalGPUSpawner.gpu_types = {
    "shared": {
        "display_name": "Simulated GPU, shared",
        "devices": [3],
        "sharing": {"memory": "2G", "min": "100M"},
    },
}
c.LocalGPUSpawner.default_limits = {"max_gpus": 1}
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.LocalGPUSpawner.gpu_share_grace = 3
"""
)
HOG = "b = bytearray(300 * 10**6); print('up', flush=True); import time; time.sleep(300)"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("strays-hub"), STRAYS)
    try:
        options = {"gpus": 1, "gpu_type": "shared", "gpu_memory": "1G"}
        assert spawn(hub, "carol", options).status_code in (201, 202)
        wait_ready(hub, "carol")
        yield hub
    finally:
        hub.api("DELETE", "/users/carol/server")
        hub.stop()


@pytest.mark.e2e
def test_a_process_that_dropped_its_grant_is_ended_and_the_fleet_admins_told(hub: Hub) -> None:
    """carol's kernel environment without ``GPUHUB_LAUNCH``: under her 1 GB share, yet its
    memory proves no holder of the GPU. It is ended after the grace; carol's server runs on."""
    env = {
        k: v for k, v in server_env(hub, "carol").items() if k not in (LAUNCH_ENV, MACHINERY_ENV)
    }
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", HOG], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert proc.wait(timeout=90) != 0, hub.log()[-3000:]
        # Not before the grace (3 s from when the hub first saw it, after it started).
        assert time.monotonic() - started >= 2.9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = f"ended process {proc.pid} (OS account {ME}) on shared GPU 3"
    deadline = time.monotonic() + 30  # the hub says so once it has seen the process gone
    while said not in hub.log():
        assert time.monotonic() < deadline, hub.log()[-3000:]
        time.sleep(0.2)
    fleet = hub.login("root").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    assert said in fleet, fleet[-3000:]
    assert hub.user_model("carol")["servers"][""]["ready"]  # nobody's share was charged
