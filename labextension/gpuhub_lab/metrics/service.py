"""The answer ``GET /gpuhub/api/metrics`` (:mod:`.handlers`) and its stream (:mod:`.stream`)
both send, serialized once per sample.

Many clients poll the same server: the part of the answer that only depends on the sample is
serialized once per sample (by msgspec, about ten times faster than the standard library's
``json`` here) and shared by the polling endpoint and the stream. It lives below both, so
neither imports the other to reach it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .kernels import SessionPaths
from .sampler import MIN_INTERVAL, GPUSampler, Sample

_encode = msgspec.json.Encoder().encode


class MetricsService:
    """Sampler + notebook paths + the shared serialized answer."""

    def __init__(
        self,
        sampler: GPUSampler,
        paths: SessionPaths | None,
        assigned: dict[str, Any] | None = None,
    ) -> None:
        self.sampler = sampler
        self.paths = paths
        self.assigned = assigned
        self._head_key: tuple[int, int] | None = None
        self._head = b""
        self.encodes = 0  # samples serialized: once each, however many clients (tests count)

    async def head(self, sample: Sample | None) -> tuple[tuple[int, int], bytes]:
        """The answer for ``sample`` without history, serialized once per sample (and per
        change of notebook paths), with the key it was serialized for."""
        paths: dict[str, str] = {}
        if sample is not None and self.paths is not None:
            kernel_ids = sample.kernel_ids()
            if kernel_ids:
                paths = await self.paths.lookup(kernel_ids)
        return self._head_for(sample, paths)

    def head_now(self, sample: Sample) -> tuple[tuple[int, int], bytes] | None:
        """:meth:`head` without waiting, or None when notebook paths must be fetched first
        (at most every few seconds, see :class:`.kernels.SessionPaths`)."""
        paths: dict[str, str] | None = {}
        if self.paths is not None:
            kernel_ids = sample.kernel_ids()
            if kernel_ids:
                paths = self.paths.cached(kernel_ids)
        return None if paths is None else self._head_for(sample, paths)

    def _head_for(
        self, sample: Sample | None, paths: dict[str, str]
    ) -> tuple[tuple[int, int], bytes]:
        key = (
            sample.seq if sample is not None else -1,
            self.paths.version if self.paths is not None else 0,
        )
        if key != self._head_key:
            self._head = self._serialize_head(sample, paths)
            self._head_key = key
            self.encodes += 1
        return key, self._head

    async def response(self, since: float | None) -> bytes:
        return (await self.response_at(since))[1]

    async def response_at(self, since: float | None) -> tuple[int, bytes]:
        """The full answer (history newer than ``since``) and the sample number it shows."""
        (seq, _), head = await self.head(await self.sampler.latest())
        history = self.sampler.history_since(since)
        return seq, b"".join((head[:-1], b',"history":[', b",".join(history), b"]}"))

    def _serialize_head(self, sample: Sample | None, paths: dict[str, str]) -> bytes:
        if sample is None:
            body: dict[str, Any] = {
                "available": False,
                "reason": "The GPU sampler has not produced a first sample yet.",
                "gpus": [],
            }
        else:
            gpus = sample.gpus  # processes carry "path": None until a notebook is known
            if paths:
                gpus = [
                    {
                        **g,
                        "processes": [
                            {**p, "path": paths.get(p["kernel_id"]) if p["kernel_id"] else None}
                            for p in g["processes"]
                        ],
                    }
                    for g in gpus
                ]
            body = {
                "available": sample.available,
                "reason": sample.reason,
                "time": round(sample.time, 3),
                "gpus": gpus,
            }
        body["assigned"] = self.assigned
        body["interval"] = self.sampler.interval
        body["min_interval"] = MIN_INTERVAL
        body["source"] = "simulated" if self.sampler.simulated else self.sampler.source
        return _encode(body)
