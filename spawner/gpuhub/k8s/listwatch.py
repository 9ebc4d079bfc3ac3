"""LIST and WATCH of one kind, read raw and decoded into only the fields gpuhub reads:
Kubernetes' protobuf (:mod:`gpuhub.k8s.protobuf`) where the kind has it, else JSON
(:mod:`gpuhub.k8s.objects`).

A :class:`Source` names what to read: the kind (a key of
:data:`gpuhub.k8s.objects.KINDS`), its collection's path (``/api/v1/pods``) and the query
that narrows it (a field selector). Requests go through the ``kubernetes_asyncio``
``ApiClient`` (its credentials and TLS), with ``_preload_content=False``: neither its models
nor ``json.loads`` touch the objects.

* :func:`watch` streams events; with ``initial=True`` it is a *streaming list*
  (``sendInitialEvents``, Kubernetes 1.27+): the apiserver sends every object as an
  ``ADDED`` event from its watch cache, then a bookmark (:func:`initial_events_end`), then the
  changes, on one connection. It encodes ahead while gpuhub decodes, no page waits for the
  request of the next, and nothing is gzipped.
* :func:`list_pages` pages a LIST (for an apiserver that does not stream lists), asking for
  the next page before the caller reads the current one.

Both ask for protobuf first and JSON second, and decode what the answer's content type says
(an aggregated API or a custom resource answers JSON).

:class:`Reflector` is what a cache of some kinds builds on (the hub's capacity watch of nodes
and pods, and of DRA's slices, claims and classes): each kind listed (streaming, else in
pages) into what the list builds, installed whole, then kept by the watch's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuhub.k8s import protobuf
from gpuhub.k8s.objects import Event, ListPage, decode_event, decode_list
from gpuhub.k8s.rawapi import read_body

log = logging.getLogger("gpuhub.k8s.listwatch")

# The bookmark annotation that ends a streaming list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# At most this long on the event loop between two pauses while reading a stream that
# arrives faster than it is decoded (a first sync of 150,000 pods).
SLICE_S = 0.005
# A watch arrives in TLS records of a few KB (the apiserver writes each event as it encodes
# it), and reading each as it comes costs a wake-up of the event loop, the SSL layer's and
# aiohttp's Python per record: about 20 us, two thirds of the hub's CPU for a first sync of
# 150,000 pods (docs/benchmarks.md). So when a read brings less than GATHER_BYTES (the
# stream is not ahead of us) right after another (records come back to back: Gatherer),
# the watch stops reading for GATHER_S and the kernel gathers what comes meanwhile; the
# next read takes it in one go. In a burst an event waits up to 10 ms longer; alone, not.
GATHER_BYTES = 128 * 1024
GATHER_S = 0.01
_JSON = "application/json"
# What an apiserver that cannot stream lists (no WatchList, before Kubernetes 1.27) answers
# a watch with ``sendInitialEvents``: the request is invalid.
NO_STREAMING = (400, 422)


@dataclass(frozen=True)
class Source:
    """What to list and watch: ``kind`` (a key of :data:`gpuhub.k8s.objects.KINDS`) at
    ``path`` (its collection, e.g. ``/api/v1/pods``), narrowed by ``query`` (e.g.
    ``{"fieldSelector": ...}``); ``encoding`` "protobuf" (where the kind has it) or "json"."""

    kind: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    encoding: str = "protobuf"

    @property
    def protobuf(self) -> bool:
        return self.encoding == "protobuf" and protobuf.supports(self.kind)

    def accept(self, stream: bool) -> str:
        if not self.protobuf:
            return _JSON
        if stream:
            return f"{protobuf.STREAM_CONTENT_TYPE}, {_JSON};stream=watch"
        return f"{protobuf.CONTENT_TYPE}, {_JSON}"


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


def _get(api: Any, source: Source, query: dict[str, str], timeout: float, stream: bool) -> Any:
    """The GET of ``source``'s collection (a coroutine of the raw aiohttp response)."""
    return api.call_api(
        source.path,
        "GET",
        query_params=list({**source.query, **query}.items()),
        header_params={"Accept": source.accept(stream)},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=timeout,
    )


def _is_protobuf(response: Any) -> bool:
    return str(response.headers.get("Content-Type", "")).startswith(protobuf.CONTENT_TYPE)


