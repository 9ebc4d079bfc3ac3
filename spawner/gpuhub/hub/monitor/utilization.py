"""Where the hub learns how busy each held GPU is (for reclaim, metrics and the fleet page).

A source is named by the spawners' ``gpu_utilization_source`` trait, so a deployment (or a
test, or the demo's simulated GPUs) plugs in its own: subclass :class:`UtilizationSource`
and implement :meth:`~UtilizationSource.sample`. The hub calls it once per monitor tick for
every GPU holding; it must not block the event loop (run blocking reads in a thread).

A GPU missing from the answer is *unknown*, and unknown never counts as idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuhub.core.env import server_of
from gpuhub.core.holdings import Holding

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GPUSample:
    """One GPU of one holding at one moment."""

    gpu: str  # device index locally, "<pod>/<gpu>" on Kubernetes: a label for people
    utilization: float  # 0..1
    memory_used: int | None = None  # bytes
    # Bytes the holding's own processes use on this GPU (a share by memory on a workstation:
    # NVML's per-process memory, resident memory when simulated); None where not known.
    own_memory: int | None = None


Owned = dict[tuple[int, str, str], int]  # (device, user, server) -> bytes its processes use


def owned_memory(
    processes: dict[int, list[tuple[int, int]]], owners: dict[int, tuple[str, str]]
) -> Owned:
    """Per device, what each server's processes use: ``processes`` {device: [(pid, bytes)]},
    ``owners`` {pid: (user, server)}."""
    out: Owned = {}
    for device, found in processes.items():
        for pid, used in found:
            owner = owners.get(pid)
            if owner is not None:
                key = (device, *owner)
                out[key] = out.get(key, 0) + used
    return out


def holding_key(holding: Holding) -> tuple[str, str, str]:
    return (holding.user, holding.kind, holding.name)


class UtilizationSource:
    """Base class of utilization sources (the ``gpu_utilization_source`` trait)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        """Samples per holding (keyed by :func:`holding_key`); omit what cannot be read."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the source opened (HTTP sessions)."""

    def unsampled(self, holding: Holding) -> str:
        """Why ``holding`` has no samples, for the fleet page's utilization column."""
        return "no samples yet"


class NoUtilization(UtilizationSource):
    """Nothing is known: reclaim stays off (Kubernetes without ``prometheus_url``)."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        return {}

    def unsampled(self, holding: Holding) -> str:
        return "no utilization source configured: set prometheus_url"


class NVMLUtilization(UtilizationSource):
    """The hub machine's own GPUs, by device index, through NVML (local mode)."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        wanted = sorted({d for h in holdings for d in h.devices})
        if not wanted:
            return {}
        shares = any(h.share is not None and h.memory for h in holdings)
        by_device, processes = await asyncio.to_thread(_nvml_read, wanted, shares)
        own = await asyncio.to_thread(_owned_by_pid, processes) if shares else None
        return samples_by_device(holdings, by_device, own)


