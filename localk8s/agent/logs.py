"""Container logs as a kubelet keeps them: one file per container instance, in the CRI
format (``<RFC 3339 time> <stream> F <line>``), read back for ``pods/log`` with ``follow``,
``tailLines``, ``sinceSeconds``/``sinceTime``, ``timestamps`` and ``limitBytes``; and the
output as it comes, to each listener (``pods/attach``: :mod:`.server`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path


def timestamp() -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z"


def _parse_time(text: str) -> datetime.datetime:
    head, _, frac = text.rstrip("Z").partition(".")
    parsed = datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.UTC)
    return parsed + datetime.timedelta(microseconds=int((frac or "0")[:6].ljust(6, "0")))


@dataclass
class ContainerLog:
    """The log of one run of one container."""

    path: Path
    closed: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _partial: dict[str, bytes] = field(default_factory=dict)
    # Attached clients: each gets every chunk as written, then None once the run ends.
    _listeners: set[asyncio.Queue[tuple[str, bytes] | None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.path.touch()

    def listen(self) -> asyncio.Queue[tuple[str, bytes] | None]:
        """A queue of the output written from now on, ``(stream, bytes)``, ended by None."""
        queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        if self.closed:
            queue.put_nowait(None)
        else:
            self._listeners.add(queue)
        return queue

    def unlisten(self, queue: asyncio.Queue[tuple[str, bytes] | None]) -> None:
        self._listeners.discard(queue)

    def write(self, stream: str, chunk: bytes) -> None:
        for queue in self._listeners:
            queue.put_nowait((stream, chunk))
        self._append(stream, chunk)

    def _append(self, stream: str, chunk: bytes) -> None:
        data = self._partial.pop(stream, b"") + chunk
        *lines, rest = data.split(b"\n")
        if rest:
            self._partial[stream] = rest
        if lines:
            stamp = timestamp().encode()
            with self.path.open("ab") as f:
                for line in lines:
                    f.write(stamp + b" " + stream.encode() + b" F " + line + b"\n")
            self._wake()

    def close(self) -> None:
        for stream, rest in list(self._partial.items()):
            self._append(stream, rest + b"\n")
        self.closed = True
        for queue in self._listeners:
            queue.put_nowait(None)
        self._listeners.clear()
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self) -> None:
        await self._changed.wait()

    async def read(
        self,
        *,
        follow: bool = False,
        tail: int | None = None,
        since: datetime.datetime | None = None,
        timestamps: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[bytes]:
        """The log's lines as ``pods/log`` returns them."""
        offset = 0
        sent = 0
        first = True
        while True:
            try:
                with self.path.open("rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            complete = data[: data.rfind(b"\n") + 1]
            offset += len(complete)
            lines = complete.splitlines(keepends=True)
            if first and tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            first = False
            for raw in lines:
                stamp, _, rest = raw.partition(b" ")
                _stream, _, rest = rest.partition(b" ")
                _tag, _, text = rest.partition(b" ")
                if since is not None and _parse_time(stamp.decode()) < since:
                    continue
                out = stamp + b" " + text if timestamps else text
                if limit is not None and sent + len(out) > limit:
                    yield out[: limit - sent]
                    return
                sent += len(out)
                yield out
            if not follow or (self.closed and offset >= self.path.stat().st_size):
                return
            # Woken by new lines; the timeout re-reads a file written by another process.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed(), timeout=1.0)
