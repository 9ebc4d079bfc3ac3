"""Faults in front of the real apiserver: a small proxy that forwards every request and, when a
test says so, answers with an error, answers slowly, drops the open watches or answers a watch
that resumes from before a compaction with ``410 Gone``, as kube-apiserver does.

The proxy listens on plain HTTP on loopback and talks to the apiserver with the credentials
of the kubeconfig it was given (a client certificate, or a ServiceAccount's token, so that the
code under test keeps that account's RBAC); the code under test gets a kubeconfig pointing at
the proxy (``FaultProxy.kubeconfig``). Use it through the ``kube_faults`` fixture
(``harness/cluster.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from aiohttp import web

T = TypeVar("T")

_REASONS = {
    500: ("InternalError", "Internal error occurred: injected by the test's fault proxy"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, "
        "but may still be processing the request",
    ),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
}
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "content-encoding",
}


@dataclass
class Rule:
    kind: str  # "error" | "slow"
    method: str | None
    path: str | None  # a substring of the request path
    skip: int  # matching requests to let through first
    count: int | None  # how many to affect (None: all)
    status: int = 500
    seconds: float = 0.0
    watch: bool | None = None  # None: any; True: only watches; False: no watches

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        return (
            (self.method is None or self.method == method)
            and (self.path is None or self.path in path)
            and (self.watch is None or self.watch == is_watch)
        )


class FaultProxy:
    """The proxy, running on its own event loop in a thread; its controls are thread-safe."""

    def __init__(
        self,
        server: str,
        ca: Path,
        cert: Path | None,
        key: Path | None,
        folder: Path,
        token: str | None = None,
    ) -> None:
        self.upstream = server.rstrip("/")
        self._ssl = ssl.create_default_context(cafile=str(ca))
        if cert is not None and key is not None:
            self._ssl.load_cert_chain(str(cert), str(key))
        self._credentials = {"Authorization": f"Bearer {token}"} if token else {}
        self.rules: list[Rule] = []
        self.requests = 0
        self.paths: list[str] = []  # every request path, in order (which API versions are used)
        self.compacted_below = 0  # watches from an older resourceVersion get 410
        self.frozen: str | None = None  # watches whose path has this hold their events back
        self._thawed = asyncio.Event()
        self._watches: set[web.StreamResponse] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = folder / "faulty-kubeconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "faulty", "cluster": {"server": self.url}}],
                    "users": [{"name": "faulty", "user": {}}],
                    "contexts": [
                        {"name": "faulty", "context": {"cluster": "faulty", "user": "faulty"}}
                    ],
                    "current-context": "faulty",
                }
            )
        )

    # -- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        # Nothing may outlive the loop: a handler collected after it closed would try to
        # wake it ("Event loop is closed" warnings, at any later moment of the test run).
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # Open watches would hold the shutdown for aiohttp's default minute.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def stop(self) -> None:
        async def close() -> None:
            for response in list(self._watches):
                with contextlib.suppress(Exception):
                    response.force_close()
            await self._runner.cleanup()
            await self._session.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- controls (any thread) -----------------------------------------------------------
    def fail_requests(
        self,
        status: int = 500,
        *,
        nth: int = 1,
        count: int | None = 1,
        method: str | None = None,
        path: str | None = None,
        watch: bool | None = None,
    ) -> Rule:
        """The ``nth`` matching request from now (and ``count - 1`` more) gets ``status``."""
        rule = Rule("error", method, path, nth - 1, count, status=status, watch=watch)
        self.call(lambda: self.rules.append(rule))
        return rule

    def slow_requests(
        self,
        seconds: float,
        *,
        method: str | None = None,
        path: str | None = None,
        count: int | None = None,
        watch: bool | None = None,
    ) -> Rule:
        rule = Rule("slow", method, path, 0, count, seconds=seconds, watch=watch)
        self.call(lambda: self.rules.append(rule))
        return rule

    def open_watches(self) -> int:
        return self.call(lambda: len(self._watches))

    def freeze_watches(self, path: str) -> None:
        """Open and new watches whose path contains ``path`` hold back their events until
        :meth:`thaw_watches`: a client's cache lags behind the cluster, as when an apiserver
        is slow to send."""
        self.call(lambda: setattr(self, "frozen", path))

    def thaw_watches(self) -> None:
        def thaw() -> None:
            self.frozen = None
            self._thawed.set()
            self._thawed = asyncio.Event()

        self.call(thaw)

    def clear_faults(self) -> None:
        self.call(self.rules.clear)

    def drop_watches(self, abort: bool = False) -> int:
        """End every open watch now (``abort``: cut the connection mid-stream)."""

        async def drop() -> int:
            open_watches = list(self._watches)
            for response in open_watches:
                if abort:
                    response.force_close()
                    if response._req is not None and response._req.transport is not None:
                        response._req.transport.abort()
                else:
                    with contextlib.suppress(Exception):
                        await response.write_eof()
                self._watches.discard(response)
            return len(open_watches)

        return asyncio.run_coroutine_threadsafe(drop(), self._loop).result(30)

    def compact(self) -> None:
        """From now on, a watch that starts from a resourceVersion older than the cluster's
        current one is answered ``410 Gone`` (``too old resource version``), as after an
        etcd compaction; a client must LIST again."""

        async def current() -> int:
            async with self._session.get(
                self.upstream + "/api/v1/namespaces", params={"limit": "1"}
            ) as response:
                body = await response.json()
            return int(body["metadata"]["resourceVersion"])

        rv = asyncio.run_coroutine_threadsafe(current(), self._loop).result(30)
        self.compacted_below = rv + 1

    # -- forwarding ----------------------------------------------------------------------
    async def _apply_rules(self, method: str, path: str, is_watch: bool) -> web.Response | None:
        self.requests += 1
        self.paths.append(path)
        for rule in list(self.rules):
            if not rule.matches(method, path, is_watch):
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    self.rules.remove(rule)
            if rule.kind == "slow":
                await asyncio.sleep(rule.seconds)
                continue
            reason, message = _REASONS.get(
                rule.status, ("InternalError", f"injected HTTP {rule.status}")
            )
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": rule.status,
            }
            headers = {"Retry-After": "1"} if rule.status in (429, 503) else {}
            if rule.status in (429, 503):
                body["details"] = {"retryAfterSeconds": 1}
            return web.json_response(body, status=rule.status, headers=headers)
        return None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        is_watch = request.query.get("watch", "").lower() in ("1", "true")
        refused = await self._apply_rules(request.method, request.path, is_watch)
        if refused is not None:
            return refused
        if is_watch and self.compacted_below:
            version = request.query.get("resourceVersion", "")
            if version.isdigit() and 0 < int(version) < self.compacted_below:
                return self._gone(version)
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() != "authorization"
        }
        headers.update(self._credentials)
        body = await request.read()
        upstream = await self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body if body else None,
        )
        response = web.StreamResponse(
            status=upstream.status,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
        )
        if upstream.headers.get("Content-Encoding"):
            response.headers["Content-Encoding"] = upstream.headers["Content-Encoding"]
        await response.prepare(request)
        if is_watch:
            self._watches.add(response)
        try:
            async for chunk in upstream.content.iter_any():
                while is_watch and self.frozen is not None and self.frozen in request.path:
                    await self._thawed.wait()
                if is_watch and response not in self._watches:
                    break  # dropped
                await response.write(chunk)
        except (ConnectionResetError, aiohttp.ClientError):
            pass
        finally:
            self._watches.discard(response)
            upstream.release()
        with contextlib.suppress(Exception):
            await response.write_eof()
        return response

    @staticmethod
    def _gone(version: str) -> web.Response:
        event = {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {version}",
                "reason": "Expired",
                "code": 410,
            },
        }
        return web.Response(text=json.dumps(event) + "\n", content_type="application/json")


def proxy_for(kubeconfig: Path, folder: Path) -> FaultProxy:
    """A fault proxy in front of the cluster a kubeconfig names, with its user's client
    certificate or token."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    return FaultProxy(
        cluster["server"],
        Path(cluster["certificate-authority"]),
        Path(user["client-certificate"]) if "client-certificate" in user else None,
        Path(user["client-key"]) if "client-key" in user else None,
        folder,
        token=user.get("token"),
    )
