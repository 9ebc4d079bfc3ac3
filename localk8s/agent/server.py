"""The node's kubelet API behind its front, on a unix socket in the agent's folder.

The port the Node advertises (``status.daemonEndpoints.kubeletEndpoint``) is served by
``process-kubelet`` (``localk8s/go/k8s/cmd/process-kubelet``): HTTPS, the apiserver's client
certificate checked against the cluster CA, ``pods/exec``, ``pods/attach`` and
``pods/portforward`` through Kubernetes' own streaming server. It passes the rest here:
``pods/log`` (``/containerLogs``) and ``/healthz``. Two internal paths answer what it needs
of a pod and are not passed on from the port: ``/internal/pods/<ns>/<name>`` (the pod's IP
and each container's main process, environment, working directory and stdin FIFO) and
``/internal/attach/<ns>/<pod>/<container>`` (the container's output from now on).
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from .logs import _parse_time
from .pods import Container, NoLog, PodRun, ProcessNode


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
        try:
            log = node.container_log(ns, pod, container, previous=_bool(request, "previous"))
        except NoLog as missing:
            return web.Response(status=missing.status, text=str(missing))
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

    def pod_run(request: web.Request) -> PodRun:
        namespace, pod = request.match_info["namespace"], request.match_info["pod"]
        run = node.runs.get(node.by_key.get((namespace, pod), ""))
        if run is None:
            raise web.HTTPNotFound(text=f"pod {namespace}/{pod} does not run on this node")
        return run

    async def pod_facts(request: web.Request) -> web.Response:
        run = pod_run(request)
        containers = {**run.init_containers, **run.containers}
        return web.json_response(
            {
                "uid": run.uid,
                "ip": run.ip,
                "containers": {name: _facts(c) for name, c in containers.items()},
            }
        )

    async def attach(request: web.Request) -> web.StreamResponse:
        run = pod_run(request)
        name = request.match_info["container"]
        container = run.containers.get(name) or run.init_containers.get(name)
        if container is None or not container.logs:
            raise web.HTTPNotFound(
                text=f'container "{name}" of pod {"/".join(run.key)} has not started'
            )
        log = container.logs[-1]  # this run's; a restart is a new run
        queue = log.listen()
        try:
            response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            await response.prepare(request)
            await response.write(_frame(0, b""))  # listening: nothing written from now is missed
            while (item := await queue.get()) is not None:
                stream, chunk = item
                await response.write(_frame(1 if stream == "stdout" else 2, chunk))
            await response.write_eof()
            return response
        finally:
            log.unlisten(queue)

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/internal/pods/{namespace}/{pod}", pod_facts)
    app.router.add_get("/internal/attach/{namespace}/{pod}/{container}", attach)
    return app


def _facts(container: Container) -> dict[str, Any]:
    """What an exec into ``container`` needs: its current process and what that was given."""
    process = container.process
    return {
        "running": process is not None and process.returncode is None,
        "pid": process.pid if process is not None else 0,
        "env": container.env,
        "cwd": container.cwd,
        "stdin": str(container.stdin) if container.stdin else "",
    }


def _frame(stream: int, chunk: bytes) -> bytes:
    """One piece of attached output: the stream (1 stdout, 2 stderr), its length, the bytes."""
    return bytes([stream]) + len(chunk).to_bytes(4, "big") + chunk


def tls_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    """The port served by the agent itself (no ``--socket``): only a CA-signed client, the
    apiserver, may ask."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    context.verify_mode = ssl.CERT_REQUIRED
    return context