async def watch(
    api: Any,
    source: Source,
    *,
    version: str = "",
    initial: bool = False,
    timeout_seconds: int = 300,
) -> AsyncGenerator[Event, None]:
    """The events of a watch of ``source`` from ``version``, bookmarks included, until the
    server ends it; ``initial``: a streaming list first (``version`` then unused). ``api``:
    a ``kubernetes_asyncio`` ``ApiClient``. An ``ERROR`` event or a non-2xx answer raises
    ``ApiException`` (410: the history is gone, list again)."""
    query = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
    if initial:
        query |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    else:
        query["resourceVersion"] = version
    response = await _get(api, source, query, timeout_seconds + 30, stream=True)
    try:
        if not 200 <= response.status <= 299:
            raise _api_exception(response.status, response.reason, await response.read())
        events = _pb_events if _is_protobuf(response) else _json_events
        rest = b""
        paused = time.perf_counter()
        gathering = Gatherer(response)
        async for chunk in response.content.iter_any():
            found, rest = events(source.kind, rest + chunk if rest else chunk)
            for event in found:
                if event["type"] == "ERROR":
                    status = event["object"]
                    raise _api_exception(
                        int(status.get("code") or 500),
                        f"{status.get('reason')}: {status.get('message')}",
                    )
                yield event
            if await gathering.after(chunk):
                paused = time.perf_counter()
            elif time.perf_counter() - paused > SLICE_S:
                # The next chunk may be buffered already: let the hub's other work run.
                await asyncio.sleep(0)
                paused = time.perf_counter()
    finally:
        response.release()


def _json_events(kind: str, data: bytes) -> tuple[Iterator[Event], bytes]:
    """The events of the whole lines in ``data`` (one JSON event a line), and the rest."""
    *lines, rest = data.split(b"\n")
    return (decode_event(kind, line) for line in lines if line), rest


def _pb_events(kind: str, data: bytes) -> tuple[Iterator[Event], bytes]:
    """The events of the whole frames in ``data`` (length-prefixed protobuf), and the rest."""
    frames, used = protobuf.split_frames(data)
    return (protobuf.decode_event(kind, frame) for frame in frames), data[used:]


