"""``GET /gpuhub/api/metrics``: the latest GPU sample and recent history (pushed over a
WebSocket by ``/gpuhub/api/metrics/stream``, :mod:`.stream`).

Response (docs/architecture.md)::

    {"available": bool, "reason": str|null, "interval": s, "time": epoch s,
     "assigned": {"devices": [0, 1], "gpu_type": "NVIDIA A100 80GB", "simulated": bool,
                  "share", "gpu_memory", "share_text"}|null,
     "gpus": [{"index", "uuid", "name", "utilization", "memory_used", "memory_total",
               "temperature", "power", "mig", "processes": [{"pid", "memory_used",
               "kernel_id", "path"}], "error"}],
     "history": [{"time", "gpus": [{"uuid", "utilization", "memory_used", "temperature",
                                    "power"}]}]}

Memory in bytes, power in watts, temperature in degrees Celsius, utilization in percent;
``null`` where the GPU does not report a figure. ``assigned`` is what the hub gave this
server (from the spawner's environment, see :mod:`.assigned`), driver or not. ``?since=<time>`` returns only the history
newer than ``time`` (what a poller already has is not sent again).

Many clients poll the same server: the part of the answer that only depends on the sample is
serialized once per sample (by msgspec, about ten times faster than the standard library's
``json`` here) and shared, with the stream (:mod:`.stream`) as well.
"""

from __future__ import annotations

import math
import time
from typing import Any

import msgspec
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .assigned import assignment
from .kernels import KernelPids, SessionPaths
from .sampler import MIN_INTERVAL, GPUSampler, Sample

_encode = msgspec.json.Encoder().encode


class MetricsService:
    """Sampler + notebook paths + the shared serialized answer."""

    def __init__(
        self,
        sampler: GPUSampler,
        paths: SessionPaths | None,
        assigned: dict[str, Any] | None = None,
    ) -> None:
        self.sampler = sampler
        self.paths = paths
        self.assigned = assigned
        self._head_key: tuple[int, int] | None = None
        self._head = b""
        self.encodes = 0  # samples serialized: once each, however many clients (tests count)

    async def head(self, sample: Sample | None) -> tuple[tuple[int, int], bytes]:
        """The answer for ``sample`` without history, serialized once per sample (and per
        change of notebook paths), with the key it was serialized for."""
        paths: dict[str, str] = {}
        if sample is not None and self.paths is not None:
            kernel_ids = sample.kernel_ids()
            if kernel_ids:
                paths = await self.paths.lookup(kernel_ids)
        return self._head_for(sample, paths)

    def head_now(self, sample: Sample) -> tuple[tuple[int, int], bytes] | None:
        """:meth:`head` without waiting, or None when notebook paths must be fetched first
        (at most every few seconds, see :class:`.kernels.SessionPaths`)."""
        paths: dict[str, str] | None = {}
        if self.paths is not None:
            kernel_ids = sample.kernel_ids()
            if kernel_ids:
                paths = self.paths.cached(kernel_ids)
        return None if paths is None else self._head_for(sample, paths)

    def _head_for(
        self, sample: Sample | None, paths: dict[str, str]
    ) -> tuple[tuple[int, int], bytes]:
        key = (
            sample.seq if sample is not None else -1,
            self.paths.version if self.paths is not None else 0,
        )
        if key != self._head_key:
            self._head = self._serialize_head(sample, paths)
            self._head_key = key
            self.encodes += 1
        return key, self._head

    async def response(self, since: float | None) -> bytes:
        return (await self.response_at(since))[1]

    async def response_at(self, since: float | None) -> tuple[int, bytes]:
        """The full answer (history newer than ``since``) and the sample number it shows."""
        (seq, _), head = await self.head(await self.sampler.latest())
        history = self.sampler.history_since(since)
        return seq, b"".join((head[:-1], b',"history":[', b",".join(history), b"]}"))

    def _serialize_head(self, sample: Sample | None, paths: dict[str, str]) -> bytes:
        if sample is None:
            body: dict[str, Any] = {
                "available": False,
                "reason": "The GPU sampler has not produced a first sample yet.",
                "gpus": [],
            }
        else:
            gpus = sample.gpus  # processes carry "path": None until a notebook is known
            if paths:
                gpus = [
                    {
                        **g,
                        "processes": [
                            {**p, "path": paths.get(p["kernel_id"]) if p["kernel_id"] else None}
                            for p in g["processes"]
                        ],
                    }
                    for g in gpus
                ]
            body = {
                "available": sample.available,
                "reason": sample.reason,
                "time": round(sample.time, 3),
                "gpus": gpus,
            }
        body["assigned"] = self.assigned
        body["interval"] = self.sampler.interval
        body["min_interval"] = MIN_INTERVAL
        body["source"] = "simulated" if self.sampler.simulated else self.sampler.source
        return _encode(body)


class MetricsHandler(APIHandler):
    auth_resource = "gpuhub"

    @web.authenticated
    @authorized
    async def get(self) -> None:
        since_arg = self.get_argument("since", None)
        since: float | None = None
        if since_arg is not None:
            try:
                since = float(since_arg)
            except ValueError:
                since = math.nan
            if not math.isfinite(since):
                raise web.HTTPError(400, "since must be a time in seconds since the epoch.")
        service: MetricsService = self.settings["gpuhub_metrics"]
        started = time.perf_counter()
        body = await service.response(since)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        # How long gpuhub itself took, for benchmarks and browser devtools.
        self.set_header(
            "Server-Timing", f"metrics;dur={(time.perf_counter() - started) * 1000:.3f}"
        )
        await self.finish(body)


def setup_metrics(server_app: Any) -> MetricsService:
    """Create the server's one sampler; route ``/gpuhub/api/metrics`` and its stream to it."""
    from .stream import MetricsStream, MetricsStreamHandler

    web_app = server_app.web_app
    sampler = GPUSampler(parent=server_app, pid_mapper=KernelPids(server_app.kernel_manager))
    paths = SessionPaths(server_app.session_manager)
    service = MetricsService(sampler, paths, assignment())
    web_app.settings["gpuhub_metrics"] = service
    web_app.settings["gpuhub_metrics_stream"] = MetricsStream(service, parent=server_app)
    route = url_path_join(web_app.settings["base_url"], "gpuhub", "api", "metrics")
    web_app.add_handlers(
        ".*$", [(route, MetricsHandler), (url_path_join(route, "stream"), MetricsStreamHandler)]
    )
    source = "simulated GPUs" if sampler.simulated else sampler.source
    server_app.log.info(
        "gpuhub: GPU metrics from %s every %ss at %s", source, sampler.interval, route
    )
    return service


def teardown_metrics(server_app: Any) -> None:
    stream = server_app.web_app.settings.get("gpuhub_metrics_stream")
    if stream is not None:
        stream.close_all()
    service = server_app.web_app.settings.get("gpuhub_metrics")
    if service is not None:
        service.sampler.stop()
