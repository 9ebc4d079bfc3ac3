"""The jupyterlab-nvdashboard server design, rebuilt for a side-by-side measurement.

nvdashboard opens one websocket per chart; each socket runs a tornado ``PeriodicCallback``
on the server's event loop that reads NVML and writes a message (its frontend asks for a
100 ms period by default). To compare designs on equal terms this extension reads the GPUs
with gpuhub's own NVML reading code (and the same NVML stand-in), so the difference
measured is the architecture: samplers per socket on the event loop vs one sampler thread.

Loaded only by ``benchmarks/bench_metrics.py`` as a server extension
(``c.ServerApp.jpserver_extensions = {"benchmarks.nvdashboard_design": True}``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import ioloop, web, websocket

from gpuhub_lab.metrics.nvml import NVMLSource

_source: NVMLSource | None = None


def _read() -> list[dict[str, Any]]:
    global _source
    if _source is None:
        _source = NVMLSource(os.environ.get("GPUHUB_NVML_MODULE", "pynvml"))
    return _source.read()[0]


class ChartSocket(JupyterHandler, websocket.WebSocketHandler):
    """One chart: read NVML every ``period`` ms on the event loop, send the figures."""

    def open(self, *args: Any, **kwargs: Any) -> None:
        if not self.current_user:
            self.close()
            return
        period = float(self.get_argument("period", "100"))
        self.callback = ioloop.PeriodicCallback(self.send_data, period)
        self.callback.start()

    def send_data(self) -> None:
        gpus = _read()
        self.write_message(
            json.dumps(
                {
                    "gpu_utilization": [g["utilization"] for g in gpus],
                    "memory_usage": [g["memory_used"] for g in gpus],
                }
            )
        )

    def on_close(self) -> None:
        if hasattr(self, "callback"):
            self.callback.stop()


class NVMLCalls(APIHandler):
    """How many NVML calls this process made (the stand-in counts them)."""

    @web.authenticated
    def get(self) -> None:
        from tests.support import fake_nvml

        self.finish(json.dumps(dict(fake_nvml.calls)))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "benchmarks.nvdashboard_design"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    base = server_app.web_app.settings["base_url"]
    server_app.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "bench", "nvdashboard"), ChartSocket),
            (url_path_join(base, "bench", "nvml-calls"), NVMLCalls),
        ],
    )
