"""``GET {base_url}gpuhub/api/metrics/stream``: the GPU metrics pushed over a WebSocket.

The first message is the body ``GET /gpuhub/api/metrics`` returns (history included); then
one message per new sample, the same JSON without ``history`` (docs/gpu-metrics.md). Clients
send nothing.

Costs do not grow with the sockets but by one write each: the server's one sampler
(:mod:`.sampler`) publishes each sample on the event loop, in the same tick that read it when
the read is quick; there it is serialized once (the same text the polling endpoint serves,
:class:`.service.MetricsService`) and framed once. A server's WebSocket frame is the same
bytes for every socket (unmasked, and this handler never negotiates compression), so that
frame is handed as it is to each socket: one ``send()`` each when nothing waits before it.

A slow socket never holds back the sampler or the others: a socket keeps at most one frame
in flight and the newest sample waiting behind it, replacing older ones (a chart wants the
latest figures, not a backlog); a socket whose frame has not left the server for
``MetricsStream.stuck_timeout`` seconds is closed.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import threading
import time
from typing import TYPE_CHECKING, Any

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado.iostream import IOStream, StreamClosedError
from tornado.websocket import WebSocketHandler
from traitlets import Float, TraitError, validate
from traitlets.config import LoggingConfigurable

if TYPE_CHECKING:
    from .sampler import Sample
    from .service import MetricsService

#: Close code for a socket closed because it stopped reading ("try again later", RFC 6455).
CLOSE_STUCK = 1013


def text_frame(payload: bytes) -> bytes:
    """One final, unmasked, uncompressed WebSocket text frame (RFC 6455, 5.2) carrying
    ``payload`` (UTF-8): what a server sends, the same bytes for every client."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x81, size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x81, 126, size)
    else:
        header = struct.pack("!BBQ", 0x81, 127, size)
    return header + payload


