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

The answer is serialized once per sample, however many clients poll or stream it
(:mod:`.service`).
"""

from __future__ import annotations

import math
import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .assigned import assignment
from .kernels import KernelPids, SessionPaths
from .sampler import GPUSampler
from .service import MetricsService
from .stream import MetricsStream, MetricsStreamHandler


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
