"""gpuhub's Prometheus metrics, in JupyterHub's own ``/hub/metrics``.

JupyterHub serves ``prometheus_client``'s default registry; gpuhub adds one collector to it
in the hub process, which reads the monitor's figures at scrape time (nothing is pushed,
nothing goes stale between ticks):

* ``gpuhub_gpus{gpu_type, state="free|held"}``
* ``gpuhub_gpus_held{user, kind="server|job", gpu_type}``
* ``gpuhub_gpus_waiting{user, kind, gpu_type, where="line|queue|node"}``: GPUs asked for by
  what waits for them (a workstation's line, Kueue's queue, a pod not bound to a node yet).
  They count against the quota but are never held: not in ``gpuhub_gpus{state="held"}``,
  ``gpuhub_gpus_held`` nor ``gpuhub_gpu_seconds_total``
* ``gpuhub_gpu_seconds_total{user, gpu_type}`` (from the persisted store: never goes back)
* ``gpuhub_gpu_utilization{user, server, gpu}`` (0-1, the last sample)
* ``gpuhub_idle_reclaims_total{gpu_type}`` (from the persisted store too)
* ``gpuhub_job_hold_process_info{user, server, gpu_type, pid, command}`` (1 per process that
  keeps a workstation's job hold: a process its stopped server left on its GPUs)
* ``gpuhub_gpu_memory_bytes{gpu_type, state="free|held"}`` and
  ``gpuhub_gpu_memory_held_bytes{user, kind, gpu_type}``: GPU types shared by memory
* ``gpuhub_gpu_memory_unexplained_bytes{gpu, gpu_type}``: a workstation's GPU shared by memory,
  the memory its processes use that no holder of it proves is theirs (their launch's signed
  grant and OS account, :class:`gpuhub.hub.ledger.launches.Proof`): charged to nobody, for
  the admin to look into (0 when every byte is explained)

* ``gpuhub_gpu_budget_used_seconds{scope="user|group", name}`` and
  ``gpuhub_gpu_budget_seconds{scope, name}``: GPU-hour budgets (``gpu_hours``) in GPU-seconds,
  this period: what is used and what is allowed (extra hours granted included). A user in a
  shared group's pool has only a used figure (their part); the pool (scope ``group``) has
  both. The same figures as the fleet page (:attr:`GPUMonitor.budget_view`)

A share of a GPU (:mod:`gpuhub.core.sharing`) counts as its fraction of a GPU in ``gpuhub_gpus``,
``gpuhub_gpus_held`` and ``gpuhub_gpu_seconds_total`` (half of a GPU for an hour is half a
GPU-hour), as in the quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gpuhub.core.holdings import Holding
    from gpuhub.hub.ledger.budget_usage import BudgetView
    from gpuhub.hub.monitor.usage import UsageStore
    from gpuhub.hub.monitor.utilization import GPUSample, Unexplained


def seconds_figure(seconds: float) -> float:
    """GPU-seconds to the millisecond: a sum of float ticks carries noise in its last digits
    (216.00000000000003), which Prometheus would show as it is. Rounding is monotonic, so a
    counter read this way never goes back."""
    return round(seconds, 3)


class Tracked(Protocol):
    """What the metrics read of one holding the monitor follows (its ``Track``)."""

    @property
    def holding(self) -> Holding: ...

    @property
    def samples(self) -> Sequence[GPUSample]: ...


class Figures(Protocol):
    """What the metrics read of the hub's monitor (:class:`.gpu_monitor.GPUMonitor`), said
    here so that this module imports nothing of the monitor that registers it."""

    @property
    def capacity(self) -> Mapping[str, tuple[float, float]]: ...

    @property
    def memory(self) -> Mapping[str, tuple[int, int]]: ...

    @property
    def tracks(self) -> Mapping[tuple[str, str, str], Tracked]: ...

    @property
    def waiting(self) -> Mapping[tuple[str, str, str], Holding]: ...

    @property
    def unexplained(self) -> Iterable[Unexplained]: ...

    @property
    def store(self) -> UsageStore: ...

    @property
    def budget_view(self) -> BudgetView: ...


class GPUCollector(Collector):
    def __init__(self, monitor: Figures) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        monitor = self.monitor
        gpus = GaugeMetricFamily(
            "gpuhub_gpus", "GPUs this hub hands out, free or held", labels=["gpu_type", "state"]
        )
        _free_and_held(gpus, monitor.capacity)
        yield gpus

        held = GaugeMetricFamily(
            "gpuhub_gpus_held",
            "GPUs held per user, by servers and by jobs",
            labels=["user", "kind", "gpu_type"],
        )
        sums: dict[tuple[str, str, str], Fraction] = {}
        memory: dict[tuple[str, str, str], int] = {}
        for track in monitor.tracks.values():
            h = track.holding
            key = (h.user, h.kind, h.gpu_type or "GPU")
            sums[key] = sums.get(key, Fraction(0)) + h.amount
            if h.memory:
                memory[key] = memory.get(key, 0) + h.memory
        for labels, value in sorted(sums.items()):
            held.add_metric(list(labels), float(value))
        yield held

        waiting = GaugeMetricFamily(
            "gpuhub_gpus_waiting",
            "GPUs asked for by servers and jobs waiting for them (in line, in Kueue's queue, "
            "for a node): counted against quotas, never held",
            labels=["user", "kind", "gpu_type", "where"],
        )
        waits: dict[tuple[str, str, str, str], Fraction] = {}
        for h in monitor.waiting.values():
            where = (h.user, h.kind, h.gpu_type or "GPU", h.waiting)
            waits[where] = waits.get(where, Fraction(0)) + h.amount
        for waited, value in sorted(waits.items()):
            waiting.add_metric(list(waited), float(value))
        yield waiting

        shared = GaugeMetricFamily(
            "gpuhub_gpu_memory_bytes",
            "Memory of GPUs shared by memory, free or held by shares",
            labels=["gpu_type", "state"],
        )
        _free_and_held(shared, monitor.memory)
        yield shared

        shares = GaugeMetricFamily(
            "gpuhub_gpu_memory_held_bytes",
            "GPU memory held per user by shares of GPUs shared by memory",
            labels=["user", "kind", "gpu_type"],
        )
        for labels, size in sorted(memory.items()):
            shares.add_metric(list(labels), size)
        yield shares

        unexplained = GaugeMetricFamily(
            "gpuhub_gpu_memory_unexplained_bytes",
            "Memory of a GPU shared by memory that its processes use without proving they are "
            "a holder's (no launch grant, another OS account's, another GPU's); charged to "
            "nobody",
            labels=["gpu", "gpu_type"],
        )
        for entry in monitor.unexplained:
            unexplained.add_metric([entry.gpu, entry.gpu_type or "GPU"], entry.used)
        yield unexplained

        seconds = CounterMetricFamily(
            "gpuhub_gpu_seconds",
            "GPU-seconds held per user (kept across hub restarts)",
            labels=["user", "gpu_type"],
        )
        for (user, gpu_type), gpu_seconds in sorted(monitor.store.totals.items()):
            seconds.add_metric([user, gpu_type or "GPU"], seconds_figure(gpu_seconds))
        yield seconds

        utilization = GaugeMetricFamily(
            "gpuhub_gpu_utilization",
            "Utilization (0-1) of each GPU a server holds, at the last sample",
            labels=["user", "server", "gpu"],
        )
        for track in monitor.tracks.values():
            if track.holding.kind != "server":
                continue
            for sample in track.samples:
                utilization.add_metric(
                    [track.holding.user, track.holding.name, sample.gpu], sample.utilization
                )
        yield utilization

        reclaims = CounterMetricFamily(
            "gpuhub_idle_reclaims",
            "Servers stopped and job holds ended because their GPUs stayed idle (kept across "
            "hub restarts)",
            labels=["gpu_type"],
        )
        for gpu_type, count in sorted(monitor.store.reclaims.items()):
            reclaims.add_metric([gpu_type], count)
        yield reclaims

        used = GaugeMetricFamily(
            "gpuhub_gpu_budget_used_seconds",
            "GPU-seconds used this period of GPU-hour budgets, per user and per shared group",
            labels=["scope", "name"],
        )
        allowed = GaugeMetricFamily(
            "gpuhub_gpu_budget_seconds",
            "GPU-seconds GPU-hour budgets allow this period (extra hours included), per user "
            "and per shared group",
            labels=["scope", "name"],
        )
        view = monitor.budget_view
        for state in view.users:
            used.add_metric(["user", state.user], seconds_figure(state.own_seconds))
            if not state.budget.shared:
                allowed.add_metric(["user", state.user], seconds_figure(state.allowed_seconds))
        for state in view.groups:
            used.add_metric(["group", state.budget.name], seconds_figure(state.used_seconds))
            allowed.add_metric(["group", state.budget.name], seconds_figure(state.allowed_seconds))
        yield used
        yield allowed

        processes = GaugeMetricFamily(
            "gpuhub_job_hold_process_info",
            "Processes a stopped server left running that keep its GPUs held (a job hold)",
            labels=["user", "server", "gpu_type", "pid", "command"],
        )
        for track in monitor.tracks.values():
            h = track.holding
            for pid, command in h.processes:
                processes.add_metric([h.user, h.name, h.gpu_type or "GPU", str(pid), command], 1)
        yield processes


_REGISTERED: list[GPUCollector] = []


def register(monitor: Figures) -> None:
    """Add the collector to the default registry once per process (a new monitor replaces
    the figures it reads)."""
    if _REGISTERED:
        _REGISTERED[0].monitor = monitor
        return
    collector = GPUCollector(monitor)
    REGISTRY.register(collector)
    _REGISTERED.append(collector)


def _free_and_held(family: GaugeMetricFamily, figures: Mapping[str, tuple[Any, Any]]) -> None:
    """One sample per GPU type and state: what is free, and what is held of its total."""
    for gpu_type, (free, total) in sorted(figures.items()):
        family.add_metric([gpu_type, "free"], free)
        family.add_metric([gpu_type, "held"], max(0, total - free))
