"""The hub's first sync as it was before typed decoding (issue 30), for side-by-side runs.

:class:`JsonCapacity` is :class:`gpuhub.hub.ledger.capacity.ClusterCapacity` with the list
and watch it had until then: LIST pages of ``LIST_PAGE`` asked for one after the other
(gzipped, as aiohttp asks by default), each parsed whole by ``json.loads`` with the cyclic GC
paused, and ``kubernetes_asyncio``'s ``Watch`` (``json.loads`` per event). What it keeps and
how it counts are the cache's own: only the decoding and the requests differ.
"""

from __future__ import annotations

import gc
import json
from typing import Any

from gpuhub.hub.ledger.capacity import ACTIVE_PODS, LIST_PAGE, ClusterCapacity, _Lists


def parse_body(body: bytes) -> Any:
    """``json.loads`` with the cyclic GC paused (a page is thousands of fresh containers)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(body)
    finally:
        if enabled:
            gc.enable()


class JsonCapacity(ClusterCapacity):
    """The capacity cache with ``json.loads`` decoding and paged LISTs, one at a time."""

    def _list_call(self, kind: str) -> Any:
        """The generated list method of ``kind`` and its arguments, as the cache had them."""
        if kind == "nodes":
            return self.api.list_node, {}
        return self.api.list_pod_for_all_namespaces, {"field_selector": ACTIVE_PODS}

    async def _sync(self, kind: str) -> str:
        method, kwargs = self._list_call(kind)
        lists = _Lists()
        version, token = "", None
        while True:
            page = {"limit": LIST_PAGE, **({"_continue": token} if token else {})}
            response = await method(
                _preload_content=False, _request_timeout=self.request_timeout, **kwargs, **page
            )
            body = parse_body(await response.read())
            meta = body.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            for item in body.get("items") or []:
                self._take(kind, item, lists)
            token = meta.get("continue")
            if not token:
                break
        return self._install(kind, lists, {"metadata": {"resourceVersion": version}})

    async def _watch(self, kind: str, version: str, initial: bool = False) -> str:
        from kubernetes_asyncio import watch

        method, kwargs = self._list_call(kind)
        stream = watch.Watch(return_type="object")
        async with stream:
            async for event in stream.stream(
                method,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout,
                _request_timeout=self.watch_timeout + 30,
                **kwargs,
            ):
                version = self._apply(kind, event) or version
        return version
