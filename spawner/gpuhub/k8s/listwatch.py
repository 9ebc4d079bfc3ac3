"""LIST and WATCH of one kind, through a ``kubernetes_asyncio`` list call, decoded by
:mod:`gpuhub.k8s.objects` (only the fields gpuhub reads).

``call`` is the generated method that lists the kind (``CoreV1Api.list_node``,
``list_pod_for_all_namespaces``, ...): it is called with ``_preload_content=False`` and the
answer read here, so neither ``kubernetes_asyncio``'s models nor ``json.loads`` touch the
objects.

* :func:`watch` streams events; with ``initial=True`` it is a *streaming list*
  (``sendInitialEvents``, Kubernetes 1.27+): the apiserver sends every object as an
  ``ADDED`` event from its watch cache, then a bookmark (:func:`initial_events_end`), then the
  changes, on one connection. It encodes ahead while gpuhub decodes, no page waits for the
  request of the next, and nothing is gzipped.
* :func:`list_pages` pages a LIST (for an apiserver that does not stream lists), asking for
  the next page before the caller reads the current one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from gpuhub.k8s.objects import Event, ListPage, decode_event, decode_list
from gpuhub.k8s.rawapi import request_body

# The bookmark annotation that ends a streaming list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# At most this long on the event loop between two pauses while reading a stream that
# arrives faster than it is decoded (a first sync of 150,000 pods).
SLICE_S = 0.005


def initial_events_end(event: Event) -> bool:
    """Whether ``event`` is the bookmark after a streaming list's initial events."""
    if event["type"] != "BOOKMARK":
        return False
    notes = (event["object"].get("metadata") or {}).get("annotations") or {}
    return notes.get(INITIAL_EVENTS_END) == "true"


def _api_exception(status: int, reason: str, body: bytes = b"") -> Exception:
    from kubernetes_asyncio.client.exceptions import ApiException

    exc = ApiException(status=status, reason=reason)
    exc.body = body
    return exc


async def watch(
    call: Callable[..., Any],
    kind: str,
    *,
    version: str = "",
    initial: bool = False,
    timeout_seconds: int = 300,
    **kwargs: Any,
) -> AsyncGenerator[Event, None]:
    """The events of a watch of ``kind`` (a key of :data:`gpuhub.k8s.objects.KINDS`) from
    ``version``, bookmarks included, until the server ends it; ``initial``: a streaming list
    first (``version`` then unused). An ``ERROR`` event or a non-2xx answer raises
    ``ApiException`` (410: the history is gone, list again)."""
    if initial:
        where = {"send_initial_events": True, "resource_version_match": "NotOlderThan"}
    else:
        where = {"resource_version": version}
    response = await call(
        watch=True,
        allow_watch_bookmarks=True,
        timeout_seconds=timeout_seconds,
        _request_timeout=timeout_seconds + 30,
        _preload_content=False,
        **where,
        **kwargs,
    )
    try:
        if not 200 <= response.status <= 299:
            raise _api_exception(response.status, response.reason, await response.read())
        rest = b""
        paused = time.perf_counter()
        async for chunk in response.content.iter_any():
            if b"\n" not in chunk:
                rest += chunk
                continue
            *lines, tail = (rest + chunk).split(b"\n")
            rest = tail
            for line in lines:
                if not line:
                    continue
                event = decode_event(kind, line)
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise _api_exception(
                        int(status.get("code") or 500),
                        f"{status.get('reason')}: {status.get('message')}",
                    )
                yield event
            if time.perf_counter() - paused > SLICE_S:
                # The next chunk may be buffered already: let the hub's other work run.
                await asyncio.sleep(0)
                paused = time.perf_counter()
    finally:
        response.release()


async def list_pages(
    call: Callable[..., Any], kind: str, *, limit: int, timeout: float, **kwargs: Any
) -> AsyncGenerator[ListPage, None]:
    """A LIST of ``kind`` in pages of ``limit`` objects. The next page is asked for as soon
    as this one's continue token is known, so the apiserver encodes it while the caller
    works through this one."""

    async def fetch(token: str | None) -> bytes:
        page = {"limit": limit, **({"_continue": token} if token else {})}
        return await request_body(
            call(_preload_content=False, _request_timeout=timeout, **kwargs, **page)
        )

    pending: asyncio.Task[bytes] | None = asyncio.ensure_future(fetch(None))
    try:
        while pending is not None:
            page = decode_list(kind, await pending)
            pending = asyncio.ensure_future(fetch(page.token)) if page.token else None
            yield page
    finally:
        if pending is not None:
            pending.cancel()
