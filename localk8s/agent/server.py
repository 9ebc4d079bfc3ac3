"""The node's kubelet API, as kube-apiserver calls it for ``pods/log``: HTTPS on the port the
Node advertises (``status.daemonEndpoints.kubeletEndpoint``), the apiserver's client
certificate checked against the cluster CA."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from aiohttp import web

from .logs import _parse_time
from .pods import ProcessNode


def _int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer, not {value!r}") from None


def _bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true")


def make_app(node: ProcessNode) -> web.Application:
    async def container_logs(request: web.Request) -> web.StreamResponse:
        ns, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        log = node.container_log(ns, pod, container, previous=_bool(request, "previous"))
        if log is None:
            raise web.HTTPNotFound(
                text=f'container "{container}" in pod "{pod}" has no log on this node'
            )
        since: datetime.datetime | None = None
        if request.query.get("sinceTime"):
            since = _parse_time(request.query["sinceTime"])
        elif (seconds := _int(request, "sinceSeconds")) is not None:
            since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        async for chunk in log.read(
            follow=_bool(request, "follow"),
            tail=_int(request, "tailLines"),
            since=since,
            timestamps=_bool(request, "timestamps"),
            limit=_int(request, "limitBytes"),
        ):
            await response.write(chunk)
        await response.write_eof()
        return response

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def not_served(request: web.Request) -> web.Response:
        return web.Response(
            status=501,
            text="The gpuhub process node serves container logs only (no exec, attach or "
            "port-forward).",
        )

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    app.router.add_get("/healthz", healthz)
    for verb in ("exec", "attach", "portForward", "run"):
        app.router.add_route("*", f"/{verb}/{{tail:.*}}", not_served)
    return app


def tls_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    context.verify_mode = ssl.CERT_REQUIRED  # only the apiserver (a CA-signed client) may ask
    return context
