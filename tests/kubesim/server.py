"""The HTTP face of kubesim: Kubernetes REST paths, discovery, list/watch, logs."""

from __future__ import annotations

import asyncio
import base64
import bisect
import itertools
import json
import random
from collections.abc import Callable
from typing import Any

from aiohttp import web

from . import execstream
from .apiserver import APIServer
from .errors import APIError, bad_request, expired
from .faults import Faults
from .kubelet import Kubelet
from .resources import GROUP_PREFERRED, ResourceType
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .store import Obj, Store, Watcher

GIT_VERSION = "v1.30.0-kubesim"
_TRUE = ("true", "1")


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


class Server:
    def __init__(self, store: Store, api: APIServer, kubelet: Kubelet, faults: Faults) -> None:
        self.store = store
        self.api = api
        self.kubelet = kubelet
        self.faults = faults
        self.bookmark_seconds = 5.0
        self.watch_timeout_seconds = 1800  # minRequestTimeout; the apiserver randomises [1x, 2x]
        self.active_watches: set[tuple[Watcher, web.StreamResponse]] = set()
        self._order_cache: tuple[tuple[Any, ...], list[Obj], list[str]] | None = None
        # Aggregated API groups (an APIService's backend), by group: handler(request, parts).
        self.aggregated: dict[str, Callable[[web.Request, list[str]], web.StreamResponse]] = {}
        self.app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024**2)
        self.app.router.add_route("*", "/{path:.*}", self._route)

    # -- middleware ---------------------------------------------------------------------------
    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        try:
            await self.faults.apply(
                request.method, request.path, request.query.get("watch", "").lower() in _TRUE
            )
            return await handler(request)
        except APIError as exc:
            headers = {"Retry-After": "1"} if exc.code in (429, 503) else None
            return web.Response(
                text=json.dumps(exc.status()),
                status=exc.code,
                content_type="application/json",
                headers=headers,
            )

    # -- routing ------------------------------------------------------------------------------
    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts or parts == ["version"]:
            return _json(
                {
                    "major": "1",
                    "minor": "30",
                    "gitVersion": GIT_VERSION,
                    "platform": "linux/amd64",
                    "goVersion": "go1.22",
                    "compiler": "gc",
                    "buildDate": "2024-04-17T00:00:00Z",
                    "gitCommit": "kubesim",
                    "gitTreeState": "clean",
                }
            )
        if parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                        ],
                    }
                )
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return _json(self._group_list())
            if parts[1] in self.aggregated:
                return self.aggregated[parts[1]](request, parts)
            if len(parts) == 2:
                return _json(self._group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        if not rest:
            return _json(self._resource_list(group, version))
        return await self._resource(request, group, version, rest)

    def _groups(self) -> dict[str, list[ResourceType]]:
        groups: dict[str, list[ResourceType]] = {}
        for rt in self.store.types.values():
            if rt.group:
                groups.setdefault(rt.group, []).append(rt)
        return groups

    def _group(self, name: str) -> dict[str, Any]:
        types = self._groups().get(name)
        if not types:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        versions = sorted({rt.version for rt in types})
        preferred = GROUP_PREFERRED.get(name, versions[0])
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": name,
            "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
            "preferredVersion": {"groupVersion": f"{name}/{preferred}", "version": preferred},
        }

    def _group_list(self) -> dict[str, Any]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(name) for name in sorted(self._groups())],
        }

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        types = [
            rt for rt in self.store.types.values() if rt.group == group and rt.version == version
        ]
        if not types:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": [
                entry for rt in sorted(types, key=lambda t: t.plural) for entry in rt.discovery()
            ],
        }

    def _lookup(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.store.find(group, version, plural)
        if rt is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        return rt

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and self.store.find(group, version, rest[2])
            and self.store.find(group, version, rest[2]).namespaced
        ):  # type: ignore[union-attr]
            namespace, rest = rest[1], rest[2:]
        rt = self._lookup(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (
            sub is not None
            and sub not in ("status", "log", "exec")
            and not (rt.kind == "Namespace" and sub == "finalize")
        ):
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        if rt.namespaced and name is not None and namespace is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        if sub == "status" and not rt.status_subresource:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        method = request.method
        query = request.query
        if method == "GET" and name is None:
            if query.get("watch", "").lower() in _TRUE:
                return await self._watch(request, rt, namespace)
            return _json(self._list(rt, namespace, query))
        if method == "GET" and sub == "log":
            return await self._log(request, namespace or "", name or "")
        if sub == "exec" and rt.kind == "Pod" and method in ("GET", "POST"):
            return await self._exec(request, namespace or "", name or "")
        if method == "GET":
            return _json(self.store.get(rt, namespace or "", name))  # type: ignore[arg-type]
        body = (
            await self._body(request)
            if method in ("POST", "PUT", "PATCH") or (method == "DELETE" and request.can_read_body)
            else None
        )
        mode = query.get("fieldValidation") or "Warn"
        if mode not in ("Ignore", "Warn", "Strict"):
            raise bad_request(
                f'fieldValidation parameter unsupported: {mode}, valid options are "Ignore", "Warn" and "Strict"'
            )
        dry_run = "dryRun" in query
        self.api.warnings = []
        if method == "POST" and name is None:
            created = self.api.create(rt, namespace, body, field_validation=mode, dry_run=dry_run)
            return self._warned(_json(created, 201))
        if method == "PUT" and name:
            if rt.kind == "Namespace" and sub == "finalize":
                sub = None
            replaced = self.api.replace(rt, namespace or "", name, body, sub, field_validation=mode)
            return self._warned(_json(replaced))
        if method == "PATCH" and name:
            content_type = request.headers.get("Content-Type", "")
            patched = self.api.patch(
                rt, namespace or "", name, body, content_type, sub, field_validation=mode
            )
            return self._warned(_json(patched))
        if method == "DELETE":
            options = dict(body or {})
            for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
                if key in query:
                    options[key] = (
                        query[key]
                        if key == "propagationPolicy"
                        else (
                            int(query[key])
                            if key == "gracePeriodSeconds"
                            else query[key].lower() in _TRUE
                        )
                    )
            if name is None:
                return _json(self._delete_collection(rt, namespace, query, options))
            obj = self.api.delete(rt, namespace or "", name, options)
            if rt.kind == "Pod" or self.store.peek(rt, namespace or "", name) is not None:
                return _json(obj)  # pods, and deletions still pending, return the object
            return _json(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": name,
                        **({"group": rt.group} if rt.group else {}),
                        "kind": rt.plural,
                        "uid": obj["metadata"]["uid"],
                    },
                }
            )
        raise APIError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            {},
        )

    def _warned(self, response: web.Response) -> web.Response:
        """Add the apiserver's ``Warning: 299 - "..."`` headers for this request."""
        for text in self.api.warnings:
            response.headers.add("Warning", f"299 - {json.dumps(text)}")
        self.api.warnings = []
        return response

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            try:
                import yaml

                return yaml.safe_load(raw)
            except Exception:
                raise bad_request("the body of the request could not be decoded as JSON") from None

    # -- list and watch ----------------------------------------------------------------------------
    def _selectors(self, rt: ResourceType, query: Any) -> Callable[[Obj], bool]:
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(
                query.get("fieldSelector"), rt.field_values, rt.supported_fields
            )
        except SelectorError as exc:
            raise bad_request(str(exc)) from None
        return lambda obj: labels(obj["metadata"].get("labels") or {}) and fields(obj)

    def _ordered(self, rt: ResourceType, namespace: str | None) -> tuple[list[Obj], list[str]]:
        """Objects in (namespace, name) order and their "ns/name" keys, kept while nothing
        changes: the pages of one big LIST then cost a bisect each, not a sort."""
        key = (rt.key, namespace, self.store.rv)
        if self._order_cache is None or self._order_cache[0] != key:
            ordered = sorted(
                self.store.list(rt, namespace),
                key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
            )
            refs = [
                f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in ordered
            ]
            self._order_cache = (key, ordered, refs)
        return self._order_cache[1], self._order_cache[2]

    def _list(self, rt: ResourceType, namespace: str | None, query: Any) -> dict[str, Any]:
        matches = self._selectors(rt, query)
        rv = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        if rv and match == "Exact" and int(rv) != self.store.rv:
            raise expired(rv, self.store.rv)
        start = ""
        list_rv = self.store.rv
        token = query.get("continue")
        if token:
            try:
                state = json.loads(base64.b64decode(token))
                start, list_rv = state["start"], state["rv"]
            except Exception:
                raise bad_request("continue key is not valid") from None
        ordered, refs = self._ordered(rt, namespace)
        # Pages resume after the last object sent, in (namespace, name) order, as etcd keys do.
        position = bisect.bisect_right(refs, start) if start else 0
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        limit = int(query.get("limit") or 0)
        items: list[Obj] = []
        for obj in itertools.islice(ordered, position, None):
            if not matches(obj):
                continue
            if limit and len(items) == limit:
                last = items[-1]["metadata"]
                meta["continue"] = base64.b64encode(
                    json.dumps(
                        {"start": f"{last.get('namespace', '')}/{last['name']}", "rv": list_rv}
                    ).encode()
                ).decode()
                if not (query.get("labelSelector") or query.get("fieldSelector")):
                    # Kubernetes leaves remainingItemCount unset when selectors are given.
                    meta["remainingItemCount"] = len(ordered) - position - limit
                break
            items.append(obj)
        if not rt.crd:
            items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": meta,
            "items": items,
        }

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        matches = self._selectors(rt, query)
        rv = query.get("resourceVersion", "")
        since = None if rv in ("", "0") else int(rv)
        bookmarks = query.get("allowWatchBookmarks", "").lower() in _TRUE
        timeout = float(
            query.get("timeoutSeconds") or self.watch_timeout_seconds * (1 + random.random())
        )
        try:
            watcher = self.store.watch(rt, namespace, matches, since)
        except APIError as exc:
            # A too-old resourceVersion is reported inside the watch stream (HTTP 200).
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await response.write(
                (json.dumps({"type": "ERROR", "object": exc.status()}) + "\n").encode()
            )
            await response.write_eof()
            return response
        response = web.StreamResponse(
            headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
        )
        try:
            await response.prepare(request)
        except ConnectionResetError:  # the client went away already
            self.store.unwatch(watcher)
            return response
        entry = (watcher, response)
        self.active_watches.add(entry)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    event = await asyncio.wait_for(
                        watcher.queue.get(), timeout=min(remaining, self.bookmark_seconds)
                    )
                except TimeoutError:
                    if bookmarks and loop.time() < deadline:
                        mark = {
                            "kind": rt.kind,
                            "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(self.store.rv)},
                        }
                        await response.write(
                            (json.dumps({"type": "BOOKMARK", "object": mark}) + "\n").encode()
                        )
                    continue
                if event is None:  # dropped by a fault, or the type went away
                    if watcher.abort and request.transport is not None:
                        request.transport.close()
                        return response
                    break
                kind, obj = event
                await response.write((json.dumps({"type": kind, "object": obj}) + "\n").encode())
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(watcher)
            self.active_watches.discard(entry)
        return response

    def drop_watches(self, abort: bool = False) -> int:
        """End every open watch (``abort``: cut the connection instead of a clean end)."""
        dropped = 0
        for watcher, _ in list(self.active_watches):
            watcher.abort = abort
            watcher.queue.put_nowait(None)
            dropped += 1
        return dropped

    def _delete_collection(
        self, rt: ResourceType, namespace: str | None, query: Any, options: dict[str, Any]
    ) -> dict[str, Any]:
        matches = self._selectors(rt, query)
        deleted = []
        for obj in list(self.store.list(rt, namespace)):
            if matches(obj):
                deleted.append(
                    self.api.delete(
                        rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], options
                    )
                )
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": deleted,
        }

    # -- logs --------------------------------------------------------------------------------------
    async def _exec(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        """``pods/exec``: the apiserver's checks, then the kubelet's stream for a container
        kubesim runs as a local process (see :mod:`.execstream`)."""
        pod = self.store.get(self.store.by_kind("Pod"), namespace, name)
        phase = pod["status"].get("phase")
        if phase in ("Succeeded", "Failed"):
            raise bad_request(
                f"cannot exec into a container in a completed pod; current phase is {phase}"
            )
        containers = [c["name"] for c in pod["spec"]["containers"]]
        container = request.query.get("container")
        if not container:
            if len(containers) > 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
                )
            container = containers[0]
        if container not in containers:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if not pod["spec"].get("nodeName"):
            raise bad_request(f"pod {name} does not have a host assigned")
        if request.headers.get("Upgrade", "").lower() not in ("websocket", "spdy/3.1"):
            raise bad_request("Upgrade request required")
        status = next(
            (s for s in pod["status"].get("containerStatuses") or [] if s["name"] == container),
            None,
        )
        if status is None or "running" not in (status.get("state") or {}):
            raise APIError(500, "InternalError", f'container not found ("{container}")')
        target = self.kubelet.exec_target(pod, container)
        if target is None:
            raise APIError(
                501,
                "NotImplemented",
                "kubesim runs exec only in containers it runs as local processes (run_locally)",
            )
        env, cwd = target
        argv = request.query.getall("command", [])
        stdin = request.query.get("stdin", "").lower() in _TRUE
        return await execstream.serve(request, argv, env, cwd, stdin)

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pod = self.store.get(self.store.by_kind("Pod"), namespace, name)
        containers = [c["name"] for c in pod["spec"]["containers"]]
        container = request.query.get("container")
        if not container:
            if len(containers) > 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
                )
            container = containers[0]
        if container not in containers:
            raise bad_request(f"container {container} is not valid for pod {name}")
        status = next(
            (s for s in pod["status"].get("containerStatuses") or [] if s["name"] == container),
            None,
        )
        if status is None or ("waiting" in status["state"] and not status.get("lastState")):
            reason = (
                (status or {})
                .get("state", {})
                .get("waiting", {})
                .get("reason", "ContainerCreating")
            )
            raise bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        buffer = self.kubelet.log(namespace, name, container)
        follow = request.query.get("follow", "").lower() in _TRUE
        timestamps = request.query.get("timestamps", "").lower() in _TRUE
        tail = request.query.get("tailLines")
        lines = list(buffer.lines)
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) > 0 else []

        def render(items: list[tuple[str, str]]) -> bytes:
            return "".join(
                f"{stamp} {text}" if timestamps else text for stamp, text in items
            ).encode()

        if not follow:
            return web.Response(body=render(lines), content_type="text/plain")
        response = web.StreamResponse(
            headers={"Content-Type": "text/plain", "Transfer-Encoding": "chunked"}
        )
        await response.prepare(request)
        await response.write(render(lines))
        sent = len(buffer.lines)
        try:
            while not buffer.closed or sent < len(buffer.lines):
                if sent >= len(buffer.lines):
                    await buffer.changed.wait()
                    continue
                chunk = buffer.lines[sent:]
                sent += len(chunk)
                await response.write(render(chunk))
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response
