"""A server extension for tests and benchmarks: the GPU metrics machinery's own counters.

``GET {base_url}gpuhub-test/metrics-stats`` answers what the server's one sampler and its
stream did (samples taken, samples serialized, frames built and written, sockets open,
whether it sleeps) and, under the NVML stand-in, how many NVML calls the process made. Tests
count with it instead of timing. Load it with
``c.ServerApp.jpserver_extensions["harness.jupyter.metrics_stats"] = True``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

ROUTE = "gpuhub-test/metrics-stats"


class MetricsStats(APIHandler):
    @web.authenticated
    def get(self) -> None:
        service = self.settings["gpuhub_metrics"]
        stream = self.settings["gpuhub_metrics_stream"]
        sampler = service.sampler
        fake = sys.modules.get("harness.fake_nvml")
        stats: dict[str, Any] = {
            "samples_taken": sampler.samples_taken,
            # When the newest sample was taken: a test that counts from here knows which
            # samples still on their way to the sockets were taken before it.
            "latest_time": sampler._latest.time if sampler._latest is not None else None,
            "samples_on_loop": sampler.samples_on_loop,
            "ticks_skipped": sampler.ticks_skipped,
            "sampler_cpu_seconds": sampler.cpu_seconds,
            "sleeping": sampler.sleeping,
            "listeners": sampler.listeners,
            "encodes": service.encodes,
            "frames": stream.frames,
            "sent": stream.sent,
            "dropped": stream.dropped,
            "closed_stuck": stream.closed_stuck,
            "sockets": len(stream.sockets),
            "nvml_calls": sum(fake.calls.values()) if fake is not None else None,
        }
        self.finish(json.dumps(stats))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    base = server_app.web_app.settings["base_url"]
    server_app.web_app.add_handlers(".*$", [(url_path_join(base, ROUTE), MetricsStats)])
