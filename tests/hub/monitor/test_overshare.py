"""The over-share watch (issue 24, item 3), in-process: what a share's own processes use of
its GPU, from NVML's per-process memory (the NVML stand-in) and, for simulated GPUs, from
resident memory; and the watch's warn-then-stop with the sentence it gives. A process counts
for a server only when it proves it (its launch's signed grant, its OS account: issue 31,
item 1); the rest of a shared GPU's memory is unexplained, charged to nobody. The hub-level
checks (a real server warned, then stopped; the attacks through real processes) are
test_overshare_hub.py and test_overshare_proof.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from fractions import Fraction

import psutil
import pytest

from gpuhub.core.env import LAUNCH_ENV
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.launches import Launch, Proof, launch_key, sign
from gpuhub.hub.monitor.overshare import ShareWatch
from gpuhub.hub.monitor.utilization import (
    GPUSample,
    NVMLUtilization,
    SimulatedUtilization,
    holding_key,
)
from harness import fake_nvml

GB = 10**9
MB = 10**6


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


KEY = launch_key(b"the over-share tests' cookie secret")
# The test's processes run as its own OS account, as servers do with run_as_hub_user.
PROOF = Proof(KEY, shared_account=True)


def server_process(
    user: str, code: str, device: int = 0, *, grant: bool = True, says: str = ""
) -> subprocess.Popen[bytes]:
    """A process of ``user``'s default server, as its kernels are: the launch's signed grant
    in its environment (``grant``), and JupyterHub's ``JUPYTERHUB_USER`` saying ``says``
    (anyone may set it: it proves nothing)."""
    env = {k: v for k, v in os.environ.items() if k not in (LAUNCH_ENV, "JUPYTERHUB_USER")}
    env.update({"GPUHUB_SIMULATED_GPUS": "2", "CUDA_VISIBLE_DEVICES": str(device)})
    if grant:
        env[LAUNCH_ENV] = sign(KEY, Launch(user, "", f"launch-{user}", (device,), "T4"))
    if says:
        env.update({"JUPYTERHUB_USER": says, "JUPYTERHUB_SERVER_NAME": ""})
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)


SLEEP = "import sys, time; print('up', flush=True); time.sleep(120)"
HOG = "import sys, time; b = bytearray(300 * 10**6); print('up', flush=True); time.sleep(120)"


def test_nvml_per_process_memory_is_what_a_shares_own_processes_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ann, bob = server_process("ann", SLEEP), server_process("bob", SLEEP, says="ann")
    # Says it is ann's, carries no grant; and a grant of another GPU (1) used on GPU 0.
    liar = server_process("mallory", SLEEP, grant=False, says="ann")
    astray = server_process("ann", SLEEP, device=1)
    processes = (ann, bob, liar, astray)
    try:
        for proc in processes:
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        scenario = fake_nvml.a100s(1, memory_used=14 * GB)
        scenario.gpus[0].processes = [
            fake_nvml.FakeProcess(ann.pid, 6 * GB),
            fake_nvml.FakeProcess(bob.pid, 3 * GB),
            fake_nvml.FakeProcess(os.getpid(), GB),  # not a server's: counted for nobody
            fake_nvml.FakeProcess(liar.pid, 2 * GB),
            fake_nvml.FakeProcess(astray.pid, 2 * GB),
        ]
        fake_nvml.install(scenario)
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
        holdings = [share("ann", 4 * GB), share("bob", 4 * GB)]
        source = NVMLUtilization(proof=PROOF)
        samples = asyncio.run(source.sample(holdings))
        [a] = samples[holding_key(holdings[0])]
        [b] = samples[holding_key(holdings[1])]
        # bob's process counts for bob whatever it says; what proves nobody, for nobody.
        assert (a.own_memory, b.own_memory) == (6 * GB, 3 * GB)
        assert a.memory_used == 14 * GB  # the device's, as before
        [stray] = source.unexplained
        assert (stray.gpu, stray.gpu_type, stray.used) == ("0", "T4", 5 * GB)
        assert stray.pids == tuple(sorted((os.getpid(), liar.pid, astray.pid)))
        # Without a proof (no hub key) nobody's own memory is known: never counted as over.
        [u] = asyncio.run(NVMLUtilization().sample(holdings))[holding_key(holdings[0])]
        assert u.own_memory is None
        # Whole GPUs: no per-process reading at all (it costs NVML calls for nothing).
        fake_nvml.calls.clear()
        whole = Holding("ann", "server", "", 1, "A100", devices=(0,))
        [w] = asyncio.run(source.sample([whole]))[holding_key(whole)]
        assert w.own_memory is None and source.unexplained == ()
        assert "nvmlDeviceGetComputeRunningProcesses" not in fake_nvml.calls
    finally:
        for proc in processes:
            proc.kill()
            proc.wait()


def test_simulated_gpus_count_a_servers_resident_memory_as_its_gpu_memory() -> None:
    hog, other = server_process("ann", HOG, 0), server_process("bob", SLEEP, 0)
    # A process that says it is bob's, with no grant: its memory is bob's problem no more.
    liar = server_process("carol", HOG, 0, grant=False, says="bob")
    processes = (hog, other, liar)
    try:
        for proc in processes:
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        holdings = [share("ann", 100 * MB), share("bob", 100 * MB)]
        source = SimulatedUtilization(proof=PROOF)
        samples = asyncio.run(source.sample(holdings))
        [a] = samples[holding_key(holdings[0])]
        [b] = samples[holding_key(holdings[1])]
        assert (
            a.own_memory is not None
            and a.own_memory >= psutil.Process(hog.pid).memory_info().rss * 0.9
        )
        assert a.own_memory > 300 * MB
        assert b.own_memory is not None and b.own_memory < 100 * MB
        # Other simulated GPUs' users on this machine (other hubs' tests) may be there too.
        [stray] = source.unexplained
        assert stray.gpu == "0" and liar.pid in stray.pids
        assert stray.used >= psutil.Process(liar.pid).memory_info().rss * 0.9
    finally:
        for proc in processes:
            proc.kill()
            proc.wait()


def test_the_watch_warns_at_once_stops_after_the_grace_and_forgives_a_share_back_under() -> None:
    watch = ShareWatch(grace=60)
    ann, bob = share("ann", 4 * GB), share("bob", 8 * GB)
    over = (GPUSample("0", 0.5, 12 * GB, 6 * GB),)
    under = (GPUSample("0", 0.5, 12 * GB, 3 * GB),)
    a, b = holding_key(ann), holding_key(bob)
    now = time.time()
    assert watch.observe([(a, ann, over), (b, bob, over)], now) == ([a], [])
    warning = watch.warning(ann, a)
    assert "uses 6 GB of GPU 0, more than its 4 GB share of T4" in warning
    assert "will be stopped on" in warning and "unless it uses less" in warning
    assert watch.observe([(a, ann, over)], now + 30) == ([], [])  # warned once
    assert watch.observe([(a, ann, under)], now + 40) == ([], [])  # back under: forgiven
    assert a not in watch.over
    assert watch.observe([(a, ann, over)], now + 50) == ([a], [])  # a new warning, a new clock
    assert watch.observe([(a, ann, over)], now + 110) == ([], [a])
    assert watch.reason(ann, a) == (
        "its processes used 6 GB of GPU 0, more than its 4 GB share, for 1 minute "
        "(the others sharing that GPU need the rest)"
    )
    # Unknown memory (no per-process reading) and whole GPUs are never over.
    unknown = (GPUSample("0", 0.5, 12 * GB),)
    whole = Holding("cat", "server", "", 1, "T4", devices=(0,))
    assert watch.observe([(a, ann, unknown), (holding_key(whole), whole, over)], now) == ([], [])