class Gatherer:
    """When a stream's reads are gathered: after a read of less than :data:`GATHER_BYTES`
    that came within :data:`GATHER_S` of the one before, i.e. while records come back to
    back (a first sync, a cluster in churn). An event after a quiet spell is handed on at
    once, so a watch that is mostly idle adds no delay."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.last = -GATHER_S  # when the last read was handed on

    async def after(self, chunk: bytes) -> bool:
        """Called once ``chunk`` is handled: gather the next read if due; whether it was."""
        now = time.perf_counter()
        due = len(chunk) < GATHER_BYTES and now - self.last < GATHER_S
        if due:
            await gather(self.response)
        self.last = time.perf_counter()
        return due


async def gather(response: Any) -> None:
    """Stop reading ``response`` for :data:`GATHER_S`, through aiohttp's own flow control
    (the pause its reader makes when its buffer is full), so the kernel's socket buffer
    gathers the records that come meanwhile."""
    protocol = getattr(response.connection, "protocol", None)
    if protocol is None:  # the answer is all read already
        return
    protocol.pause_reading()
    try:
        await asyncio.sleep(GATHER_S)
    finally:
        protocol.resume_reading()


async def list_pages(
    api: Any, source: Source, *, limit: int, timeout: float
) -> AsyncGenerator[ListPage, None]:
    """A LIST of ``source`` in pages of ``limit`` objects. The next page is asked for as
    soon as this one's continue token is known, so the apiserver encodes it while the caller
    works through this one."""

    async def fetch(token: str | None) -> ListPage:
        page = {"limit": str(limit), **({"continue": token} if token else {})}
        response = await _get(api, source, page, timeout, stream=False)
        pb = _is_protobuf(response)
        body = await read_body(response)
        return protobuf.decode_list(source.kind, body) if pb else decode_list(source.kind, body)

    pending: asyncio.Task[ListPage] | None = asyncio.ensure_future(fetch(None))
    try:
        while pending is not None:
            page = await pending
            pending = asyncio.ensure_future(fetch(page.token)) if page.token else None
            yield page
    finally:
        if pending is not None:
            pending.cancel()


class Unfinished(RuntimeError):
    """A streaming list ended before its initial events did."""


class Reflector:
    """List then watch, as client-go's reflector does, for a cache of one or more kinds.

    :meth:`_sync` lists a kind (a streaming list while the apiserver can, else pages of
    :attr:`list_page`) into what :meth:`_lists` makes for it, one object at a time
    (:meth:`_take`, :meth:`_drop`), then :meth:`_install` makes that the cache's; the watch
    that follows hands each event to :meth:`_apply`. A subclass says what these do, where
    each kind is (:meth:`_source`) and which ``ApiClient`` asks (:attr:`api_client`).
    :meth:`start` runs the loop of each of :attr:`watched` (:meth:`_run`), the one loop of
    every cache: it says failures through :meth:`_failed`, and a subclass waits out the
    refusals it expects in :meth:`_refused`."""

    list_page = 500  # client-go's reflector's
    request_timeout: float
    watch_timeout: int
    # Streaming lists (sendInitialEvents) until the apiserver says it cannot.
    stream_lists = True
    # The kinds :meth:`start` runs, one task each (named ``gpuhub-capacity-<kind>``).
    watched: tuple[str, ...] = ()
    _tasks: list[asyncio.Task[None]]  # a subclass's __init__ makes it empty

    def start(self) -> None:
        """Run each watched kind's list and watch (:meth:`_run`), once."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._run(kind), name=f"gpuhub-capacity-{kind}")
                for kind in self.watched
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _run(self, kind: str) -> None:
        """List then watch ``kind`` for ever: a watch the server ends is resumed, an expired
        one (410) listed again, a refusal :meth:`_refused` knows waited out, and any other
        failure said (:meth:`_failed`) and tried again after a backoff of up to 30 s."""
        from kubernetes_asyncio.client import ApiException

        backoff = 0.5
        while True:
            asked = "list"
            try:
                version = await self._sync(kind)
                backoff = 0.5
                asked = "watch"
                while True:  # the server ends a watch after watch_timeout: resume it
                    version = await self._watch(kind, version)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    log.info("The watch of %s expired; listing again", kind)
                    continue
                wait = self._refused(kind, exc, asked)
                if wait is not None:
                    await asyncio.sleep(wait)
                    continue
                self._failed(kind, f"the Kubernetes API answered {exc.status} {exc.reason}")
            except Exception as exc:  # network errors of every kind
                self._failed(kind, f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30)

    def _refused(self, kind: str, exc: Any, asked: str) -> float | None:
        """A refusal (``exc``, an ApiException, to the ``asked`` "list" or "watch") that is
        no failure of the cache: the seconds to wait before asking again; None for a
        failure."""
        return None

    def _failed(self, kind: str, detail: str) -> None:
        """The cache of ``kind`` cannot be kept now: ``detail`` says why."""
        raise NotImplementedError

    @property
    def api_client(self) -> Any:
        raise NotImplementedError

    def _source(self, kind: str) -> Source:
        raise NotImplementedError

    def _lists(self, kind: str) -> Any:
        """What a LIST of ``kind`` builds before it replaces the cache's, empty."""
        raise NotImplementedError

    def _take(self, kind: str, item: Mapping[str, Any], lists: Any) -> None:
        """One object of a LIST, into what the LIST builds."""
        raise NotImplementedError

    def _drop(self, kind: str, item: Mapping[str, Any], lists: Any) -> None:
        """An object a streaming list deleted before its initial events ended."""
        raise NotImplementedError

    def _install(self, kind: str, lists: Any, end: Mapping[str, Any]) -> str:
        """A LIST's lists become the cache's; ``end`` holds its resource version, returned."""
        raise NotImplementedError

    def _apply(self, kind: str, event: Mapping[str, Any]) -> str | None:
        """One watch event; the resource version it carries."""
        raise NotImplementedError

    async def _sync(self, kind: str) -> str:
        """Everything of ``kind`` now, installed; the version to watch from. A streaming list
        goes on as the watch, and returns only when the server ends it."""
        from kubernetes_asyncio.client import ApiException

        if self.stream_lists:
            try:
                return await self._watch(kind, "", initial=True)
            except ApiException as exc:
                if exc.status not in NO_STREAMING:
                    raise
                self.stream_lists = False
                log.info(
                    "The Kubernetes API does not stream lists (it answered %s %s): "
                    "listing in pages",
                    exc.status,
                    exc.reason,
                )
            except Unfinished:
                # The apiserver ended it early: it closes a watch that falls behind the
                # changes (a busy hub, a cluster in churn). Pages wait for the hub.
                log.info("The streaming list of %s ended early: listing it in pages", kind)
        return await self._relist(kind)

    async def _watch(self, kind: str, version: str, initial: bool = False) -> str:
        """Apply the events of one watch from ``version`` until the server ends it; the last
        version seen. ``initial``: a streaming list, whose initial events replace the cache's
        lists once all have come."""
        lists = self._lists(kind) if initial else None
        events = watch(
            self.api_client,
            self._source(kind),
            version=version,
            initial=initial,
            timeout_seconds=self.watch_timeout,
        )
        async with contextlib.aclosing(events):  # the connection goes back at once
            async for event in events:
                if lists is None:
                    version = self._apply(kind, event) or version
                elif initial_events_end(event):
                    version = self._install(kind, lists, event["object"])
                    lists = None
                elif event["type"] in ("ADDED", "MODIFIED"):  # the initial events are ADDED
                    self._take(kind, event["object"], lists)
                elif event["type"] == "DELETED":
                    self._drop(kind, event["object"], lists)
        if lists is not None:
            raise Unfinished(f"its list of {kind} ended before its initial events did")
        return version

    async def _relist(self, kind: str) -> str:
        """LIST in pages of :attr:`list_page`, keeping only what the cache needs from each
        page: a large cluster never sits in memory as one document."""
        lists = self._lists(kind)
        version = ""
        pages = list_pages(
            self.api_client, self._source(kind), limit=self.list_page, timeout=self.request_timeout
        )
        async with contextlib.aclosing(pages):
            async for page in pages:
                version = page.version or version
                for item in page.items:
                    self._take(kind, item, lists)
        return self._install(kind, lists, {"metadata": {"resourceVersion": version}})
