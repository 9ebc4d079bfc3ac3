"""One GPU sampler per Jupyter server process.

Every ``interval`` seconds the sampler reads the GPUs (NVML or a DCGM exporter) into a ring
buffer, so requests never wait on NVML and never block the event loop. It only runs while
someone is looking: a listener (an open metrics stream, :meth:`GPUSampler.listen`) keeps it
going, and each poll calls :meth:`GPUSampler.touch`; with no listener and no poll for
``idle_timeout`` seconds it stops until the next one wakes it. Every request between two
samples shares the same, already-serialized sample.

Where a read runs. In a server the event loop's timer is the clock (one wake-up per sample,
nothing handed between threads), and a read runs on the loop itself when it is known to be
quick: the source allows it (NVML once started; never DCGM, whose reads cross the network)
and the median of the last reads of the same kind (figures only, or everything) took less
than :data:`LOOP_READ_SECONDS`. Any other read (the first of each kind, the one that starts
NVML, a slow driver, many GPUs) runs in the sampler's own thread and its sample is handed to
the loop. Started outside an event loop (scripts, benchmarks), the thread is the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec
from traitlets import Enum, Float, TraitError, Unicode, default, validate
from traitlets.config import LoggingConfigurable

#: Admins cannot make the sampler run faster than this: 10 Hz, what live charts show (and
#: what jupyterlab-nvdashboard samples at).
MIN_INTERVAL = 0.1
#: Nor keep more history entries than this, whatever ``history_seconds`` says.
MAX_HISTORY = 3600
#: Everything (names, the device list, the processes on each GPU with their kernels,
#: temperature and power) is read at most this often; utilization and memory every sample,
#: the samples in between repeating the rest. At 1 s or slower every sample reads
#: everything; at 10 Hz, one in ten does. Temperature moves by degrees over seconds, and
#: NVML's power figure is itself averaged over a second on recent GPUs.
FACTS_SECONDS = 1.0
#: A read runs on the event loop when the median of the last :data:`LOOP_READ_WINDOW` reads
#: of its kind took less than this (wall clock); else in the sampler's thread. NVML calls
#: take about 20 µs on an H200 (docs/benchmarks.md, "One sample"): utilization and memory of
#: eight GPUs about 0.3 ms (the loop), everything about 0.2 ms per GPU (the thread from five).
LOOP_READ_SECONDS = 0.001
LOOP_READ_WINDOW = 5

PidMapper = Callable[[set[int]], dict[int, str]]
#: Called with each new sample: on the event loop the sampler runs on (in a server), or in
#: the sampler's thread when it was started outside an event loop (see :meth:`GPUSampler.listen`).
Listener = Callable[["Sample"], None]

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Sample:
    """One reading of every GPU, immutable once published."""

    seq: int
    time: float  # epoch seconds
    mono: float  # monotonic seconds, for staleness
    available: bool
    reason: str | None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    cost: float = 0.0  # seconds the read took, for benchmarks and logs
    full: bool = True  # everything was read (else only utilization and memory)
    read_on_loop: bool = False  # the read ran on the event loop (else in a thread)

    def kernel_ids(self) -> set[str]:
        return {p["kernel_id"] for g in self.gpus for p in g["processes"] if p["kernel_id"]}


def history_entry(sample: Sample) -> bytes:
    """The compact per-sample record kept in history, serialized once."""
    return _encode(
        {
            "time": sample.time,
            "gpus": [
                {
                    "uuid": g["uuid"],
                    "utilization": g["utilization"],
                    "memory_used": g["memory_used"],
                    "temperature": g["temperature"],
                    "power": g["power"],
                }
                for g in sample.gpus
            ],
        }
    )


class GPUSampler(LoggingConfigurable):
    """Samples this server's GPUs in the background while clients are polling."""

    source = Enum(
        ["nvml", "dcgm"],
        default_value="nvml",
        config=True,
        help="Where GPU figures come from: 'nvml' (the NVIDIA driver on this machine) or "
        "'dcgm' (a DCGM exporter, see dcgm_url).",
    )
    interval = Float(
        1.0,
        config=True,
        help=f"Seconds between two samples (at least {MIN_INTERVAL}). Clients never get "
        "fresher data than this, however often they poll.",
    )
    history_seconds = Float(
        600.0,
        config=True,
        help=f"How many seconds of history to keep and serve (capped at {MAX_HISTORY} samples).",
    )
    idle_timeout = Float(
        30.0,
        config=True,
        help="Stop sampling when no stream is open and no client has polled for this many seconds.",
    )
    nvml_module = Unicode(
        config=True,
        help="Python module with the NVML API (nvidia-ml-py's 'pynvml'). Default: 'pynvml', or "
        "gpuhub's simulated GPUs when the spawner set GPUHUB_SIMULATED_GPUS. Tests point it at a "
        "stand-in.",
    )
    dcgm_url = Unicode(
        "",
        config=True,
        help="Metrics URL of a DCGM exporter, e.g. http://nvidia-dcgm-exporter.gpu-operator:9400"
        "/metrics. Used when source='dcgm'.",
    )
    dcgm_pod = Unicode(
        config=True,
        help="Only count DCGM series whose 'pod' label is this (default: $HOSTNAME, the pod's "
        "name on Kubernetes). Empty: every GPU the exporter reports.",
    )

    @default("nvml_module")
    def _default_nvml_module(self) -> str:
        from .simulated import module_name

        return module_name() or "pynvml"

    @default("dcgm_pod")
    def _default_pod(self) -> str:
        return os.environ.get("HOSTNAME", "") if os.environ.get("KUBERNETES_SERVICE_HOST") else ""

    @validate("interval")
    def _check_interval(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if not value >= MIN_INTERVAL:  # NaN too
            raise TraitError(
                f"GPUSampler.interval must be at least {MIN_INTERVAL} seconds (the sampler reads "
                f"the GPUs at most ten times a second), not {value:g}."
            )
        return value

    @validate("history_seconds", "idle_timeout")
    def _check_positive(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if value <= 0:
            raise ValueError(f"{proposal['trait'].name} must be positive, not {value}")
        return value

    def __init__(self, pid_mapper: PidMapper | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pid_mapper = pid_mapper
        self._source: Any = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._last_request = 0.0
        self._seq = 0
        self._latest: Sample | None = None
        self._facts_at = -math.inf  # when everything was last read
        self._history: deque[tuple[float, bytes]] = deque(maxlen=self.history_length)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._listeners: list[Listener] = []
        # Wall seconds of the last reads of each kind (True: everything; False: figures only).
        self._costs: dict[bool, deque[float]] = {
            True: deque(maxlen=LOOP_READ_WINDOW),
            False: deque(maxlen=LOOP_READ_WINDOW),
        }
        # In a server, the event loop's timer is the clock and a thread only reads slow sources:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1  # the loop's thread id
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # loop time of the next tick
        self._reader: ThreadPoolExecutor | None = None
        self._reading = False  # a read is under way in the reader thread
        # Started outside an event loop, a thread of its own is the clock instead:
        self._thread: threading.Thread | None = None
        # Counters for tests, benchmarks and logs.
        self.samples_taken = 0
        self.samples_on_loop = 0  # of which read on the event loop
        self.ticks_skipped = 0  # ticks that found the reader thread still reading
        self.cpu_seconds = 0.0  # CPU time of the sampler's own thread (reads there, its clock)

    @property
    def simulated(self) -> bool:
        """Whether the figures come from gpuhub's simulated GPUs (see :mod:`.simulated`)."""
        from . import simulated

        return self.source == "nvml" and self.nvml_module == simulated.__name__

    @property
    def history_length(self) -> int:
        return max(1, min(MAX_HISTORY, int(self.history_seconds / self.interval)))

    # -- the source ----------------------------------------------------------------------
    def make_source(self) -> Any:
        if self.source == "dcgm":
            from .dcgm import DCGMSource

            if not self.dcgm_url:
                raise ValueError(
                    "GPUSampler.source is 'dcgm' but GPUSampler.dcgm_url is not set: set it "
                    "to the DCGM exporter's metrics URL."
                )
            return DCGMSource(self.dcgm_url, pod=self.dcgm_pod)
        from .nvml import NVMLSource

        return NVMLSource(self.nvml_module, visible=os.environ.get("CUDA_VISIBLE_DEVICES"))

    def sample_once(self) -> Sample:
        """Read the GPUs now and publish the result (a tick's step; tests call it too)."""
        return self._publish(self._read())

    def _read(self) -> tuple[list[dict[str, Any]], str | None, float, bool]:
        """Read the GPUs: (gpus, reason when none, wall seconds it took, whether it read
        everything). Never raises: a failing source becomes a reason."""
        if self._source is None:
            try:
                self._source = self.make_source()
            except ValueError as exc:  # its settings are wrong: say so where figures would be
                return [], str(exc), 0.0, True
        start = time.perf_counter()
        gpus = None if self._full_due(start) else self._read_figures()
        full = gpus is None
        reason = None
        if gpus is None:
            try:
                gpus, reason = self._source.read()
            except Exception as exc:  # a source must never kill the sampler
                self.log.exception("gpuhub: reading GPU metrics failed")
                gpus, reason = [], f"Reading GPU metrics failed: {exc}."
            if gpus and self.pid_mapper is not None:
                self._map_processes(gpus)
            self._facts_at = start
        cost = time.perf_counter() - start
        self._costs[full].append(cost)
        return gpus, reason, cost, full

    def _publish(self, read: tuple[list[dict[str, Any]], str | None, float, bool]) -> Sample:
        """Make ``read`` the latest sample: history, then waiting requests and listeners."""
        gpus, reason, cost, full = read
        here = threading.get_ident()
        on_loop = here == self._loop_thread
        with self._lock:
            self._seq += 1
            sample = Sample(
                seq=self._seq,
                time=round(time.time(), 3),  # the precision clients echo in ?since=
                mono=time.monotonic(),
                available=bool(gpus),
                reason=None if gpus else reason,
                gpus=gpus,
                cost=cost,
                full=full,
                read_on_loop=on_loop and not self._reading,
            )
            self._latest = sample
            if gpus:
                self._history.append((sample.time, history_entry(sample)))
            waiters, self._waiters = self._waiters, []
            listeners = list(self._listeners)
        self.samples_taken += 1
        if sample.read_on_loop:
            self.samples_on_loop += 1
        for loop, future in waiters:
            if on_loop and loop is self._loop:
                _resolve(future)
            else:
                loop.call_soon_threadsafe(_resolve, future)
        for listener in listeners:
            try:
                listener(sample)
            except Exception:  # a listener must never stop the sampler either
                self.log.exception("gpuhub: a GPU metrics listener failed")
        return sample

    def _full_due(self, now: float) -> bool:
        """Whether the next read must read everything (else the moving figures will do)."""
        previous = self._latest
        return (
            previous is None
            or not previous.gpus
            or now - self._facts_at >= FACTS_SECONDS - self.interval / 2
            or not hasattr(self._source, "read_figures")
        )

    def _read_figures(self) -> list[dict[str, Any]] | None:
        """Only the moving figures of the last sample's GPUs (None: read everything)."""
        previous = self._latest
        assert previous is not None
        try:
            gpus: list[dict[str, Any]] | None = self._source.read_figures(previous.gpus)
        except Exception:
            self.log.exception("gpuhub: reading GPU figures failed")
            return None
        return gpus

    def reads_on_loop(self, full: bool) -> bool:
        """Whether the next read of this kind (everything, or figures only) may run on the
        event loop: the source allows it and its last reads of that kind were quick."""
        costs = self._costs[full]
        return (
            bool(costs)
            and hasattr(self._source, "loop_safe")
            and self._source.loop_safe(full)
            and sorted(costs)[len(costs) // 2] < LOOP_READ_SECONDS
        )

    def _map_processes(self, gpus: list[dict[str, Any]]) -> None:
        pids = {p["pid"] for g in gpus for p in g["processes"]}
        if not pids or self.pid_mapper is None:
            return
        try:
            kernels = self.pid_mapper(pids)
        except Exception:
            self.log.exception("gpuhub: mapping GPU processes to kernels failed")
            return
        for g in gpus:
            for p in g["processes"]:
                p["kernel_id"] = kernels.get(p["pid"])

    # -- the clock -----------------------------------------------------------------------
    def touch(self) -> None:
        """A client polled: keep sampling for ``idle_timeout`` (start or wake the clock)."""
        was_sleeping = self.sleeping
        self._last_request = time.monotonic()
        self._run(wake=was_sleeping)

    def listen(self, listener: Listener) -> None:
        """Call ``listener(sample)`` after each sample, and keep sampling until
        :meth:`unlisten`. A listener must return quickly: in a server it runs on the event
        loop; started outside one, in the sampler's thread (hand the sample to a loop with
        ``call_soon_threadsafe`` there)."""
        with self._lock:
            self._listeners.append(listener)
        self._run(wake=True)

    def unlisten(self, listener: Listener) -> None:
        """Stop calling ``listener``; with no listener left and no recent poll, sampling stops."""
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    @property
    def sleeping(self) -> bool:
        """Nobody listens and nobody polled for ``idle_timeout``: nothing is sampled."""
        return not self._listeners and time.monotonic() - self._last_request > self.idle_timeout

    def _run(self, wake: bool) -> None:
        """Make sure a clock runs: the event loop's when called on one (the first call
        decides, once), else the sampler's own thread."""
        if self._loop is not None and self._loop.is_closed():  # its loop ended: a new one may
            self._loop, self._timer, self._reading = None, None, False
        if self._loop is None and self._thread is None:
            with contextlib.suppress(RuntimeError):  # no running loop: the thread is the clock
                self._loop = asyncio.get_running_loop()
                self._loop_thread = threading.get_ident()
        if self._loop is None:
            self._run_thread(wake)
        elif threading.get_ident() == self._loop_thread:
            self._start_ticking()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._start_ticking)

    def _start_ticking(self) -> None:
        if self._timer is None and not self._stopping:
            assert self._loop is not None
            self._due = self._loop.time()
            self._timer = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        """On the event loop, once per interval: read here when that is known to be quick,
        else have the reader thread read and publish back here."""
        loop = self._loop
        assert loop is not None
        self._timer = None
        if self._stopping or self.sleeping:
            return  # the next touch() or listen() starts ticking again
        now = loop.time()
        self._due += self.interval
        if self._due <= now:  # a tick late by more than an interval: keep time from now
            self._due = now + self.interval
        self._timer = loop.call_at(self._due, self._tick)
        if self._reading:  # the reader has not finished the previous read: skip this one
            self.ticks_skipped += 1
            return
        if self._source is not None and self.reads_on_loop(self._full_due(time.perf_counter())):
            self.sample_once()  # not timed: that would be two more system calls per tick
            return
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-gpu-sampler")
        self._reading = True
        read = self._reader.submit(self._read_in_thread)
        read.add_done_callback(self._read_done)

    def _read_in_thread(self) -> tuple[list[dict[str, Any]], str | None, float, bool]:
        cpu = time.thread_time()
        try:
            return self._read()
        finally:
            self.cpu_seconds += time.thread_time() - cpu

    def _read_done(
        self, read: Future[tuple[list[dict[str, Any]], str | None, float, bool]]
    ) -> None:
        """In the reader thread: hand what it read to the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._publish_read, read)

    def _publish_read(
        self, read: Future[tuple[list[dict[str, Any]], str | None, float, bool]]
    ) -> None:
        try:
            if read.cancelled() or self._stopping:
                return
            if (error := read.exception()) is not None:  # _read() does not raise; just in case
                self.log.error("gpuhub: reading GPU metrics failed: %s", error)
                return
            self._publish(read.result())
        finally:
            self._reading = False

    def _run_thread(self, wake: bool) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._thread_clock, name="gpuhub-gpu-sampler", daemon=True
                    )
                    self._thread.start()
                    return
        if wake:
            self._wake.set()

    def _thread_clock(self) -> None:
        """The clock of a sampler started outside an event loop: sample, sleep, repeat."""
        while not self._stopping:
            if self.sleeping:
                self._wake.clear()
                if self.sleeping:  # re-check: a touch() may have raced the clear()
                    self._wake.wait()
                continue
            started = time.monotonic()
            cpu = time.thread_time()
            self.sample_once()
            self.cpu_seconds += time.thread_time() - cpu
            # Sleep the rest of the interval; wake early only to stop.
            self._wake.clear()
            remaining = self.interval - (time.monotonic() - started)
            deadline = time.monotonic() + remaining
            while not self._stopping and (left := deadline - time.monotonic()) > 0:
                self._wake.wait(left)
                self._wake.clear()
        self._close_source()

    def _close_source(self) -> None:
        if self._source is not None:
            self._source.close()

    def stop(self) -> None:
        """Stop sampling for good and let the source go (call it on the loop, if one runs it)."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake.set()
        reader, self._reader = self._reader, None
        if self._thread is not None:
            self._thread.join(timeout=5)
        elif reader is not None:
            reader.submit(self._close_source)  # after a read under way, if any
            reader.shutdown(wait=False)
        else:
            self._close_source()

    # -- what requests read --------------------------------------------------------------
    async def latest(self, timeout: float = 3.0) -> Sample | None:
        """The newest sample, waiting (without blocking the loop) for one after an idle spell."""
        self.touch()
        sample = self._latest
        if sample is not None and time.monotonic() - sample.mono <= 2 * self.interval + 0.5:
            return sample
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiters.append((loop, future))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), timeout)
        return self._latest

    def history_since(self, since: float | None) -> list[bytes]:
        """Serialized history entries newer than ``since`` (all when None), oldest first."""
        with self._lock:
            if since is None:
                return [entry for _, entry in self._history]
            newer: list[bytes] = []
            for t, entry in reversed(self._history):
                if t <= since:
                    break
                newer.append(entry)
        newer.reverse()
        return newer


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
