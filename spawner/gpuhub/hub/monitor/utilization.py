"""Where the hub learns how busy each held GPU is (for reclaim, metrics and the fleet page).

A source is named by the spawners' ``gpu_utilization_source`` trait, so a deployment (or a
test, or the demo's simulated GPUs) plugs in its own: subclass :class:`UtilizationSource`
and implement :meth:`~UtilizationSource.sample`. The hub calls it once per monitor tick for
every GPU holding; it must not block the event loop (run blocking reads in a thread).

A GPU missing from the answer is *unknown*, and unknown never counts as idle.

On a workstation's GPU shared by memory, what each share's own processes use
(:attr:`GPUSample.own_memory`, for the over-share watch) counts only processes that prove
they are that server's (:class:`gpuhub.hub.ledger.launches.Proof`: its launch's signed grant
and its OS account), never what a process says of itself (``JUPYTERHUB_USER``). Memory on a
shared GPU that no proven holder of it explains is reported to the admin
(:attr:`UtilizationSource.unexplained`: the fleet page and ``/hub/metrics``), never charged
to anyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuhub.core.env import LAUNCH_ENV
from gpuhub.core.holdings import Holding
from gpuhub.hub.ledger.launches import Launch, Proof

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


@dataclass(frozen=True)
class Unexplained:
    """GPU memory on a shared device that no proven holder of it explains: processes with no
    grant, another OS account's, or a grant for another device or for nobody who holds this
    one. The admin sees it (fleet page, ``gpuhub_gpu_memory_unexplained_bytes``); nobody's
    share is charged for it."""

    gpu: str  # the device index, as GPUSample.gpu says it
    gpu_type: str
    used: int  # bytes (0: all of the device's memory is explained)
    pids: tuple[int, ...]
    accounts: tuple[str, ...] = ()  # the OS account of each of pids ("": unknown)


Owned = dict[tuple[int, str, str], int]  # (device, user, server) -> bytes its processes use


def attribute(
    processes: dict[int, list[tuple[int, int]]],
    proven: dict[int, Launch],
    holdings: Sequence[Holding],
    accounts: Mapping[int, int] | None = None,
    proof: Proof | None = None,
) -> tuple[Owned, tuple[Unexplained, ...]]:
    """Whose GPU memory is whose. ``processes``: {device: [(pid, bytes)]}; ``proven``: the
    launch each process proved (:class:`~gpuhub.hub.ledger.launches.Proof`). A process counts
    for a server of the launch's user and name on a device its grant lists and that server
    (or the processes it left, a job hold) holds. One without such a grant (it dropped
    ``GPUHUB_LAUNCH``) counts, where users have their own OS accounts (``proof`` not of a
    shared account), for the server holding a share of that device of the user its account
    (``accounts``: pid -> real uid) is named for. The rest of a shared device's memory is
    :class:`Unexplained`, with each process's account. Returns (what each server's processes
    use per device, what is unexplained on each device a share by memory holds)."""
    holders: dict[int, set[tuple[str, str]]] = {}
    shares: dict[tuple[int, str], str] = {}  # (device, user) -> their share's server
    types: dict[int, str] = {}
    shared: set[int] = set()
    for holding in holdings:
        for device in holding.devices:
            holders.setdefault(device, set()).add((holding.user, holding.name))
            types.setdefault(device, holding.gpu_type)
            if holding.share is not None and holding.memory:
                shared.add(device)
                if holding.kind == "server":
                    user_on = (device, holding.user)
                    shares[user_on] = min(shares.get(user_on, holding.name), holding.name)
    own_accounts = proof is not None and not proof.shared_account
    accounts = accounts or {}
    own: Owned = {}
    unexplained = []
    for device, found in sorted(processes.items()):
        stray, pids = 0, []
        for pid, used in found:
            launch = proven.get(pid)
            name = account_name(accounts.get(pid))
            if (
                launch is not None
                and device in launch.devices
                and (launch.user, launch.server) in holders.get(device, ())
            ):
                key = (device, launch.user, launch.server)
            elif launch is None and own_accounts and (device, name) in shares:
                key = (device, name, shares[(device, name)])  # its account's user's share
            else:
                if used > 0:
                    stray += used
                    pids.append((pid, name))
                continue
            own[key] = own.get(key, 0) + used
        if device in shared:
            pids.sort()
            unexplained.append(
                Unexplained(
                    str(device),
                    types.get(device, ""),
                    stray,
                    tuple(p for p, _ in pids),
                    tuple(a for _, a in pids),
                )
            )
    return own, tuple(unexplained)


def account_name(uid: int | None) -> str:
    """The OS account of ``uid`` ("" unknown; the number where it has no name)."""
    if uid is None:
        return ""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def process_accounts(pids: set[int]) -> dict[int, int]:
    """The real uid of each of ``pids`` that still runs (blocking: reads /proc)."""
    import psutil

    out = {}
    for pid in pids:
        try:
            out[pid] = psutil.Process(pid).uids().real
        except (psutil.Error, OSError):
            continue
    return out


def proven_launches(proof: Proof, pids: set[int]) -> dict[int, Launch]:
    """The launch each of ``pids`` proves (blocking: reads their environments; the hub runs
    as root on a workstation, so it can)."""
    import psutil

    out = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            launch = proof.launch(proc.environ().get(LAUNCH_ENV), proc.uids().real)
        except (psutil.Error, OSError):
            continue
        if launch is not None:
            out[pid] = launch
    return out


def holding_key(holding: Holding) -> tuple[str, str, str]:
    return (holding.user, holding.kind, holding.name)


class UtilizationSource:
    """Base class of utilization sources (the ``gpu_utilization_source`` trait)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        # Memory on shared GPUs no proven holder explains, as of the last sample (sources
        # that read each process's memory set it; the monitor reports it).
        self.unexplained: tuple[Unexplained, ...] = ()

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


