"""One background GPU sampler per Jupyter server process.

A daemon thread reads the GPUs (NVML or a DCGM exporter) every ``interval`` seconds into a
ring buffer, so requests never wait on NVML and never block the event loop. It only runs
while someone is looking: a listener (an open metrics stream, :meth:`GPUSampler.listen`)
keeps it going, and each poll calls :meth:`GPUSampler.touch`; with no listener and no poll for
``idle_timeout`` seconds the thread sleeps until the next one wakes it. Every request between
two samples shares the same, already-serialized sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traitlets import Enum, Float, TraitError, Unicode, default, validate
from traitlets.config import LoggingConfigurable

#: Admins cannot make the sampler run faster than this: 10 Hz, what live charts show (and
#: what jupyterlab-nvdashboard samples at); one sample of 8 GPUs costs about 1 ms.
MIN_INTERVAL = 0.1
#: Nor keep more history entries than this, whatever ``history_seconds`` says.
MAX_HISTORY = 3600
#: Names, the device list and the processes on each GPU (with their kernels) are read at most
#: this often; the figures that move (utilization, memory, temperature, power) every sample.
#: At 1 s or slower every sample reads everything; at 10 Hz, one in ten does.
FACTS_SECONDS = 1.0

PidMapper = Callable[[set[int]], dict[int, str]]
#: Called in the sampler's thread with each new sample (see :meth:`GPUSampler.listen`).
Listener = Callable[["Sample"], None]


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

    def kernel_ids(self) -> set[str]:
        return {p["kernel_id"] for g in self.gpus for p in g["processes"] if p["kernel_id"]}


def history_entry(sample: Sample) -> str:
    """The compact per-sample record kept in history, serialized once."""
    return json.dumps(
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
        },
        separators=(",", ":"),
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
        self._thread: threading.Thread | None = None
        self._last_request = 0.0
        self._seq = 0
        self._latest: Sample | None = None
        self._facts_at = -math.inf  # when names and processes were last read
        self._history: deque[tuple[float, str]] = deque(maxlen=self.history_length)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._listeners: list[Listener] = []
        self.samples_taken = 0
        self.cpu_seconds = 0.0  # CPU time the thread spent sampling (benchmarks, logs)

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
                raise ValueError("GPUSampler.source is 'dcgm' but GPUSampler.dcgm_url is not set")
            return DCGMSource(self.dcgm_url, pod=self.dcgm_pod)
        from .nvml import NVMLSource

        return NVMLSource(self.nvml_module, visible=os.environ.get("CUDA_VISIBLE_DEVICES"))

    def sample_once(self) -> Sample:
        """Read the GPUs now and publish the result (the thread's step; tests call it too)."""
        if self._source is None:
            self._source = self.make_source()
        start = time.perf_counter()
        gpus = self._read_figures(start)
        reason = None
        if gpus is None:
            try:
                gpus, reason = self._source.read()
            except Exception as exc:  # a source must never kill the thread
                self.log.exception("gpuhub: reading GPU metrics failed")
                gpus, reason = [], f"Reading GPU metrics failed: {exc}."
            if gpus and self.pid_mapper is not None:
                self._map_processes(gpus)
            self._facts_at = start
        cost = time.perf_counter() - start
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
            )
            self._latest = sample
            if gpus:
                self._history.append((sample.time, history_entry(sample)))
            waiters, self._waiters = self._waiters, []
            listeners = list(self._listeners)
        self.samples_taken += 1
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)
        for listener in listeners:
            try:
                listener(sample)
            except Exception:  # a listener must never kill the thread either
                self.log.exception("gpuhub: a GPU metrics listener failed")
        return sample

    def _read_figures(self, now: float) -> list[dict[str, Any]] | None:
        """Only the moving figures, when the last full read is recent enough (else None)."""
        previous = self._latest
        if (
            previous is None
            or not previous.gpus
            or now - self._facts_at >= FACTS_SECONDS - self.interval / 2
            or not hasattr(self._source, "read_figures")
        ):
            return None
        try:
            gpus: list[dict[str, Any]] | None = self._source.read_figures(previous.gpus)
        except Exception:
            self.log.exception("gpuhub: reading GPU figures failed")
            return None
        return gpus

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

    # -- the thread ----------------------------------------------------------------------
    def touch(self) -> None:
        """A client polled: keep sampling for ``idle_timeout`` (start or wake the thread)."""
        was_sleeping = self.sleeping
        self._last_request = time.monotonic()
        self._run_thread(wake=was_sleeping)

    def listen(self, listener: Listener) -> None:
        """Call ``listener(sample)`` in the sampler's thread after each sample, and keep
        sampling until :meth:`unlisten` (a listener must return quickly: hand the sample to
        an event loop with ``call_soon_threadsafe``)."""
        with self._lock:
            self._listeners.append(listener)
        self._run_thread(wake=True)

    def unlisten(self, listener: Listener) -> None:
        """Stop calling ``listener``; with no listener left and no recent poll, sampling stops."""
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    def _run_thread(self, wake: bool) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="gpuhub-gpu-sampler", daemon=True
                    )
                    self._thread.start()
                    return
        if wake:
            self._wake.set()

    @property
    def sleeping(self) -> bool:
        """Nobody listens and nobody polled for ``idle_timeout``: the thread does not sample."""
        return not self._listeners and time.monotonic() - self._last_request > self.idle_timeout

    def _run(self) -> None:
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
        if self._source is not None:
            self._source.close()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

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

    def history_since(self, since: float | None) -> list[str]:
        """Serialized history entries newer than ``since`` (all when None), oldest first."""
        with self._lock:
            if since is None:
                return [entry for _, entry in self._history]
            newer: list[str] = []
            for t, entry in reversed(self._history):
                if t <= since:
                    break
                newer.append(entry)
        newer.reverse()
        return newer


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