class SimulatedUtilization(UtilizationSource):
    """The simulated GPUs of ``gpu_devices = "simulated:N"`` (demos and tests): a GPU is as
    busy as the processes that use it (:mod:`gpuhub.core.simulated`), so an idle notebook on the
    demo is reclaimed and a busy cell keeps its GPU, as on real hardware."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        from gpuhub.core.simulated import TRACKER

        if not any(h.devices for h in holdings):
            return {}
        usage = await asyncio.to_thread(TRACKER.refresh)
        devices = {d for h in holdings for d in h.devices}
        by_device: dict[int, tuple[float, int | None]] = {
            d: (
                min(usage.utilization.get(d, 0.0) / 100, 1.0),
                sum(rss for _, rss in usage.processes.get(d, [])),
            )
            for d in devices
        }
        return samples_by_device(holdings, by_device, owned_memory(usage.processes, usage.owners))


def samples_by_device(
    holdings: Sequence[Holding],
    by_device: dict[int, tuple[float, int | None]],
    own: Owned | None = None,
) -> dict[tuple[str, str, str], list[GPUSample]]:
    """Per-device readings ``{index: (utilization, memory_used)}`` spread over holdings; a
    holding with any device unread is left out (unknown). ``own``: what each server's
    processes use per device, for servers holding a share by memory."""
    out: dict[tuple[str, str, str], list[GPUSample]] = {}
    for holding in holdings:
        if not holding.devices or any(d not in by_device for d in holding.devices):
            continue
        shared = own is not None and holding.kind == "server" and holding.memory > 0
        out[holding_key(holding)] = [
            GPUSample(
                str(d),
                by_device[d][0],
                by_device[d][1],
                own.get((d, holding.user, holding.name), 0) if shared and own is not None else None,
            )
            for d in holding.devices
        ]
    return out


class PrometheusUtilization(UtilizationSource):
    """The cluster's Prometheus, which scrapes NVIDIA's dcgm-exporter (the GPU Operator's
    setup): ``DCGM_FI_DEV_GPU_UTIL`` (percent) and ``DCGM_FI_DEV_FB_USED`` (MiB) per GPU,
    labelled with the pod using it. One query per metric per tick, for the whole fleet.

    Under a ServiceMonitor without ``honorLabels`` Prometheus renames the workload's labels
    to ``exported_pod``/``exported_namespace``; both spellings are read.
    """

    UTIL = "DCGM_FI_DEV_GPU_UTIL"
    MEMORY = "DCGM_FI_DEV_FB_USED"

    def __init__(self, url: str = "", timeout: float = 10.0, **settings: Any) -> None:
        super().__init__(url=url, timeout=timeout, **settings)
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.problem: str | None = None  # why the last read gave nothing, for the fleet page

    async def _query(self, promql: str) -> list[dict[str, Any]]:
        from urllib.parse import urlencode

        from tornado.httpclient import AsyncHTTPClient

        response = await AsyncHTTPClient().fetch(
            f"{self.url}/api/v1/query?{urlencode({'query': promql})}",
            request_timeout=self.timeout,
        )
        data = json.loads(response.body)
        if data.get("status") != "success":
            raise RuntimeError(f"Prometheus answered {data.get('error') or data}")
        return list(data["data"]["result"])

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        if not self.url or not any(h.pods for h in holdings):
            return {}
        # Until it answers (the monitor gives up on a read that takes too long).
        self.problem = f"Prometheus at {self.url} did not answer"
        try:
            utilization, memory = await asyncio.gather(
                self._query(self.UTIL), self._query(self.MEMORY)
            )
        except Exception as exc:
            self.problem = f"Prometheus at {self.url} did not answer: {exc}"
            raise
        self.problem = None
        per_pod: dict[tuple[str, str], dict[str, list[Any]]] = {}
        for series, scale, slot in ((utilization, 0.01, 0), (memory, 1 << 20, 1)):
            for item in series:
                labels = item.get("metric") or {}
                pod = labels.get("exported_pod") or labels.get("pod")
                namespace = labels.get("exported_namespace") or labels.get("namespace") or ""
                if not pod:
                    continue
                gpu = str(labels.get("gpu", labels.get("UUID", "?")))
                entry = per_pod.setdefault((namespace, pod), {}).setdefault(gpu, [None, None])
                try:
                    entry[slot] = float(item["value"][1]) * scale
                except (KeyError, IndexError, TypeError, ValueError):
                    continue
        out: dict[tuple[str, str, str], list[GPUSample]] = {}
        for holding in holdings:
            samples = []
            for namespace, pod in holding.pods:
                for gpu, (util, used) in sorted(per_pod.get((namespace, pod), {}).items()):
                    if util is not None:
                        memory_used = int(used) if used is not None else None
                        samples.append(GPUSample(f"{pod}/{gpu}", util, memory_used))
            if samples and len(samples) >= holding.gpus:  # a GPU not reported is unknown
                out[holding_key(holding)] = samples
        return out

    def unsampled(self, holding: Holding) -> str:
        if not self.url:
            return "no utilization source configured: set prometheus_url"
        if not holding.pods:
            return "no pod to sample yet (starting, or waiting in a queue)"
        if self.problem:
            return self.problem
        return "Prometheus has no samples for this pod yet"


def _nvml_read(
    indices: Sequence[int], processes: bool = False
) -> tuple[dict[int, tuple[float, int | None]], dict[int, list[tuple[int, int]]]]:
    """(utilization, memory used) per device; with ``processes``, also each device's
    compute processes and the GPU memory each uses (for shares of a device)."""
    try:
        import pynvml
    except ImportError:
        return {}, {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}, {}
    readings: dict[int, tuple[float, int | None]] = {}
    found: dict[int, list[tuple[int, int]]] = {}
    try:
        for index in indices:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                if processes:
                    found[index] = [
                        (int(p.pid), int(p.usedGpuMemory or 0))
                        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    ]
                readings[index] = (float(rates.gpu) / 100.0, int(memory.used))
            except pynvml.NVMLError as exc:
                log.debug("gpuhub: cannot read GPU %s: %s", index, exc)
        return readings, found
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _owned_by_pid(processes: dict[int, list[tuple[int, int]]]) -> Owned:
    """What each server's processes use per device, their server read from their environment
    (the hub runs as root on a workstation, so it can read them)."""
    import psutil

    owners: dict[int, tuple[str, str]] = {}
    for pid in {pid for found in processes.values() for pid, _ in found}:
        try:
            owner = server_of(psutil.Process(pid).environ())
        except (psutil.Error, OSError):
            continue
        if owner is not None:
            owners[pid] = owner
    return owned_memory(processes, owners)
