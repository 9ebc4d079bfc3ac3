"""The hub's one watch of a cluster's nodes and GPU-holding pods (:class:`ClusterWatch`),
kept by deltas: per node what the figures need and the GPUs its pods use, per user the
pods they hold, and per GPU type a running tally (:mod:`gpuhub.hub.ledger.tally`).
:class:`gpuhub.hub.ledger.capacity.ClusterCapacity` reads its figures from it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpuhub.core.holdings import Holding, Workload
from gpuhub.core.policy import GPUType
from gpuhub.core.sharing import MIB, Sharing
from gpuhub.hub.ledger.dra_capacity import DeviceWatch
from gpuhub.hub.ledger.ledger import holding_match
from gpuhub.hub.ledger.tally import Part, Tally
from gpuhub.jobs.kinds import of_pod, pod_workload
from gpuhub.jobs.kinds.base import Between, WorkloadKind
from gpuhub.k8s.inventory import (
    NodeInfo,
    PodInfo,
    node_info,
    node_serves,
    pod_gpus,
    pod_holding,
    pod_info,
)
from gpuhub.k8s.labels import GPU_COUNT_LABEL, GPU_REPLICAS_LABEL
from gpuhub.k8s.listwatch import Reflector, Source

# The capacity view's one log, whichever of its modules speaks.
log = logging.getLogger("gpuhub.hub.ledger.capacity")

# Terminal pods hold nothing; the apiserver filters them out of the watch for us.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# Objects per LIST page where the apiserver does not stream lists (client-go's reflector
# pages by 500). A real apiserver's pod is about 3.5 KB of JSON: a page of 5,000 is 17 MB,
# and parsing one left ~130 MB more of the hub's memory in use than pages of 1,000, which
# sync as fast (docs/benchmarks.md).
LIST_PAGE = 1000


SEEN_SECONDS = 3600.0  # longer than any grant lives (hub_api.GRANT_SECONDS)
SEEN_KEPT = 10_000
MAX_TALLIES = 64  # GPU types tallied at once (a hub has a handful)


class BetweenOwners:
    """The workload of pods that belong to their kind's object through an object in between
    (a TrainJob's pods belong to its JobSet), read once per such object.

    A pod names the object in between (a TrainJob's pod its JobSet, by JobSet's labels, which
    users cannot write: they create no pods), and that object's controlling ownerReference
    names the kind's object (:meth:`gpuhub.jobs.kinds.base.WorkloadKind.between`). One GET
    per object (the hub's RBAC: the kind's ``rbac.hub``), in the background; until it
    answers the pods count as their own holding and the job's grant counts too (the safe
    direction). An object that cannot be read is asked again after a minute.
    """

    RETRY = 60.0

    def __init__(self, api: Any, on_change: Any) -> None:
        self.api = api  # a kubernetes_asyncio CoreV1Api (its api_client makes the call)
        self.on_change = on_change
        # (the pods' workload kind, the object between's uid) -> the kind's object
        self.owners: dict[tuple[str, str], Workload] = {}
        self._asked: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def note(self, pod_meta: Mapping[str, Any]) -> None:
        """Look up the owner of a pod's object in between, if not known or being asked."""
        kind = of_pod(pod_meta)
        if not isinstance(kind, WorkloadKind) or kind.between_kind is None:
            return
        between = kind.between(pod_meta)
        if between is None or (kind.between_kind, between.uid) in self.owners:
            return
        now = time.monotonic()
        if now - self._asked.get(between.uid, -self.RETRY) < self.RETRY:
            return
        self._asked[between.uid] = now
        task = asyncio.create_task(self._ask(kind, between))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, kind: WorkloadKind, between: Between) -> None:
        from kubernetes_asyncio.client import ApiException

        from gpuhub.k8s.rawapi import request_json

        what = f"{between.resource.kind} {between.namespace}/{between.name}"
        try:
            obj = await request_json(
                self.api.api_client.call_api(
                    between.path, "GET", auth_settings=["BearerToken"], _preload_content=False
                )
            )
        except ApiException as exc:
            log.warning("gpuhub: cannot read %s: HTTP %s", what, exc.status)
            return
        except Exception as exc:  # network errors: asked again after RETRY
            log.warning("gpuhub: cannot read %s: %s", what, exc)
            return
        if (obj.get("metadata") or {}).get("uid") != between.uid:
            return  # another object of that name since: its own pods will ask
        uid = kind.owner_uid(obj)
        if uid and kind.between_kind is not None:
            self.owners[(kind.between_kind, between.uid)] = Workload(kind.name, uid)
            self.on_change()

    def workload(self, holding: Holding) -> Holding:
        """``holding`` as its kind's object's, where the owner of its object in between is
        known."""
        workload = holding.workload
        owner = self.owners.get((workload.kind, workload.uid)) if workload else None
        return holding if owner is None else replace(holding, workload=owner)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class _Lists:
    """What a LIST (paged or streamed) builds before it replaces the cache's."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[tuple[str, str], PodInfo] = {}
        self.holders: dict[str, dict[tuple[str, str], Holding]] = {}

    def drop(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == "nodes":
            self.nodes.pop(meta.get("name", ""), None)
            return
        key = (meta.get("namespace", ""), meta.get("name", ""))
        self.pods.pop(key, None)
        for held in self.holders.values():
            held.pop(key, None)


class ClusterWatch(Reflector):
    """A watch-backed cache of nodes and GPU-holding pods (start once, read often), listed
    and watched as :class:`gpuhub.k8s.listwatch.Reflector` does; each event is O(its object)."""

    list_page = LIST_PAGE
    watched = ("nodes", "pods")

    def __init__(
        self,
        api: Any,
        *,
        request_timeout: float = 30,
        watch_timeout: int = 300,
        encoding: str = "protobuf",
    ) -> None:
        """``encoding``: how nodes and pods are asked for, "protobuf" (half the apiserver's
        CPU of JSON for a first sync, docs/benchmarks.md) or "json"."""
        self.api = api  # a kubernetes_asyncio CoreV1Api
        self.encoding = encoding
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[tuple[str, str], PodInfo] = {}
        # The ledger's source: GPU-holding pods of users' servers and jobs, per user.
        self.holders: dict[str, dict[tuple[str, str], Holding]] = {}
        # Which user holds each pod: a pod event finds its old holding without a walk over
        # every user's (thousands, on each of the cluster's pod events).
        self._holder_of: dict[tuple[str, str], str] = {}
        # Grant match -> (the most GPUs its pods held at once, when last seen): a job that ran
        # and ended between two looks at the ledger still settles its grant (seen_most).
        self._seen: dict[tuple[str, ...], tuple[int, float]] = {}
        self.synced = {"nodes": False, "pods": False}
        self.error: str | None = None
        self.generation = 0  # bumped on every change that can move a figure
        self.node_generation = 0  # bumped on every change of a node that a figure reads
        self._snapshot: dict[tuple[Any, ...], tuple[int, Any]] = {}
        # Per GPU type (type_key): each serving node's part and the sums (gpuhub.hub.ledger.tally),
        # kept by deltas as pods come and go; rebuilt on a relist.
        self._tallies: dict[tuple[str, ...], tuple[GPUType, Tally]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()
        self._answered = asyncio.Event()  # the first list succeeded or failed
        # Pods whose kind's object owns them through another (a TrainJob's, its JobSet).
        self.owners = BetweenOwners(api, self._bump)
        # GPUs claimed through DRA: slices, claims and classes, watched once a DRA type is
        # asked about (want_devices).
        self.dra = DeviceWatch(
            getattr(api, "api_client", None),
            self._bump,
            request_timeout=request_timeout,
            watch_timeout=watch_timeout,
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def stop(self) -> None:
        await super().stop()
        await self.owners.stop()
        await self.dra.stop()

    def want_devices(self, gpu_types: Iterable[GPUType]) -> None:
        """Start watching DRA's objects once a type claimed through DRA is asked about (a
        hub without such types never lists them)."""
        if any(t.dra is not None for t in gpu_types):
            self.dra.start()

    @property
    def available(self) -> bool:
        return all(self.synced.values()) and self.error is None

    async def wait_ready(self, timeout: float) -> bool:
        """Wait (up to ``timeout``) for the first answer from the cluster; True if all is known.

        A cluster that refuses connections answers at once: the form then renders without
        figures immediately instead of waiting out ``timeout``.
        """
        self.start()
        if not self.available and not self._answered.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._answered.wait(), timeout)
        return self.available

    # -- list + watch ------------------------------------------------------------------------
    def _source(self, kind: str) -> Source:
        if kind == "nodes":
            return Source("nodes", "/api/v1/nodes", encoding=self.encoding)
        query = {"fieldSelector": ACTIVE_PODS}
        return Source("pods", "/api/v1/pods", query, encoding=self.encoding)

    def _failed(self, kind: str, detail: str) -> None:
        if self.error is None:
            log.warning("Live GPU capacity unavailable (%s): %s", kind, detail)
        self.error = detail
        self.synced[kind] = False
        self._answered.set()

    @property
    def api_client(self) -> Any:
        return self.api.api_client

    def _lists(self, kind: str) -> _Lists:
        return _Lists()

    def _drop(self, kind: str, item: Mapping[str, Any], lists: _Lists) -> None:
        lists.drop(kind, item)

    def _take(self, kind: str, item: Mapping[str, Any], lists: _Lists) -> None:
        """One object of a LIST, into what the LIST builds."""
        if kind == "nodes":
            info = node_info(item)
            lists.nodes[info.name] = info
            return
        gpus = pod_gpus(item)  # once for both
        meta = item.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        pod = pod_info(item, gpus) if gpus else None
        if pod is not None:
            lists.pods[key] = pod
        holding = pod_holding(item, pod_workload, gpus)
        if holding is not None:
            lists.holders.setdefault(holding.user, {})[key] = holding
            self.owners.note(meta)

    def _install(self, kind: str, lists: _Lists, end: Mapping[str, Any]) -> str:
        """A LIST's lists become the cache's; ``end`` holds its resource version."""
        if kind == "nodes":
            self.nodes = lists.nodes
        else:
            self.pods, self.holders = lists.pods, lists.holders
            self._holder_of = {key: user for user, held in lists.holders.items() for key in held}
        self._tallies.clear()  # rebuilt from the new lists at the next view
        self._recount()
        self.node_generation += 1
        self.synced[kind] = True
        if all(self.synced.values()):
            self.error = None
            self._ready.set()
            self._answered.set()
        self._bump()
        return str((end.get("metadata") or {}).get("resourceVersion") or "")

    def _apply(self, kind: str, event: Mapping[str, Any]) -> str | None:
        obj = event.get("raw_object") or event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if event.get("type") == "BOOKMARK":
            return version
        meta = obj.get("metadata") or {}
        if kind == "nodes":
            name = meta.get("name", "")
            old = self.nodes.pop(name, None)
            if event.get("type") != "DELETED":
                info = node_info(obj)
                info.used = old.used if old else self._used_on(name)
                if info == old:
                    # A heartbeat: each kubelet posts its node's status every few minutes,
                    # so thousands of nodes send several a second. Nothing the figures read
                    # changed; the node and the snapshot stay (recomputing it is O(nodes)).
                    self.nodes[name] = old
                    return version
                self.nodes[name] = info
            self.node_generation += 1
            self._retally(name)
        else:
            key = (meta.get("namespace", ""), meta.get("name", ""))
            deleted = event.get("type") == "DELETED"
            gpus = () if deleted else pod_gpus(obj)
            holding = None if deleted else pod_holding(obj, pod_workload, gpus)
            if holding is not None:
                self.owners.note(meta)
            self._hold(key, holding)
            before = self.pods.pop(key, None)
            after = pod_info(obj, gpus) if gpus else None
            if before == after:
                # Nothing the figures read changed: a status update, or a pod without GPUs
                # (most of a cluster's pods and events). Holdings are read directly.
                if before is not None:
                    self.pods[key] = before
                return version
            if before is not None:
                self._count(before, -1)
            if after is not None:
                self.pods[key] = after
                self._count(after, +1)
        self._bump()
        return version

    def _hold(self, key: tuple[str, str], holding: Holding | None) -> None:
        user = self._holder_of.pop(key, None)
        if user is not None and (holding is None or holding.user != user):
            held = self.holders.get(user, {})
            held.pop(key, None)
            if not held:
                self.holders.pop(user, None)
        if holding is not None:
            self.holders.setdefault(holding.user, {})[key] = holding
            self._holder_of[key] = holding.user
            self._remember(holding)

    def _remember(self, holding: Holding) -> None:
        owned = self.owners.workload  # a TrainJob's node pods are its own, once known
        match = holding_match(owned(holding))
        if match is None:
            return
        now = time.time()
        together = sum(
            h.gpus
            for h in self.holders.get(holding.user, {}).values()
            if holding_match(owned(h)) == match
        )
        most = self._seen.get(match, (0, now))[0]
        self._seen[match] = (max(most, together), now)
        if len(self._seen) > SEEN_KEPT:  # forget what no grant can still be waiting for
            cutoff = now - SEEN_SECONDS
            self._seen = {m: v for m, v in self._seen.items() if v[1] >= cutoff}

    def seen_most(self, match: tuple[str, ...]) -> int:
        """The most GPUs the pods of the workload ``match`` (:func:`gpuhub.hub.ledger.ledger.holding_match`)
        held at once in the last hour, running or ended since."""
        return self._seen.get(match, (0, 0.0))[0]

    # -- tallies ----------------------------------------------------------------------------
    def _used_on(self, node: str) -> dict[str, int]:
        used: dict[str, int] = {}
        for pod in self.pods.values():
            if pod.node == node:
                for name, count in (*pod.gpus, *pod.extra):
                    used[name] = used.get(name, 0) + count
        return used

    def _recount(self) -> None:
        for node in self.nodes.values():
            node.used = {}
        for pod in self.pods.values():
            self._count(pod, +1)

    def _count(self, pod: PodInfo, sign: int) -> None:
        node = self.nodes.get(pod.node)
        if node is None:
            return  # a pod on a node we have not seen (yet); the node's arrival recounts it
        for name, count in (*pod.gpus, *pod.extra):
            node.used[name] = node.used.get(name, 0) + sign * count
        self._retally(pod.node)

    def _retally(self, name: str) -> None:
        """Node ``name``'s part in each tallied type, now (it changed, came, or went)."""
        node = self.nodes.get(name)
        for gpu_type, tally in self._tallies.values():
            tally.set(name, None if node is None else node_part(node, gpu_type))

    def _tally(self, gpu_type: GPUType) -> Tally:
        """The type's running sums, made from every node the first time it is asked for."""
        key = type_key(gpu_type)
        found = self._tallies.get(key)
        if found is not None:
            return found[1]
        if len(self._tallies) >= MAX_TALLIES:  # types no view asks for any more
            self._tallies.clear()
        sharing = gpu_type.sharing
        tally = Tally(memory=sharing is not None and sharing.memory is not None)
        for name, node in self.nodes.items():
            tally.set(name, node_part(node, gpu_type))
        self._tallies[key] = (gpu_type, tally)
        return tally

    def _bump(self) -> None:
        self.generation += 1


