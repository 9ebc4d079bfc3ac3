"""A recorded stand-in of the Kubeflow Pipelines v2beta1 REST API, for ``kfp.Client`` in tests.

No KFP installation can run on the test machines, so this small HTTP server on 127.0.0.1
answers the endpoints ``kfp.Client`` (kfp 2.x, ``kfp_server_api`` 2.x) calls when it
submits and follows a run, with bodies shaped as the ``kfp_server_api`` models
(``V2beta1GetHealthzResponse``, ``V2beta1Experiment``, ``V2beta1ListExperimentsResponse``,
``V2beta1Run``; field names as in their ``attribute_map``, timestamps RFC 3339, states from
``V2beta1RuntimeState``):

===========================================  =======================================
``GET  /apis/v2beta1/healthz``               ``{"multi_user": false, ...}``
``GET  /apis/v2beta1/experiments``           list, ``filter`` on ``display_name`` EQUALS
``POST /apis/v2beta1/experiments``           create (``experiment_id`` is a uuid)
``POST /apis/v2beta1/runs``                  create: stores the body as posted (kfp.Client
                                             nests ``{"pipeline_spec", "platform_spec"}`` in
                                             ``pipeline_spec`` when there is a platform
                                             spec), state ``PENDING``
``GET  /apis/v2beta1/runs/{id}``             the run (404 ``{"error", "code": 5}`` if unknown)
``POST /apis/v2beta1/runs/{id}:terminate``   state ``CANCELING`` then ``CANCELED``
===========================================  =======================================

Tests drive a run's state with :meth:`KFPStandIn.set_state`, read what was posted in
``runs`` / ``requests``, and make the API fail with :meth:`fail` (e.g. 503 on run creation).
It is a test double, not a KFP: it does not execute pipelines.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class KFPStandIn:
    def __init__(self) -> None:
        self.experiments: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.failures: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                with standin.lock:
                    standin.requests.append((method, url.path))
                    status, answer = standin.answer(method, url.path, parse_qs(url.query), body)
                self._send(status, answer)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- controls ---------------------------------------------------------------------------
    def set_state(self, run_id: str, state: str, error: str | None = None) -> None:
        with self.lock:
            run = self.runs[run_id]
            run["state"] = state
            run["state_history"].append({"update_time": _now(), "state": state})
            if state in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"):
                run["finished_at"] = _now()
            if error:
                run["error"] = {"code": 2, "message": error}

    def fail(self, method: str, path_pattern: str, status: int = 503, count: int = 1) -> None:
        """The next ``count`` requests matching ``method`` and the regex get ``status``."""
        with self.lock:
            self.failures[(method, path_pattern)] = count
            self._fail_status = status

    # -- the API ----------------------------------------------------------------------------
    def answer(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        for (m, pattern), left in list(self.failures.items()):
            if m == method and re.fullmatch(pattern, path) and left > 0:
                self.failures[(m, pattern)] = left - 1
                return self._fail_status, {
                    "error": "upstream unavailable",
                    "code": 14,
                    "message": "upstream unavailable",
                }
        if method == "GET" and path == "/apis/v2beta1/healthz":
            return 200, {"multi_user": False, "pipeline_store": "database"}
        if path == "/apis/v2beta1/experiments":
            if method == "POST":
                exp = {
                    "experiment_id": str(uuid.uuid4()),
                    "display_name": body.get("display_name"),
                    "description": body.get("description") or "",
                    "namespace": body.get("namespace") or "",
                    "created_at": _now(),
                    "storage_state": "AVAILABLE",
                }
                self.experiments[exp["experiment_id"]] = exp
                return 200, exp
            wanted = None
            if query.get("filter"):
                predicates = json.loads(query["filter"][0]).get("predicates") or []
                for p in predicates:
                    if p.get("key") == "display_name":
                        wanted = p.get("string_value") or p.get("stringValue")
            found = [e for e in self.experiments.values() if wanted in (None, e["display_name"])]
            return 200, {"experiments": found, "total_size": len(found)} if found else {}
        if method == "POST" and path == "/apis/v2beta1/runs":
            run = {
                **body,
                "run_id": str(uuid.uuid4()),
                "created_at": _now(),
                "scheduled_at": _now(),
                "state": "PENDING",
                "state_history": [{"update_time": _now(), "state": "PENDING"}],
                "storage_state": "AVAILABLE",
            }
            self.runs[run["run_id"]] = run
            return 200, run
        match = re.fullmatch(r"/apis/v2beta1/runs/([^/:]+)(:terminate)?", path)
        if match:
            run = self.runs.get(match.group(1))
            if run is None:
                return 404, {"error": "run not found", "code": 5, "message": "run not found"}
            if method == "POST" and match.group(2):
                run["state"] = "CANCELED"
                run["finished_at"] = _now()
                return 200, {}
            if method == "GET":
                return 200, run
        return 404, {"error": f"no route {method} {path}", "code": 5}
