"""A reverse proxy that speaks plain HTTP only, as some corporate proxies do.

It forwards each request to an upstream server and drops hop-by-hop headers (RFC 9110,
7.6.1), ``Connection`` and ``Upgrade`` among them, as a proxy that does not know WebSockets
must: a WebSocket handshake reaches the server as an ordinary GET, which refuses it
(tornado: HTTP 400). Tests use it to show that clients fall back to polling.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


@contextmanager
def plain_proxy(upstream: str) -> Iterator[str]:
    """Serve on a free loopback port; yield the proxy's base URL (same path as ``upstream``)."""
    target = urlsplit(upstream)

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers["Host"] = target.netloc
            upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                upstream_conn.request(self.command, self.path, body=body, headers=headers)
                answer = upstream_conn.getresponse()
                data = answer.read()
            finally:
                upstream_conn.close()
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="plain-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{target.path}"
    finally:
        server.shutdown()
        server.server_close()
