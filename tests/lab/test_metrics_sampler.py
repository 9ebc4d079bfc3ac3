"""The background sampler: interval floor, ring buffer, idle sleep, error survival, service."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config

from gpuhub_lab.metrics.nvml import NVMLSource
from gpuhub_lab.metrics.sampler import (
    FACTS_SECONDS,
    LOOP_READ_SECONDS,
    LOOP_READ_WINDOW,
    MAX_HISTORY,
    MIN_INTERVAL,
    GPUSampler,
    Sample,
)
from gpuhub_lab.metrics.service import MetricsService
from harness import fake_nvml as fake

FAKE = "harness.fake_nvml"


def make_sampler(**config: object) -> GPUSampler:
    c = Config()
    for key, value in {"nvml_module": FAKE, **config}.items():
        c.GPUSampler[key] = value
    return GPUSampler(config=c)


def test_admin_config_and_interval_floor():
    sampler = make_sampler(interval=MIN_INTERVAL, history_seconds=60)
    assert sampler.interval == MIN_INTERVAL == 0.1  # 10 Hz, as live charts move
    assert sampler.history_length == int(60 / MIN_INTERVAL)
    for too_fast in (0.05, 0.0, -1.0, float("nan")):
        with pytest.raises(TraitError, match=r"must be at least 0\.1 seconds") as refused:
            make_sampler(interval=too_fast)
        assert f"not {too_fast:g}." in str(refused.value)
    assert make_sampler(interval=0.5, history_seconds=1e9).history_length == MAX_HISTORY
    with pytest.raises(Exception, match="idle_timeout must be positive"):
        make_sampler(idle_timeout=0)


def test_history_is_a_capped_ring_buffer_of_compact_entries():
    fake.install(fake.a100s(2, utilization=5))
    sampler = make_sampler(interval=1, history_seconds=3)
    for _ in range(5):
        sampler.sample_once()
        time.sleep(0.002)  # times are kept to the millisecond
    history = [json.loads(e) for e in sampler.history_since(None)]
    assert len(history) == 3
    assert [t["time"] for t in history] == sorted(t["time"] for t in history)
    assert set(history[0]["gpus"][0]) == {
        "uuid",
        "utilization",
        "memory_used",
        "temperature",
        "power",
    }
    newest = history[-1]["time"]
    assert sampler.history_since(newest) == []
    assert [json.loads(e)["time"] for e in sampler.history_since(history[0]["time"])] == [
        h["time"] for h in history[1:]
    ]


def test_at_10_hz_utilization_and_memory_move_every_sample_the_rest_once_a_second():
    scenario = fake.a100s(2, utilization=10)
    scenario.gpus[0].processes = [fake.FakeProcess(11, 1)]
    fake.install(scenario)
    sampler = make_sampler(interval=MIN_INTERVAL)
    mapped: list[set[int]] = []
    sampler.pid_mapper = lambda pids: mapped.append(pids) or {}
    first = sampler.sample_once()  # the first reads everything
    assert first.full
    scenario.gpus[0].utilization = 90
    scenario.gpus[0].memory_used = 7 * 2**30
    scenario.gpus[0].temperature = first.gpus[0]["temperature"] + 9
    scenario.gpus[0].processes = [fake.FakeProcess(12, 2)]
    fake.calls.clear()
    light = sampler.sample_once()
    assert not light.full
    assert light.gpus[0]["utilization"] == 90  # the figures are fresh
    assert light.gpus[0]["memory_used"] == 7 * 2**30
    # Every figure is still in the sample: the slow ones repeat the last full read.
    assert set(light.gpus[0]) == set(first.gpus[0])
    assert light.gpus[0]["temperature"] == first.gpus[0]["temperature"]
    assert light.gpus[0]["power"] == first.gpus[0]["power"]
    assert [p["pid"] for p in light.gpus[0]["processes"]] == [11]  # processes: last full read
    # Two NVML calls per GPU.
    assert fake.calls == {"nvmlDeviceGetUtilizationRates": 2, "nvmlDeviceGetMemoryInfo": 2}
    assert len(mapped) == 1  # nor are processes mapped to kernels again
    sampler._facts_at -= FACTS_SECONDS  # as if a second had passed
    full = sampler.sample_once()
    assert [p["pid"] for p in full.gpus[0]["processes"]] == [12] and len(mapped) == 2
    assert full.full and full.gpus[0]["temperature"] == first.gpus[0]["temperature"] + 9
    # A device failing in a figures-only read gets a full read, which reports it.
    scenario.gpus[1].fail = {"nvmlDeviceGetMemoryInfo": fake.NVML_ERROR_GPU_IS_LOST}
    lost = sampler.sample_once()
    assert lost.gpus[1]["error"] == "NVML cannot read this GPU: GPU is lost."
    assert lost.gpus[0]["utilization"] == 90 and lost.gpus[0]["error"] is None
    assert len(mapped) == 3
    # At 1 s (the default) every sample reads everything.
    slow = make_sampler(interval=1.0)
    slow.pid_mapper = lambda pids: mapped.append(pids) or {}
    slow.sample_once()
    slow.sample_once()
    assert len(mapped) == 5


def test_a_crashing_source_becomes_a_reason_and_sampling_goes_on():
    sampler = make_sampler()

    class Broken:
        def read(self) -> None:
            raise RuntimeError("boom")

        def close(self) -> None:
            pass

    sampler._source = Broken()
    sample = sampler.sample_once()
    assert not sample.available and sample.reason == "Reading GPU metrics failed: boom."
    fake.install(fake.a100s(1))
    sampler._source = None
    assert sampler.sample_once().available


def test_a_dcgm_source_without_its_url_is_a_reason_not_a_crash():
    sampler = make_sampler(source="dcgm")
    sample = sampler.sample_once()
    assert not sample.available
    assert sample.reason == (
        "GPUSampler.source is 'dcgm' but GPUSampler.dcgm_url is not set: set it to the DCGM "
        "exporter's metrics URL."
    )


def test_pid_mapper_labels_processes_and_its_failure_does_not_lose_the_sample():
    scenario = fake.a100s(1)
    scenario.gpus[0].processes = [fake.FakeProcess(11, 1), fake.FakeProcess(12, 2)]
    fake.install(scenario)
    sampler = make_sampler()
    sampler.pid_mapper = lambda pids: {11: "kernel-a"} if pids == {11, 12} else {}
    sample = sampler.sample_once()
    assert [p["kernel_id"] for p in sample.gpus[0]["processes"]] == ["kernel-a", None]
    assert sample.kernel_ids() == {"kernel-a"}

    def broken(pids: set[int]) -> dict[int, str]:
        raise OSError("no /proc")

    sampler.pid_mapper = broken
    assert sampler.sample_once().available


async def test_samples_only_while_clients_poll_then_sleeps_and_wakes():
    fake.install(fake.a100s(1))
    sampler = make_sampler(interval=MIN_INTERVAL, idle_timeout=0.6)
    try:
        assert sampler.samples_taken == 0  # nothing runs before the first request
        first = await sampler.latest()
        assert first is not None and first.available
        await asyncio.sleep(0.5)
        assert sampler.samples_taken >= 2  # sampling in the background while polled
        await asyncio.sleep(1.2)  # nobody asks: it goes to sleep
        asleep = sampler.samples_taken
        await asyncio.sleep(1.0)
        assert sampler.samples_taken == asleep
        assert sampler.sleeping
        woken = await sampler.latest()  # a request wakes it and gets a fresh sample
        assert woken is not None and woken.seq > first.seq
        assert time.monotonic() - woken.mono < 1.0
    finally:
        sampler.stop()
    stopped = sampler.samples_taken
    await asyncio.sleep(3 * MIN_INTERVAL)
    assert sampler.samples_taken == stopped and sampler._timer is None


class TimedSource(NVMLSource):
    """The NVML stand-in, noting which thread each read runs in, and as slow as told."""

    def __init__(self) -> None:
        super().__init__(FAKE)
        self.delay = 0.0
        self.threads: list[int] = []

    def read(self) -> Any:
        self._note()
        return super().read()

    def read_figures(self, previous: list[dict[str, Any]]) -> Any:
        self._note()
        return super().read_figures(previous)

    def _note(self) -> None:
        self.threads.append(threading.get_ident())
        if self.delay:
            time.sleep(self.delay)  # a slow driver


async def until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_in_a_server_the_loop_is_the_clock_and_reads_there_only_while_quick():
    fake.install(fake.a100s(2))
    sampler = make_sampler(interval=MIN_INTERVAL)
    source = sampler._source = TimedSource()
    loop_thread = threading.get_ident()
    got: list[tuple[Sample, int]] = []
    sampler.listen(lambda sample: got.append((sample, threading.get_ident())))
    try:
        # The first read of each kind runs in the reader thread (NVML starts in the first);
        # once reads of a kind are known to be quick, they run on the loop itself.
        await until(lambda: sum(s.read_on_loop and s.full for s, _ in got) >= 1, "full reads")
        assert got[0][0].full and source.threads[0] != loop_thread
        for full in (True, False):
            first = next(s for s, _ in got if s.full is full)
            assert not first.read_on_loop
            assert source.threads[first.seq - 1] != loop_thread
        assert [s.seq for s, _ in got] == list(range(1, len(got) + 1))  # every one, in order
        # Wherever it was read, every sample reaches listeners on the loop: no thread clock.
        assert {thread for _, thread in got} == {loop_thread} and sampler._thread is None
        on_loop = [s for s, _ in got if s.read_on_loop]
        assert on_loop and sampler.samples_on_loop == len(on_loop)
        assert {source.threads[s.seq - 1] for s in on_loop} == {loop_thread}

        # The driver turns slow: within a few reads of each kind they leave the loop.
        source.delay = 2 * LOOP_READ_SECONDS
        seen = len(got)
        await until(
            lambda: (
                not sampler.reads_on_loop(full=False)
                and not sampler.reads_on_loop(full=True)
                and len(got) > seen + 2 * LOOP_READ_WINDOW
                and not any(s.read_on_loop for s, _ in got[-LOOP_READ_WINDOW:])
            ),
            "slow reads to move to the reader thread",
        )
        slow = [s for s, _ in got[seen:]]
        # At most the reads it took for the median of each kind to turn.
        for full in (True, False):
            assert sum(s.read_on_loop for s in slow if s.full is full) <= LOOP_READ_WINDOW // 2 + 1
        assert {thread for _, thread in got} == {loop_thread}
        assert [s.seq for s, _ in got] == list(range(1, len(got) + 1))
    finally:
        sampler.stop()


def test_only_a_started_nvml_reads_on_the_loop_never_dcgm():
    from gpuhub_lab.metrics.dcgm import DCGMSource

    fake.install(fake.a100s(1))
    sampler = make_sampler()
    assert not sampler.reads_on_loop(full=True)  # nothing known yet
    sampler._source = NVMLSource(FAKE)
    sampler._costs[True].extend([0.0001] * 3)
    assert not sampler.reads_on_loop(full=True)  # NVML not started: starting it may be slow
    sampler.sample_once()
    assert sampler.reads_on_loop(full=True)
    sampler._source = DCGMSource("http://127.0.0.1:9/metrics")  # the network: never
    assert not sampler.reads_on_loop(full=True)


def test_a_listener_keeps_it_sampling_without_polls_until_it_leaves():
    fake.install(fake.a100s(1))
    sampler = make_sampler(interval=MIN_INTERVAL, idle_timeout=0.3)
    got: list[int] = []
    try:
        assert sampler.sleeping
        sampler.listen(lambda sample: got.append(sample.seq))  # starts the thread
        assert not sampler.sleeping
        assert sampler._loop is None  # no event loop here: the sampler's thread is the clock
        deadline = time.monotonic() + 30
        while len(got) < 8 and time.monotonic() < deadline:  # well past idle_timeout
            time.sleep(0.05)
        assert got == list(range(1, len(got) + 1)) and len(got) >= 8  # every sample, in order
        sampler.unlisten(sampler._listeners[0])
        assert sampler.sleeping  # nobody polled recently either
        taken = sampler.samples_taken
        time.sleep(5 * MIN_INTERVAL)  # an awake sampler would sample 5 times
        assert sampler.samples_taken <= taken + 1  # at most the one already under way
    finally:
        sampler.stop()


async def test_service_shares_one_serialized_answer_per_sample():
    scenario = fake.a100s(1, utilization=50)
    scenario.gpus[0].processes = [fake.FakeProcess(21, 2**30)]
    fake.install(scenario)
    sampler = make_sampler(interval=5, idle_timeout=60)

    class Paths:
        version = 1

        async def lookup(self, kernel_ids: set[str]) -> dict[str, str]:
            return {"k1": "work/train.ipynb"}

    sampler.pid_mapper = lambda pids: {21: "k1"}
    service = MetricsService(sampler, Paths())  # type: ignore[arg-type]
    try:
        body = json.loads(await service.response(None))
        head = service._head
        again = json.loads(await service.response(body["history"][-1]["time"]))
        assert service._head is head  # same sample: not serialized again
        assert service.encodes == 1
    finally:
        sampler.stop()
    assert body["available"] is True and body["interval"] == 5
    assert body["gpus"][0]["processes"] == [
        {"pid": 21, "memory_used": 2**30, "kernel_id": "k1", "path": "work/train.ipynb"}
    ]
    assert len(body["history"]) == 1 and again["history"] == []


def test_a_sampler_whose_loop_ended_follows_the_next_one():
    fake.install(fake.a100s(1))
    sampler = make_sampler(interval=MIN_INTERVAL, idle_timeout=60)
    try:
        first = asyncio.run(sampler.latest())
        assert first is not None and first.available
        taken = sampler.samples_taken

        async def later() -> int:
            sampler.touch()  # a request on the new loop
            await until(lambda: sampler.samples_taken >= taken + 3, "samples on the new loop")
            return sampler._loop_thread

        assert asyncio.run(later()) == threading.get_ident() and sampler._thread is None
    finally:
        sampler.stop()
