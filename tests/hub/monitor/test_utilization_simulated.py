"""The hub's view of simulated GPUs: as busy as the processes that use them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from gpuhub.core.holdings import Holding
from gpuhub.hub.monitor.utilization import SimulatedUtilization, holding_key

BUSY = "while True: pass"
IDLE = "import time; time.sleep(60)"


def start(code: str, device: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GPUHUB_SIMULATED_GPUS": "2", "CUDA_VISIBLE_DEVICES": str(device)}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


@pytest.mark.alone  # it measures CPU activity: neighbours would skew it
def test_a_busy_process_makes_its_simulated_gpu_busy_and_an_idle_one_idle() -> None:
    busy, idle = start(BUSY, 1), start(IDLE, 0)
    try:
        holdings = [
            Holding("alice", "server", "", 1, "Simulated GPU", devices=(0,)),
            Holding("bob", "server", "", 1, "Simulated GPU", devices=(1,)),
        ]
        source = SimulatedUtilization()

        async def sample() -> dict:
            await source.sample(holdings)  # the first look starts the CPU measurement
            time.sleep(1.5)
            return await source.sample(holdings)

        samples = asyncio.run(sample())
        (alice,) = samples[holding_key(holdings[0])]
        (bob,) = samples[holding_key(holdings[1])]
        assert bob.utilization > 0.5, bob
        assert alice.utilization < 0.2, alice
        assert alice.memory_used and bob.memory_used  # the processes' resident memory
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
