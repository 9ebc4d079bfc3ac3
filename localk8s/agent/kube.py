"""The node agent's connection to the apiserver: JSON requests and a resumable pod watch."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger("gpuhub.node-agent")


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass
class Kube:
    server: str
    ca: Path
    cert: Path
    key: Path

    async def __aenter__(self) -> Kube:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=32),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Any:
        data = None if body is None else json.dumps(body)
        async with self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers={"Content-Type": content_type},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            text = await response.text()
            if response.status >= 400:
                try:
                    message = json.loads(text).get("message", text)
                except ValueError:
                    message = text
                raise ApiError(response.status, message)
            return json.loads(text) if text else None

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    async def watch(
        self, path: str, field_selector: str = ""
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """LIST then WATCH the objects at ``path`` (e.g. ``/api/v1/pods``) matching
        ``field_selector``, for ever: a dropped watch resumes from its last resourceVersion,
        a ``410 Gone`` lists again. A LIST yields ``("SYNC", obj)`` for each object, then
        ``("SYNCED", {})``."""
        version = ""
        selector = {"fieldSelector": field_selector} if field_selector else {}
        while True:
            try:
                if not version:
                    listing = await self.request("GET", path, params=selector)
                    for pod in listing["items"]:
                        yield "SYNC", pod
                    yield "SYNCED", {}
                    version = listing["metadata"]["resourceVersion"]
                params = {
                    **selector,
                    "watch": "1",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "300",
                }
                async with self.session.get(
                    self.server + path,
                    params=params,
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=400),
                ) as response:
                    if response.status == 410:
                        version = ""
                        continue
                    if response.status >= 400:
                        raise ApiError(response.status, await response.text())
                    async for line in response.content:
                        event = json.loads(line)
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                version = ""
                            break
                        version = obj["metadata"]["resourceVersion"]
                        if kind != "BOOKMARK":
                            yield kind, obj
            except (aiohttp.ClientError, TimeoutError, ApiError) as error:
                log.warning("watch of %s interrupted (%s); resuming", path, error)
                await asyncio.sleep(1)
