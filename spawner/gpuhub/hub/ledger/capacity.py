"""Live GPU capacity of a Kubernetes cluster, from one shared watch of nodes and pods.

One :class:`ClusterCapacity` per hub process and cluster (:func:`shared_capacity`) lists and
then watches nodes and the pods that hold resources, keeping only what the figures need: per
node its labels, taints, allocatable GPUs/CPU/memory, and the GPUs its running pods use. Every
change updates those counters in O(1); a form render reads a snapshot that is recomputed
only after something changed (O(nodes) then, O(1) otherwise) — never a LIST per page view.

Pods count against a node from the moment they are bound until they finish or are gone,
exactly as the scheduler counts them (a pod being deleted still holds its GPUs).

Shared GPUs (:mod:`gpuhub.core.sharing`) are counted as far as the nodes' advertised resources
allow, and the figures say what cannot be known (:meth:`ClusterCapacity.capacity`): a node
that advertises the type's memory resource (``nvidia.com/gpumem`` in MiB) says how much
memory is left on it in all, never on which of its GPUs; one that does not (HAMi's own
scheduler keeps it) says its GPU count (``nvidia.com/gpu.count``, from GPU feature
discovery), from which the memory is the count times the type's ``sharing.memory``; a
time-sliced node says its free replicas and, with ``nvidia.com/gpu.replicas``, its GPUs.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gpuhub.core.holdings import Holding, per_workload
from gpuhub.core.policy import GPUType
from gpuhub.hub.ledger.cluster_watch import (
    ACTIVE_PODS,
    LIST_PAGE,
    ClusterWatch,
    node_part,
    type_key,
)
from gpuhub.hub.ledger.dra_capacity import TypeDevices, figures, node_takes
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.k8s.inventory import node_serves

__all__ = [
    "ACTIVE_PODS",
    "FIRST_SYNC_WAIT",
    "LIST_PAGE",
    "CapacityUnavailable",
    "ClusterCapacity",
    "Fit",
    "node_part",
    "shared_capacity",
    "shared_ledger",
]


# How long a request that changes what a user holds (a spawn, a job's grant) waits for the
# hub's first sync after its start before it is refused: seconds at 150,000 pods
# (docs/benchmarks.md), and a refusal would only make the user ask again. A page waits for
# GPUSpawner.capacity_wait only; a cluster that does not answer refuses at once.
FIRST_SYNC_WAIT = 60.0


@dataclass(frozen=True)
class Fit:
    """The biggest request of a GPU type the cluster could ever run (empty cluster)."""

    nodes: int  # nodes that serve the type
    max_gpus: int  # most GPUs of the type on one such node
    max_cpu: float  # most allocatable CPU / memory among nodes with max_gpus or more
    max_memory: int
    # A type claimed through DRA: the most memory one of its devices has ("" / None: not
    # known), and where ("GPU 0 of dra-h100-0").
    max_device_memory: int | None = None
    largest_device: str = ""


class CapacityUnavailable(RuntimeError):
    """The cluster cannot be read now; the message says why, for the form."""


class ClusterCapacity(ClusterWatch):
    """The live figures of each GPU type (free, total, the most on one node, what fits) and
    what users hold, read from the watch (:class:`ClusterWatch`) and kept until it moves."""

    def holdings(self, user: str | None = None) -> list[Holding]:
        """What ``user`` (everyone if None) holds in pods now, from the watch (no LIST): one
        holding per server and one per job (its replicas' pods together)."""
        self._require()
        owned = self.owners.workload
        if self.dra.state.pod_claims:
            plain = owned

            def owned(holding: Holding) -> Holding:
                return self._claimed(plain(holding))

        if user is not None:
            return per_workload(owned(h) for h in self.holders.get(user, {}).values())
        return per_workload(owned(h) for pods in self.holders.values() for h in pods.values())

    def _claimed(self, holding: Holding) -> Holding:
        """``holding`` with the DRA devices allocated to its pods' claims, named."""
        state = self.dra.state
        named: list[str] = []
        for pod in holding.pods:
            claims = state.pod_claims.get(pod)
            for device, key in state.devices_of(sorted(claims)) if claims else ():
                named.append(device.words_on_node if device else f"device {key[2]} of {key[1]}")
        return replace(holding, claimed=tuple(named)) if named else holding

    # -- reading -----------------------------------------------------------------------------
    def _cached(self, key: tuple[Any, ...], compute: Any, generation: int | None = None) -> Any:
        """``compute()``'s value, kept until ``generation`` (default: :attr:`generation`)
        moves on."""
        generation = self.generation if generation is None else generation
        hit = self._snapshot.get(key)
        if hit is not None and hit[0] == generation:
            return hit[1]
        value = compute()
        if len(self._snapshot) > 256:
            self._snapshot.clear()
        self._snapshot[key] = (generation, value)
        return value

    def _require(self) -> None:
        if not self.available:
            raise CapacityUnavailable(
                self.error or "the cluster's nodes and pods are still loading"
            )

    def capacity(self, gpu_types: Iterable[GPUType]) -> dict[str, GPUCapacity]:
        """Free and total GPUs of each type now, and the most free together on one node."""
        self._require()
        types = tuple(gpu_types)
        self.want_devices(types)
        key = ("capacity", *map(type_key, types))
        return self._cached(key, lambda: self._figures(types))

    def _figures(self, types: tuple[GPUType, ...]) -> dict[str, GPUCapacity]:
        """Each type's figures; a DRA type's only once its devices are known."""
        out = {}
        for gpu_type in types:
            if gpu_type.dra is None:
                out[gpu_type.key] = self._capacity(gpu_type)
            elif self.dra.ready:
                devices = self.type_devices(gpu_type)
                out[gpu_type.key] = figures(devices, gpu_type.sharing, self._claim_holders)
        return out

    def _claim_holders(self, key: tuple[str, str]) -> list[str]:
        """Who holds a claim's devices: "ana: server 'default'" for a server's or job's pod
        (:meth:`holdings`' own words), "pod lab/x" for any other pod."""
        claim = self.dra.state.claims.get(key)
        if claim is None:
            return []
        names = []
        for pod in claim.pods:
            pod_key = (claim.namespace, pod)
            user = self._holder_of.get(pod_key)
            holding = self.holders.get(user, {}).get(pod_key) if user else None
            if holding is not None:
                names.append(f"{user}: {self.owners.workload(holding).label}")
            else:
                names.append(f"pod {claim.namespace}/{pod}")
        return names

    def type_devices(self, gpu_type: GPUType) -> TypeDevices:
        """The devices a DRA type can use, on nodes its pods may run on, and what they have
        free now (:mod:`gpuhub.hub.ledger.dra_capacity`)."""
        assert gpu_type.dra is not None
        nodes = self.nodes
        return self.dra.state.devices_for(
            gpu_type.dra,
            lambda name: node_takes(nodes.get(name), gpu_type),
            (self.node_generation, type_key(gpu_type)),
            gpu_type.sharing,
        )

    def _capacity(self, gpu_type: GPUType) -> GPUCapacity:
        """From the type's running sums (:meth:`_tally`): no walk over the nodes.

        A shared type's figures go as far as its nodes' resources say (module docstring):
        units free and in all (a time-sliced type's replicas; a HAMi type's vGPU slots),
        GPUs, and for sharing by memory the memory free and in all and the largest share one
        node could give now (an upper bound: how it is spread over the node's GPUs is not
        known)."""
        tally = self._tally(gpu_type)
        figures = GPUCapacity(free=tally.free, total=tally.total, largest_free=tally.largest_free)
        sharing = gpu_type.sharing
        if sharing is None:
            return figures
        devices = tally.devices if not tally.devices_unknown else None
        if sharing.memory is None:
            return replace(figures, devices=devices)
        known = not tally.memory_unknown
        return replace(
            figures,
            devices=devices,
            memory_free=tally.memory_free if known else None,
            memory_total=tally.memory_total if known else None,
            largest_share=tally.largest_share if known else None,
            spread_unknown=True,
        )

    def fit(self, gpu_type: GPUType, gpus: int = 1) -> Fit:
        """What the biggest node serving ``gpu_type`` could hold if it were empty."""
        self._require()
        if gpu_type.dra is not None:
            self.want_devices((gpu_type,))
            return self._cached(
                ("fit", type_key(gpu_type), gpus),
                lambda: self._device_fit(gpu_type, gpus),
                # what devices there are: nodes, slices and classes; claims do not change it
                hash((self.node_generation, self.dra.state.device_generation)),
            )
        return self._cached(
            ("fit", type_key(gpu_type), gpus),
            lambda: self._fit(gpu_type, gpus),
            self.node_generation,  # what nodes could hold: pods do not change it
        )

    def _device_fit(self, gpu_type: GPUType, gpus: int) -> Fit:
        """What the biggest node's devices of a DRA type could hold if none were claimed."""
        if not self.dra.ready:
            raise CapacityUnavailable(self.dra.error or "the cluster's devices are still loading")
        rooms = self.type_devices(gpu_type).rooms.values()
        per_node: dict[str, int] = {}
        for room in rooms:
            per_node[room.device.node] = per_node.get(room.device.node, 0) + 1
        big_enough = [self.nodes[n] for n, count in per_node.items() if count >= gpus]
        sized = [r for r in rooms if r.memory_total is not None]
        largest = max(sized, key=lambda r: r.memory_total or 0, default=None)
        return Fit(
            nodes=len(per_node),
            max_gpus=max(per_node.values(), default=0),
            max_cpu=max((n.cpu for n in big_enough), default=0.0),
            max_memory=max((n.memory for n in big_enough), default=0),
            max_device_memory=None if largest is None else largest.memory_total,
            largest_device=""
            if largest is None
            else f"{largest.device.short_words} of {largest.device.node}",
        )

    def _fit(self, gpu_type: GPUType, gpus: int) -> Fit:
        """For a shared type, ``gpus`` counts units (replicas, vGPU slots) like whole GPUs."""
        serving = [n for n in self.nodes.values() if node_serves(n, gpu_type)]
        big_enough = [n for n in serving if n.gpus[gpu_type.resource_name] >= gpus]
        return Fit(
            nodes=len(serving),
            max_gpus=max((n.gpus[gpu_type.resource_name] for n in serving), default=0),
            max_cpu=max((n.cpu for n in big_enough), default=0.0),
            max_memory=max((n.memory for n in big_enough), default=0),
        )


# One cache (and ledger) per event loop and API server: shared by every spawner of the hub
# process. Keyed by the loop itself, held weakly: a loop's id() can be reused by a later loop,
# which would then get a dead cache whose watch tasks ran on the old one.
_SHARED: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, tuple[ClusterCapacity, Ledger]]
] = weakref.WeakKeyDictionary()


def _shared(api: Any) -> tuple[ClusterCapacity, Ledger]:
    configuration = getattr(getattr(api, "api_client", None), "configuration", None)
    host = str(getattr(configuration, "host", ""))
    per_loop = _SHARED.setdefault(asyncio.get_running_loop(), {})
    if host not in per_loop:
        cache = ClusterCapacity(api)
        per_loop[host] = (cache, Ledger(cache))
    cache, ledger = per_loop[host]
    cache.start()
    return cache, ledger


def shared_ledger(api: Any) -> Ledger:
    """The hub's GPU ledger on the cluster ``api`` talks to: holdings from the shared pod
    watch, plus grants for workloads whose pods are not there yet."""
    return _shared(api)[1]


def shared_capacity(api: Any) -> ClusterCapacity:
    """The process-wide capacity cache for the cluster ``api`` talks to (started lazily)."""
    return _shared(api)[0]
