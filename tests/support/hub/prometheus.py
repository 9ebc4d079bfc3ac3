"""A real Prometheus server (Debian's ``prometheus`` package) as a child process, for tests."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from harness import e2e
from harness.hub.process import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@contextmanager
def running_prometheus(tmp: Path, scrape_configs: list[dict[str, Any]]) -> Iterator[str]:
    """Prometheus scraping every second with ``scrape_configs``; yields its URL."""
    e2e.require("Prometheus")
    if not Path(PROMETHEUS).exists():
        pytest.skip("Prometheus is not installed (apt-get install prometheus)")
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": scrape_configs}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not become ready"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    answer = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]["result"]


def eventually(url: str, promql: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The first non-empty answer to ``promql`` (scrapes take a moment to land)."""
    deadline = time.monotonic() + timeout
    while True:
        result = query(url, promql)
        if result:
            return result
        assert time.monotonic() < deadline, f"no answer to {promql}"
        time.sleep(0.5)


@contextmanager
def serving_exposition(text: Callable[[], str]) -> Iterator[str]:
    """A scrape target on 127.0.0.1 answering ``text()`` in Prometheus' text format (a
    stand-in for dcgm-exporter or the hub's /hub/metrics); yields ``host:port``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