class MetricsStream(LoggingConfigurable):
    """The open metrics sockets of this server, fed by its one sampler."""

    stuck_timeout = Float(
        30.0,
        config=True,
        help="Close a metrics stream whose client has not taken a message for this many "
        "seconds (it stopped reading); meanwhile it only keeps the newest sample.",
    )

    @validate("stuck_timeout")
    def _check_stuck(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if not value > 0:
            raise TraitError(
                f"MetricsStream.stuck_timeout must be a positive number of seconds, not {value:g}."
            )
        return value

    def __init__(self, service: MetricsService, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = service
        self.sockets: set[MetricsStreamHandler] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._frame_key: tuple[int, int] | None = None
        self._frame = b""
        self._tasks: set[asyncio.Future[None]] = set()
        # Counters for tests, benchmarks and logs.
        self.frames = 0  # per-sample frames built: one per sample, whatever the sockets
        self.sent = 0  # frames written to sockets
        self.dropped = 0  # samples a slow socket skipped (a newer one replaced them)
        self.closed_stuck = 0

    # -- sockets come and go ---------------------------------------------------------------
    async def join(self, socket: MetricsStreamHandler) -> None:
        """Send ``socket`` the full answer, then every new sample until it leaves."""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self.sockets.add(socket)
        if len(self.sockets) == 1:
            self.service.sampler.listen(self._on_sample)
        seq, body = await self.service.response_at(None)
        if socket not in self.sockets:  # it closed while we waited for a first sample
            return
        socket.sent_seq = seq - 1
        socket.ready = True
        # Its own first message (its own history) is framed for it alone.
        socket.offer(seq, text_frame(body), time.monotonic())

    def leave(self, socket: MetricsStreamHandler) -> None:
        self.sockets.discard(socket)
        if not self.sockets:
            self.service.sampler.unlisten(self._on_sample)

    def close_all(self) -> None:
        for socket in list(self.sockets):
            socket.close(1001, "The Jupyter server is shutting down.")
        self.sockets.clear()
        self.service.sampler.unlisten(self._on_sample)

    # -- samples go out --------------------------------------------------------------------
    def _on_sample(self, sample: Sample) -> None:
        """The sampler's listener: send ``sample`` now when on the event loop (a server's
        sampler publishes there), else hand it to the loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self._loop_thread:
            self.publish_now(sample)
        else:
            loop.call_soon_threadsafe(self.publish_now, sample)

    def publish_now(self, sample: Sample) -> None:
        """Frame ``sample`` once and offer it to every socket, in this very call unless
        notebook paths must be fetched first (then in a task)."""
        if not self.sockets:
            return
        found = self.service.head_now(sample)
        if found is None:
            task = asyncio.ensure_future(self.publish(sample))
            self._tasks.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._tasks.discard)
            return
        self._offer_all(sample, *found)

    async def publish(self, sample: Sample) -> None:
        """:meth:`publish_now`, waiting for notebook paths when needed."""
        if self.sockets:
            self._offer_all(sample, *await self.service.head(sample))

    def _offer_all(self, sample: Sample, key: tuple[int, int], head: bytes) -> None:
        if key != self._frame_key:
            self._frame = text_frame(head)
            self._frame_key = key
            self.frames += 1
        frame, now = self._frame, time.monotonic()
        for socket in list(self.sockets):  # a socket may close (and leave) while offered
            socket.offer(sample.seq, frame, now)


class MetricsStreamHandler(WebSocketMixin, WebSocketHandler, JupyterHandler):
    """One client of the stream. Authentication, authorization (``read`` on ``gpuhub``, as
    ``GET /gpuhub/api/metrics``) and the Origin check are Jupyter's, as for its own sockets."""

    auth_resource = "gpuhub"

    sent_seq = -1  # the newest sample this socket was given
    ready = False  # its first message is out: per-sample frames may follow
    pending: tuple[int, bytes] | None = None  # the newest sample waiting for the socket
    inflight: asyncio.Future[None] | None = None  # the frame the socket has not taken yet
    inflight_since = 0.0
    skipped = 0

    @functools.cached_property
    def stream_hub(self) -> MetricsStream:
        # Looked up once: every sample reaches every socket through it.
        hub: MetricsStream = self.settings["gpuhub_metrics_stream"]
        return hub

    @ws_authenticated
    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        result = super().get(*args, **kwargs)
        if result is not None:
            await result

    async def open(self, *args: Any, **kwargs: Any) -> None:
        super().open(*args, **kwargs)  # WebSocketMixin: keep-alive pings
        self.set_nodelay(True)  # each sample goes out as it is taken, not batched by Nagle
        await self.stream_hub.join(self)

    def on_message(self, message: str | bytes) -> None:
        """Clients have nothing to say; whatever they send is ignored."""

    def on_close(self) -> None:
        self.stream_hub.leave(self)

    def offer(self, seq: int, frame: bytes, now: float) -> None:
        """Send ``frame`` (sample ``seq``) now, or keep it as the newest waiting sample."""
        if seq <= self.sent_seq:
            return
        if not self.ready or self.inflight is not None:
            if self.pending is not None:
                self.skipped += 1
                self.stream_hub.dropped += 1
            self.pending = (seq, frame)
            if self.inflight is not None and now - self.inflight_since > (
                self.stream_hub.stuck_timeout
            ):
                self._close_stuck(now)
            return
        self._send(seq, frame)

    def get_compression_options(self) -> None:
        """Never compress: frames are written as they are, the same bytes for every socket."""
        return None

    def _send(self, seq: int, frame: bytes) -> None:
        """Write ``frame``, then what waits behind it, until the socket's buffer is full."""
        while True:
            connection = self.ws_connection
            stream = connection.stream if connection is not None else None
            if connection is None or stream is None or connection.is_closing():
                return
            self.sent_seq = seq
            hub = self.stream_hub
            hub.sent += 1
            if type(stream) is IOStream and not stream.writing():
                # Nothing queued in tornado: hand the frame to the kernel ourselves, the cost
                # of one send() (what the stream would do, without its bookkeeping).
                try:
                    done = stream.socket.send(frame)
                except BlockingIOError:
                    done = 0
                except OSError:
                    hub.leave(self)
                    return  # the peer is gone: tornado's read side closes the socket
                frame = frame[done:]  # what the kernel did not take: tornado's buffer, in order
            if frame:
                try:
                    # The protocol's own stream: a whole frame, so it never interleaves with
                    # the pings and close frames tornado writes there the same way.
                    written = stream.write(frame)
                except StreamClosedError:
                    hub.leave(self)
                    return
                if not written.done():  # the kernel's socket buffer is full: wait for it
                    self.inflight, self.inflight_since = written, time.monotonic()
                    written.add_done_callback(self._flushed)
                    return
            if self.pending is None or self.pending[0] <= seq:
                self.pending = None
                return
            (seq, frame), self.pending = self.pending, None

    def _flushed(self, written: asyncio.Future[None]) -> None:
        self.inflight = None
        if written.cancelled() or written.exception() is not None:
            return  # the stream closed: on_close follows
        if self.pending is not None:
            (seq, frame), self.pending = self.pending, None
            if seq > self.sent_seq:
                self._send(seq, frame)

    def _close_stuck(self, now: float) -> None:
        hub = self.stream_hub
        hub.closed_stuck += 1
        hub.leave(self)
        self.log.warning(
            "gpuhub: closed a GPU metrics stream to %s that took no message for %.0f s "
            "(%d samples skipped)",
            self.request.remote_ip,
            now - self.inflight_since,
            self.skipped,
        )
        self.pending = None
        self.close(CLOSE_STUCK, "This client stopped reading the GPU metrics stream.")