def _node_devices(node: NodeInfo, sharing: Sharing) -> int | None:
    """How many GPUs a node shares: GPU feature discovery's ``nvidia.com/gpu.count``, else
    a time-sliced node's units over its replicas (the node's ``nvidia.com/gpu.replicas``,
    else the type's), else the memory it advertises over one GPU's; None: not known."""
    label = node.labels.get(GPU_COUNT_LABEL, "")
    if label.isdigit():
        return int(label)
    if sharing.replicas is not None:
        replicas = node.labels.get(GPU_REPLICAS_LABEL, "")
        per_gpu = int(replicas) if replicas.isdigit() and int(replicas) > 0 else sharing.replicas
        units = sum(node.gpus.values())
        return units // per_gpu if units % per_gpu == 0 else None
    advertised = node.extra.get(sharing.memory_resource)
    if advertised and sharing.memory:
        # HAMi advertises what the GPUs really have (a "16G" T4 has 15360 MiB): near enough
        # to a whole number of the admin's GPUs is that number.
        count = round(advertised * MIB / sharing.memory)
        if count and abs(advertised * MIB - count * sharing.memory) <= 0.1 * sharing.memory:
            return count
    return None


def node_part(node: NodeInfo, gpu_type: GPUType) -> Part | None:
    """``node``'s part in ``gpu_type``'s figures; None where it does not serve the type (not
    Ready, cordoned, or its resource, labels and taints say no)."""
    if not (node.usable and node_serves(node, gpu_type)):
        return None
    resource = gpu_type.resource_name
    have = node.gpus[resource]
    left = max(have - node.used.get(resource, 0), 0)
    sharing = gpu_type.sharing
    if sharing is None:
        return Part(have, left)
    devices = _node_devices(node, sharing)
    if sharing.memory is None:
        return Part(have, left, devices)
    advertised = node.extra.get(sharing.memory_resource)
    if advertised:
        whole = advertised * MIB
    elif devices is not None:
        whole = devices * sharing.memory
    else:
        return Part(have, left, devices)  # its memory is not known
    memory_left = max(whole - node.used.get(sharing.memory_resource, 0) * MIB, 0)
    room = min(memory_left, sharing.memory) if left else 0
    return Part(have, left, devices, whole, memory_left, room)


def type_key(gpu_type: GPUType) -> tuple[str, ...]:
    """A hashable identity for what decides a type's figures."""
    return (
        gpu_type.key,
        gpu_type.resource_name,
        repr(gpu_type.sharing),
        json.dumps(dict(gpu_type.node_selector), sort_keys=True),
        json.dumps([dict(t) for t in gpu_type.tolerations], sort_keys=True),
    )
