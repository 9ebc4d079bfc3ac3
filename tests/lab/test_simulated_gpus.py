"""Simulated GPUs and the assignment the lab learns from its spawner's environment.

A simulated GPU's figures are the CPU and resident memory of the processes whose
``CUDA_VISIBLE_DEVICES`` lists it: a busy child process with ``CUDA_VISIBLE_DEVICES=0`` must
move GPU 0 and leave GPU 1 idle, read through the same :class:`NVMLSource` as real GPUs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from gpuhub_lab import gpu_magic
from gpuhub_lab.metrics import simulated
from gpuhub_lab.metrics.assigned import assignment, describe
from gpuhub_lab.metrics.nvml import NVMLSource
from gpuhub_lab.metrics.sampler import GPUSampler, Sample

BUSY = "import time\nx = bytearray(300 * 2**20)\nend = time.time() + 60\nwhile time.time() < end: pass\n"


@pytest.fixture
def simulated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What LocalGPUSpawner(gpu_devices="simulated:4") sets for a server given GPUs 0 and 1."""
    for name in ("JPY_PARENT_PID", "GPUHUB_SERVER_URL", "GPUHUB_NVML_MODULE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUHUB_SIMULATED_GPUS", "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("GPUHUB_GPUS", "2")
    monkeypatch.setenv("GPUHUB_GPU_TYPE_NAME", "Simulated GPU")


@pytest.fixture
def stray_on_gpu0() -> Iterator[int]:
    """A process that sets CUDA_VISIBLE_DEVICES=0 but was not started under a server with
    simulated GPUs: not a simulated GPU's user."""
    env = {k: v for k, v in os.environ.items() if k != "GPUHUB_SIMULATED_GPUS"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**env, "CUDA_VISIBLE_DEVICES": "0"},
    )
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def busy_on_gpu0() -> Iterator[int]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    proc = subprocess.Popen([sys.executable, "-c", BUSY], env=env)
    try:
        time.sleep(0.5)  # let it allocate
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_assignment_from_the_spawners_environment() -> None:
    assert assignment({"GPUHUB_GPUS": "0", "CUDA_VISIBLE_DEVICES": ""}) is None
    assert assignment({}) is None
    local = assignment(
        {"GPUHUB_GPUS": "2", "CUDA_VISIBLE_DEVICES": "0,1", "GPUHUB_GPU_TYPE_NAME": "RTX A6000"}
    )
    whole = {"share": None, "gpu_memory": None, "share_text": None}
    assert local == {"devices": [0, 1], "gpu_type": "RTX A6000", "simulated": False, **whole}
    assert describe(local) == "GPUs 0, 1 (RTX A6000) assigned"
    # Kubernetes: the device plugin numbers the pod's GPUs from 0; no name -> "GPU".
    kube = assignment({"GPUHUB_GPUS": "1"})
    assert kube == {"devices": [0], "gpu_type": "GPU", "simulated": False, **whole}
    assert describe(kube) == "GPU 0 (GPU) assigned"
    # A share of one GPU (issue 24): the spawner's GPUHUB_GPU_SHARE / GPUHUB_GPU_MEMORY.
    share = {"GPUHUB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "3", "GPUHUB_GPU_TYPE_NAME": "T4"}
    by_memory = assignment(
        {**share, "GPUHUB_GPU_SHARE": "1/2", "GPUHUB_GPU_MEMORY": str(8 * 10**9)}
    )
    assert by_memory is not None and by_memory["share"] == 0.5
    assert by_memory["gpu_memory"] == 8 * 10**9
    assert describe(by_memory) == "8 GB of GPU 3 (T4) assigned"
    sliced = assignment({**share, "GPUHUB_GPU_SHARE": "1/4"})
    assert sliced is not None and sliced["gpu_memory"] is None
    assert describe(sliced) == "0.25 of GPU 3 (T4, time-sliced) assigned"
    assert assignment({**share, "GPUHUB_GPU_SHARE": "nonsense"})["share"] is None  # type: ignore[index]


def test_the_sampler_picks_simulated_gpus_only_when_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPUHUB_SIMULATED_GPUS", raising=False)
    assert GPUSampler().nvml_module == "pynvml"  # production default never simulates
    monkeypatch.setenv("GPUHUB_SIMULATED_GPUS", "4")
    sampler = GPUSampler()
    assert sampler.nvml_module == simulated.__name__ and sampler.simulated


async def test_simulated_full_reads_never_run_on_the_loop(
    simulated_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting simulated GPUs may wait a measuring window (a new process: a kernel just
    started); however quick the last ones were, that read stays off the server's loop, while
    the moving figures, dictionary lookups, are read there."""
    from gpuhub.core import simulated as core

    loop_thread = threading.get_ident()
    measured: list[int] = []  # the thread of every measurement (every full read)

    def refresh() -> core.Usage:
        measured.append(threading.get_ident())
        return core.Usage()  # at once: as quick as a read on a quiet machine

    monkeypatch.setattr(core.TRACKER, "refresh", refresh)
    sampler = GPUSampler(interval=0.1)
    got: list[Sample] = []
    sampler.listen(got.append)
    try:
        deadline = time.monotonic() + 30
        while not (len(measured) >= 4 and any(s.read_on_loop for s in got)):
            assert time.monotonic() < deadline, f"{len(measured)} full reads, {len(got)} samples"
            await asyncio.sleep(0.05)
    finally:
        sampler.stop()
    assert loop_thread not in measured
    assert all(not s.full for s in got if s.read_on_loop)


@pytest.mark.alone  # it measures CPU activity: neighbours would skew it
def test_a_busy_process_moves_only_its_simulated_gpu(
    simulated_env: None, busy_on_gpu0: int, stray_on_gpu0: int
):
    source = NVMLSource(simulated.__name__, visible="0,1")
    try:
        source.read()  # cpu_percent measures between two reads
        time.sleep(1.0)
        gpus, reason = source.read()
    finally:
        source.close()
    assert reason is None
    assert [g["index"] for g in gpus] == [0, 1]  # 2 and 3 belong to other servers
    gpu0, gpu1 = gpus
    assert gpu0["name"] == "Simulated GPU" and not gpu0["mig"]
    # One busy core is 100 %; on a loaded 2-core test machine it gets less, never nothing.
    assert gpu0["utilization"] >= 20, gpu0
    assert gpu0["memory_used"] >= 300 * 2**20
    pids = [p["pid"] for p in gpu0["processes"]]
    assert busy_on_gpu0 in pids and stray_on_gpu0 not in pids
    assert gpu0["temperature"] is None and gpu0["power"] is None
    assert gpu1["utilization"] == 0 and gpu1["processes"] == []


def test_gpu_magic_names_simulated_gpus(simulated_env: None, busy_on_gpu0: int):
    report = gpu_magic.gpu("")
    assert report is not None
    text = repr(report)
    assert text.startswith("GPUs 0, 1 (Simulated GPU) assigned to this server. Simulated:")
    assert "GPU 0: Simulated GPU" in text
    assert "Simulated" in report._repr_html_()


def test_gpu_magic_without_a_driver_says_assigned_not_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("JPY_PARENT_PID", "GPUHUB_SERVER_URL", "GPUHUB_SIMULATED_GPUS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUHUB_NVML_MODULE", "harness.fake_nvml")
    from harness import fake_nvml as fake

    fake.install(fake.Scenario(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("GPUHUB_GPUS", "2")
    monkeypatch.setenv("GPUHUB_GPU_TYPE_NAME", "NVIDIA RTX A6000")
    report = gpu_magic.gpu("")
    text = repr(report)
    assert text.startswith("GPUs 0, 1 (NVIDIA RTX A6000) assigned to this server.")
    assert "No live figures: No NVIDIA driver" in text
    assert "again" not in text and "No GPU" not in text
    assert "No GPU" not in report._repr_html_()


MACHINERY = (
    "import os, subprocess, sys, time\n"
    "os.environ.pop('GPUHUB_SIMULATED_MACHINERY')\n"  # as the server and a job's runner do
    "child = subprocess.Popen([sys.executable, '-c', {busy!r}])\n"
    "end = time.time() + 60\n"
    "while time.time() < end: pass\n"
)


def test_jupyter_machinery_is_not_a_simulated_gpu_user(simulated_env: None) -> None:
    """A Jupyter server and a job's runner carry GPUHUB_SIMULATED_MACHINERY=1: busy as they
    may be, they are not a GPU's users; the kernel they start is (one rule for the sidebar,
    %gpu and the hub)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "GPUHUB_SIMULATED_MACHINERY": "1"}
    runner = subprocess.Popen([sys.executable, "-c", MACHINERY.format(busy=BUSY)], env=env)
    try:
        import psutil

        deadline = time.monotonic() + 30
        while not (children := psutil.Process(runner.pid).children()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        from gpuhub.core.simulated import Tracker

        usage = Tracker().refresh()
        pids = [pid for pid, _ in usage.processes.get(0, [])]
        assert children[0].pid in pids and runner.pid not in pids
    finally:
        for child in psutil.Process(runner.pid).children(recursive=True):
            child.kill()
        runner.kill()
        runner.wait()


def test_the_hub_and_the_lab_read_the_same_figures(simulated_env: None, busy_on_gpu0: int):
    """The fleet page (the hub's source, every 30 s) and the sidebar (the lab's sampler, every
    second) both measure the last second: the same busy GPU reads busy on both."""
    import asyncio

    from gpuhub.core.holdings import Holding
    from gpuhub.hub.monitor.utilization import SimulatedUtilization, holding_key

    holding = Holding("alice", "server", "", 1, "Simulated GPU", devices=(0,))
    simulated.TRACKER.expire()  # as after a hub tick 30 s ago
    (hub,) = asyncio.run(SimulatedUtilization().sample([holding]))[holding_key(holding)]
    source = NVMLSource(simulated.__name__, visible="0")
    try:
        (lab,), _ = source.read()
    finally:
        source.close()
    assert hub.utilization >= 0.2 and lab["utilization"] >= 20, (hub, lab)
    assert abs(hub.memory_used - lab["memory_used"]) < 8 * 2**20, (hub, lab)
