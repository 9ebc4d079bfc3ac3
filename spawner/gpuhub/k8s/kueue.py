"""Kueue as gpuhub reads it: which API version the cluster serves, and a queue's line.

Kueue (https://kueue.sigs.k8s.io/docs/concepts/) serves ``kueue.x-k8s.io/v1beta2`` since 0.15
and keeps ``v1beta1`` (deprecated) beside it for a while; older installs serve v1beta1 only.
gpuhub reads and writes every Kueue object in v1beta2 where the cluster serves it and falls
back to v1beta1 where only that is served, and reads a LocalQueue's line from the visibility
API (``visibility.kueue.x-k8s.io``) the same way. :class:`KueueAPI` asks discovery once per
group and keeps the answer a minute, and a queue's line for :data:`LINE_TTL` seconds: every
waiting spawn page and queued job of one queue shares one read (:func:`shared_kueue` in the hub).

GPU servers wait in Kueue through its pod integration (``GPUSpawner.kueue_queue_name``): Kueue's
webhook gives a pod carrying the queue label a scheduling gate (:data:`ADMISSION_GATE`), which
its pod controller lifts once the pod's Workload is admitted.

The shapes gpuhub reads are the same in both versions: a Workload's ``status.conditions``
(``QuotaReserved``, ``Admitted``, ``Evicted``), its ``ownerReferences`` and the
``kueue.x-k8s.io/job-uid`` label; a ``PendingWorkloadsSummary``'s ``items`` with
``positionInLocalQueue`` (from 0) and ``metadata.ownerReferences``; a LocalQueue's
``spec.clusterQueue``; a ClusterQueue's ``spec.resourceGroups[].flavors[].resources[]``
(``nominalQuota``) and ``status.flavorsReservation`` and ``status.reservingWorkloads``.

Admission fair sharing (Kueue 0.12 alpha, beta and on by default since 0.15; the admin's
``line_order = "fair"``): where Kueue's Configuration has ``admissionFairSharing``
(``usageHalfLifeTime``, ``usageSamplingInterval``, ``resourceWeights``) and a ClusterQueue has
``spec.admissionScope.admissionMode: UsageBasedAdmissionFairSharing``, Kueue orders that
queue's workloads by their *LocalQueue's* decayed usage
(``status.fairSharing.admissionFairSharingStatus.consumedResources``, which Kueue writes on
every LocalQueue only where the feature is on). Per-user fairness so needs one LocalQueue per
user: gpuhub makes it on a user's first queued spawn (:meth:`KueueAPI.user_queue`, named by
:func:`user_queue_name`, labelled as gpuhub's, pointing at the ClusterQueue of the admin's
``kueue_queue_name``); :meth:`KueueAPI.fair_sharing` says whether the cluster offers it.

What a person reads while something waits in a queue is built once, in
:mod:`gpuhub.k8s.kueue_words` (:func:`waiting_words`), for the spawn page and for queued
jobs alike: what is in use of the queue's GPUs and by how many, from the ClusterQueue
(:meth:`KueueAPI.usage`), and the place in line, never Kueue's own message ("couldn't
assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100,
1 more needed"), which only the admin's log keeps. What that message says is read
structurally where it can be (:func:`shortages`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuhub.k8s.kueue_words import (
    FAIR_QUEUE_WORDS,
    Pending,
    QueueUse,
    Shortage,
    in_front,
    queue_use,
    shortages,
    waiting_words,
)
from gpuhub.k8s.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
    user_label,
)
from gpuhub.k8s.rawapi import get_json, request_json, served_resources

__all__ = [
    "FAIR_QUEUE_WORDS",
    "KueueAPI",
    "Pending",
    "QueueUse",
    "Shortage",
    "in_front",
    "queue_use",
    "shared_kueue",
    "shortages",
    "waiting_words",
]

log = logging.getLogger("gpuhub.k8s.kueue")

GROUP = "kueue.x-k8s.io"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # preferred first
ADMISSION_GATE = "kueue.x-k8s.io/admission"  # on a pod Kueue holds until it is admitted
DISCOVERY_TTL = 60.0  # seconds a discovery answer is trusted
LINE_TTL = 2.0  # seconds a queue's line is shared before it is read again
_clock = time.monotonic  # the lines' clock (a test moves it on)
REFUSED_TTL = 60.0  # seconds a queue whose line may not be read is not asked again


class KueueAPI:
    """Kueue's API versions on one cluster, and a LocalQueue's line (cached discovery).

    ``api``: a kubernetes_asyncio ``ApiClient``. Raw JSON throughout (no model round trip).
    """

    def __init__(self, api: Any) -> None:
        self.api = api
        self._versions: dict[str, tuple[float, str | None]] = {}
        self._refused: dict[tuple[str, str], float] = {}  # (namespace, queue) -> when
        # (namespace, queue) -> (when read, the read): one read shared by every reader
        self._lines: Reads[list[Pending] | None] = {}
        self._uses: Reads[QueueUse | None] = {}
        self._use_refused: dict[tuple[str, str], float] = {}  # (namespace, queue) -> when
        self._made: set[tuple[str, str]] = set()  # users' LocalQueues known to exist
        self._fair: dict[tuple[str, str], FairSharing] = {}  # (namespace, queue) -> as found

    async def _served(self, group: str, resource: str) -> str | None:
        """The first of :data:`VERSIONS` whose discovery lists ``resource`` in ``group``."""
        now = time.monotonic()
        cached = self._versions.get(group)
        if cached is not None and now - cached[0] < DISCOVERY_TTL:
            return cached[1]
        found = None
        for version in VERSIONS:
            names = await served_resources(self.api, group, version, missing=(403, 404, 503))
            if names is not None and resource in names:
                found = version
                break
        if cached is None or cached[1] != found:
            log.info("gpuhub: Kueue's %s is served in %s", group, found or "no version")
        self._versions[group] = (now, found)
        return found

    async def version(self) -> str | None:
        """``v1beta2`` or ``v1beta1`` for Kueue's own objects (Workloads, LocalQueues); None
        where the cluster serves no Kueue."""
        return await self._served(GROUP, "workloads")

    async def visibility_version(self) -> str | None:
        """The visibility API's version (``localqueues/pendingworkloads``), or None."""
        return await self._served(VISIBILITY_GROUP, "localqueues/pendingworkloads")

    async def workloads(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        """Kueue's Workloads in ``namespace`` (matching ``selector``); empty without Kueue or
        when they may not be read (logged)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        version = await self.version()
        if version is None:
            return []
        query = [("labelSelector", selector)] if selector else []
        try:
            path = f"/apis/{GROUP}/{version}/namespaces/{namespace}/workloads"
            answer = await get_json(self.api, path, query)
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            log.warning("gpuhub: cannot read Kueue's Workloads: HTTP %s", exc.status)
            return []
        return list(answer.get("items") or [])

    async def line(self, namespace: str, queue: str) -> list[Pending] | None:
        """The workloads waiting in LocalQueue ``queue``, in order; None when the line cannot
        be read (no visibility API, or not allowed: then not asked again for a minute).

        Readers within :data:`LINE_TTL` seconds of each other share one read (one in flight
        at a time), so a hundred waiting spawn pages cost the apiserver one request a tick."""
        return await _shared(self._lines, (namespace, queue), self._read_line)

    async def _read_line(self, namespace: str, queue: str) -> list[Pending] | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        now = time.monotonic()
        if now - self._refused.get((namespace, queue), -REFUSED_TTL) < REFUSED_TTL:
            return None
        version = await self.visibility_version()
        if version is None:
            return None
        path = (
            f"/apis/{VISIBILITY_GROUP}/{version}/namespaces/{namespace}"
            f"/localqueues/{queue}/pendingworkloads"
        )
        try:
            summary = await get_json(self.api, path)
        except ApiException as exc:
            if exc.status not in (403, 404, 503):
                raise
            self._refused[(namespace, queue)] = now
            log.info("gpuhub: Kueue's visibility API answered %s for %s", exc.status, queue)
            return None
        line = []
        for item in summary.get("items") or []:
            place = item.get("positionInLocalQueue")
            if not isinstance(place, int) or isinstance(place, bool) or place < 0:
                continue
            meta = item.get("metadata") or {}
            owners = tuple(
                (str(r.get("kind") or ""), str(r.get("name") or ""), str(r.get("uid") or ""))
                for r in meta.get("ownerReferences") or []
            )
            overall = item.get("positionInClusterQueue")
            if not isinstance(overall, int) or isinstance(overall, bool) or overall < 0:
                overall = None
            line.append(
                Pending(
                    str(meta.get("name") or ""),
                    place + 1,
                    owners,
                    overall + 1 if overall is not None else None,
                )
            )
        return sorted(line, key=lambda p: p.position)

    async def fair_sharing(self, namespace: str, queue: str) -> FairSharing:
        """Whether Kueue orders LocalQueue ``queue``'s ClusterQueue by past usage (read anew
        each time: the hub asks once, at its first queued spawn)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        version = await self.version()
        if version is None:
            return FairSharing(False, "", "the cluster serves no Kueue")
        try:
            local = await self._get(version, f"namespaces/{namespace}/localqueues/{queue}")
            cluster_queue = str((local.get("spec") or {}).get("clusterQueue") or "")
            cluster = await self._get(version, f"clusterqueues/{cluster_queue}")
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            return FairSharing(
                False,
                "",
                f"the LocalQueue {queue!r} or its ClusterQueue cannot be read (HTTP {exc.status})",
            )
        return fair_sharing_of(local, cluster)

    async def own_queue(
        self,
        namespace: str,
        queue: str,
        user: str,
        what: str,
        logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
    ) -> str:
        """With ``line_order = "fair"``: the LocalQueue ``user``'s ``what`` ("GPU servers",
        "jobs") wait in, their own (:meth:`user_queue`) where Kueue orders ``queue``'s
        ClusterQueue by past usage, else "" (the admin's ``queue``, first come, first
        served). Whether it does is asked once and said once in the log; an answer that
        could not be had (the apiserver failing) is asked again next time, and a user's
        queue that cannot be made leaves them in the admin's queue, saying why (in ``logger``:
        the hub's own log, where it is given)."""
        say = logger or log
        key = (namespace, queue)
        fair = self._fair.get(key)
        if fair is None:
            try:
                fair = await self.fair_sharing(namespace, queue)
            except Exception as exc:
                say.info("gpuhub: cannot tell whether Kueue orders %r by usage: %s", queue, exc)
                return ""
            self._fair[key] = fair
            if fair.on:
                say.info(
                    "gpuhub: line_order is fair: Kueue's ClusterQueue %s orders by past usage "
                    "(admission fair sharing); each user's %s wait in a LocalQueue of their own",
                    fair.cluster_queue,
                    what,
                )
            else:
                say.warning(
                    "gpuhub: line_order is fair, but Kueue does not order the queue %r by past "
                    "usage (%s): %s wait in it first come, first served.",
                    queue,
                    fair.why_not,
                    what,
                )
        if not fair.on:
            return ""
        try:
            return await self.user_queue(namespace, queue, user, fair.cluster_queue)
        except Exception as exc:  # not allowed, not ours: the admin's queue, and why
            say.warning(
                "gpuhub: %s's %s wait in %r, not a LocalQueue of their own: %s",
                user,
                what,
                queue,
                exc,
            )
            return ""

    async def user_queue(self, namespace: str, queue: str, user: str, cluster_queue: str) -> str:
        """The name of ``user``'s own LocalQueue beside ``queue``, pointing at
        ``cluster_queue``: made on first use, labelled as gpuhub's and the user's (the exact
        name in an annotation), and kept afterwards (a user's usage lives in it). One of that
        name that exists already is used only if it is that: else :class:`NotOurQueue`, so
        that a user whose name makes another queue's name never waits in it."""
        from kubernetes_asyncio.client.exceptions import ApiException

        name = user_queue_name(queue, user)
        if (namespace, name) in self._made:
            return name
        version = await self.version()
        labels = {MANAGED_BY_LABEL: MANAGED_BY, USER_LABEL: user_label(user)}
        meta = {"name": name, "namespace": namespace, "labels": labels}
        body = {
            "apiVersion": f"{GROUP}/{version}",
            "kind": "LocalQueue",
            "metadata": {**meta, "annotations": {USERNAME_ANNOTATION: user}},
            "spec": {"clusterQueue": cluster_queue},
        }
        try:
            await request_json(
                self.api.call_api(
                    f"/apis/{GROUP}/{version}/namespaces/{namespace}/localqueues",
                    "POST",
                    body=body,
                    header_params={"Content-Type": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                )
            )
            log.info("gpuhub: made Kueue's LocalQueue %s/%s for %s", namespace, name, user)
        except ApiException as exc:
            if exc.status != 409:  # 409: it exists (made before, or by a hub beside this one)
                raise
            found = await self._get(version or "", f"namespaces/{namespace}/localqueues/{name}")
            found_meta = found.get("metadata") or {}
            ours = (
                all((found_meta.get("labels") or {}).get(k) == v for k, v in labels.items())
                and (found_meta.get("annotations") or {}).get(USERNAME_ANNOTATION) == user
                and (found.get("spec") or {}).get("clusterQueue") == cluster_queue
            )
            if not ours:
                raise NotOurQueue(
                    f"the LocalQueue {namespace}/{name} exists but is not {user}'s queue for "
                    f"the ClusterQueue {cluster_queue!r} (made by someone else)"
                ) from None
        self._made.add((namespace, name))
        return name

    async def _get(self, version: str, path: str) -> dict[str, Any]:
        """A Kueue object at ``path`` under this served ``version``; {} when not an object."""
        found = await get_json(self.api, f"/apis/{GROUP}/{version}/{path}")
        return found if isinstance(found, dict) else {}

    async def usage(self, namespace: str, queue: str) -> QueueUse | None:
        """What LocalQueue ``queue``'s ClusterQueue has and what of it is taken; None when it
        cannot be read (no Kueue, no such queue, not allowed: then not asked again for a
        minute). Shared by readers within :data:`LINE_TTL` seconds, as :meth:`line` is."""
        return await _shared(self._uses, (namespace, queue), self._read_usage)

    async def _read_usage(self, namespace: str, queue: str) -> QueueUse | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        now = time.monotonic()
        if now - self._use_refused.get((namespace, queue), -REFUSED_TTL) < REFUSED_TTL:
            return None
        version = await self.version()
        if version is None:
            return None

        try:
            local = await self._get(version, f"namespaces/{namespace}/localqueues/{queue}")
            cluster_queue = str((local.get("spec") or {}).get("clusterQueue") or "")
            if not cluster_queue:
                return None
            return queue_use(await self._get(version, f"clusterqueues/{cluster_queue}"))
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            self._use_refused[(namespace, queue)] = now
            log.info(
                "gpuhub: cannot read the quota of Kueue's queue %s: HTTP %s", queue, exc.status
            )
            return None


class NotOurQueue(Exception):
    """A LocalQueue of the name a user's own would have exists, and is not gpuhub's for them."""


AFS_MODE = "UsageBasedAdmissionFairSharing"  # a ClusterQueue's spec.admissionScope.admissionMode


@dataclass(frozen=True)
class FairSharing:
    """Whether Kueue orders a LocalQueue's ClusterQueue by its LocalQueues' past usage
    (admission fair sharing), and if not, why, in a sentence for the admin's log."""

    on: bool
    cluster_queue: str = ""
    why_not: str = ""


def fair_sharing_of(local: Mapping[str, Any], cluster: Mapping[str, Any]) -> FairSharing:
    """:class:`FairSharing` of a LocalQueue and its ClusterQueue (their JSON, either version):
    on where the ClusterQueue asks for usage-based admission and Kueue keeps the LocalQueue's
    usage (its status says so only where the Configuration enables it and the feature gate
    is on)."""
    name = str((cluster.get("metadata") or {}).get("name") or "")
    scope = ((cluster.get("spec") or {}).get("admissionScope") or {}).get("admissionMode")
    if scope != AFS_MODE:
        return FairSharing(
            False,
            name,
            f"the ClusterQueue {name!r} has no spec.admissionScope.admissionMode: {AFS_MODE}",
        )
    status = ((local.get("status") or {}).get("fairSharing") or {}).get(
        "admissionFairSharingStatus"
    )
    if not isinstance(status, Mapping):
        return FairSharing(
            False,
            name,
            "Kueue keeps no usage per LocalQueue (its Configuration has no "
            "admissionFairSharing, or the AdmissionFairSharing feature gate is off)",
        )
    return FairSharing(True, name)


_QUEUE_PREFIX = 40  # characters of the admin's queue name a user's LocalQueue keeps
# An object name Kubernetes takes (RFC 1123 label).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def user_queue_name(queue: str, user: str) -> str:
    """The LocalQueue of ``user`` beside the admin's ``queue``: ``gpus-alice``. An object's
    name must be a DNS-1123 label (lower-case letters, digits and "-", at most 63
    characters), stricter than a label value: ``john_doe``, ``Alice`` and ``a..b`` are label
    values, not names. A user name that is no such label, or too long, is a slug with a hash
    (``gpus-john-doe---1a2b3c4d``, as KubeSpawner's safe slugs), so every JupyterHub user
    gets a valid name and two users never share one: a plain name never holds "--", a hashed
    one always does."""
    from kubespawner.slugs import is_valid_object_name, safe_slug

    prefix = re.sub(r"[^a-z0-9-]+", "-", queue[:_QUEUE_PREFIX].lower()).strip("-") or "q"
    room = 63 - len(prefix) - 1
    name = f"{prefix}-{safe_slug(user, is_valid=is_valid_object_name, max_length=room)}"
    if not DNS_LABEL.fullmatch(name):  # safe_slug promises it; never send Kueue a bad one
        raise ValueError(f"{name!r} (the LocalQueue of {user!r}) is no DNS-1123 label")
    return name


def positions(line: list[Pending] | None) -> dict[str, int]:
    """Owner uid -> place in line (1 = next), from :meth:`KueueAPI.line`."""
    out: dict[str, int] = {}
    for pending in line or []:
        for _kind, _name, uid in pending.owners:
            if uid:
                out[uid] = pending.position
    return out


T = TypeVar("T")
Reads = dict[tuple[str, str], tuple[float, asyncio.Future[T]]]


async def _shared(
    reads: Reads[T], key: tuple[str, str], read: Callable[[str, str], Awaitable[T]]
) -> T:
    """``read(*key)``, shared: one read in flight per key, and a good one reused by readers
    within :data:`LINE_TTL` seconds (a reader that is cancelled leaves the read running)."""
    now = _clock()
    cached = reads.get(key)
    if cached is None or not _reusable(*cached, now):
        cached = (now, asyncio.ensure_future(read(*key)))
        reads[key] = cached
    return await asyncio.shield(cached[1])


def _reusable(when: float, read: asyncio.Future[Any], now: float) -> bool:
    """A read of a line still in flight, or done well and recent enough to share."""
    if not read.done():
        return True
    return not read.cancelled() and read.exception() is None and now - when < LINE_TTL


def gated(pod: Mapping[str, Any] | None) -> bool:
    """Whether Kueue holds ``pod`` (a pod's JSON) back until its Workload is admitted."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE for g in gates)


# One KueueAPI per event loop and API server in the hub: its discovery answers and shared
# lines serve every spawner of the process (held weakly by loop, as the capacity cache is).
_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, KueueAPI]] = (
    weakref.WeakKeyDictionary()
)


def shared_kueue(api: Any) -> KueueAPI:
    """The hub process's :class:`KueueAPI` for the cluster ``api`` (an ``ApiClient``) talks to."""
    host = str(getattr(getattr(api, "configuration", None), "host", ""))
    per_loop = _SHARED.setdefault(asyncio.get_running_loop(), {})
    if host not in per_loop:
        per_loop[host] = KueueAPI(api)
    return per_loop[host]