class _ProvenSource(UtilizationSource):
    """A workstation's source: whose a process is comes from ``proof`` (the spawner's
    ``gpu_utilization_settings``); without one, nobody's own memory is known."""

    def __init__(self, proof: Proof | None = None, **settings: Any) -> None:
        super().__init__(**settings)
        self.proof = proof

    def _attribute(
        self,
        holdings: Sequence[Holding],
        processes: dict[int, list[tuple[int, int]]],
        proven: dict[int, Launch],
        accounts_of: Callable[[set[int]], dict[int, int]] | None = None,
    ) -> Owned | None:
        """Attribute, blocking: runs in a thread."""
        if self.proof is None:
            self.unexplained = ()
            return None
        pids = {pid for found in processes.values() for pid, _ in found}
        accounts = accounts_of(pids) if accounts_of is not None else process_accounts(pids)
        own, self.unexplained = attribute(processes, proven, holdings, accounts, self.proof)
        return own


class NVMLUtilization(_ProvenSource):
    """The hub machine's own GPUs, by device index, through NVML (local mode)."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        wanted = sorted({d for h in holdings for d in h.devices})
        if not wanted:
            self.unexplained = ()
            return {}
        shares = any(h.share is not None and h.memory for h in holdings)
        by_device, processes = await asyncio.to_thread(_nvml_read, wanted, shares)
        own = None
        if shares:
            pids = {pid for found in processes.values() for pid, _ in found}
            proven = (
                await asyncio.to_thread(proven_launches, self.proof, pids) if self.proof else {}
            )
            own = await asyncio.to_thread(self._attribute, holdings, processes, proven)
        else:
            self.unexplained = ()
        return samples_by_device(holdings, by_device, own)


class SimulatedUtilization(_ProvenSource):
    """The simulated GPUs of ``gpu_devices = "simulated:N"`` (demos and tests): a GPU is as
    busy as the processes that use it (:mod:`gpuhub.core.simulated`), so an idle notebook on the
    demo is reclaimed and a busy cell keeps its GPU, as on real hardware."""

    async def sample(
        self, holdings: Sequence[Holding]
    ) -> dict[tuple[str, str, str], list[GPUSample]]:
        from gpuhub.core.simulated import TRACKER

        if not any(h.devices for h in holdings):
            self.unexplained = ()
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
        proven = {}
        if self.proof is not None:
            for pid, (grant, uid) in usage.grants.items():
                launch = self.proof.launch(grant, uid)
                if launch is not None:
                    proven[pid] = launch
        processes = {d: found for d, found in usage.processes.items() if d in devices}
        own = await asyncio.to_thread(
            self._attribute, holdings, processes, proven, lambda _: dict(usage.accounts)
        )
        return samples_by_device(holdings, by_device, own)


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
