"""Bookings on a Kueue hub: the cluster's queues made to match the bookings in force now
(docs/architecture.md, "Bookings"; the objects: :mod:`gpuhub.k8s.kueue_bookings`).

On a hub whose GPU servers wait in Kueue (``kueue_queue_name``), a booking's GPUs are kept
for its booker by Kueue, not by gpuhub stopping work: from the booking's start to its end its
GPUs are nominal quota of a ClusterQueue of its own, moved out of the hub's ClusterQueue, and
Kueue preempts the work that borrows them when the booker's work arrives. :func:`reconcile`
runs on every monitor tick and whenever a booking is made or cancelled
(:func:`gpuhub.hub.monitor.booking_watch.watch` calls it); each run makes the cluster match
the bookings in force, so it is idempotent, picks up where a hub that restarted left off (the
hub's ClusterQueue records what it lent out), and gives quota back for a booking deleted early
or ended. Which LocalQueue a booker's server waits in: :func:`queue_for`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from gpuhub.core.bookings import Booking
from gpuhub.k8s import kueue_bookings as kb
from gpuhub.k8s.kueue import GROUP, shared_kueue
from gpuhub.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL
from gpuhub.k8s.rawapi import get_json, request_json

log = logging.getLogger(__name__)

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY},{kb.BOOKING_LABEL}"
_LOCK: dict[int, asyncio.Lock] = {}  # id(api) -> one reconcile at a time per cluster
_SAID: set[tuple[str, str]] = set()  # (booking id, why) said once in the log


def _say_once(booking: str, why: str) -> None:
    if (booking, why) not in _SAID:
        _SAID.add((booking, why))
        log.warning("gpuhub: booking %s keeps no GPUs in Kueue: %s", booking, why)


async def _call(api: Any, path: str, method: str, body: Any = None, patch: bool = False) -> Any:
    kind = "application/merge-patch+json" if patch else "application/json"
    return await request_json(
        api.call_api(
            path,
            method,
            body=body,
            header_params={"Content-Type": kind},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    )


async def reconcile(
    api: Any,
    namespace: str,
    local_queue: str,
    bookings: Iterable[Booking],
    types: Mapping[str, Any],
    now: float | None = None,
    takes: bool = True,
) -> dict[str, kb.Move]:
    """Make Kueue's queues match the ``bookings`` in force at ``now``: the quota of each is in
    its own ClusterQueue (with its LocalQueue in ``namespace``), taken from the ClusterQueue
    that ``local_queue`` points at; the quota of any other is back. ``types``: the hub's GPU
    types by key (their ``resource_name`` and ``node_selector``). Returns what is moved out
    now. ``takes``: whether the hub takes bookings; on a hub that does not, a run only
    reads the hub's ClusterQueue (what the chart then allows) and gives back anything still
    moved out. Raises the apiserver's errors (the caller logs them; the next run tries
    again)."""
    lock = _LOCK.setdefault(id(api), asyncio.Lock())
    async with lock:
        return await _reconcile(api, namespace, local_queue, list(bookings), types, now, takes)


async def _reconcile(
    api: Any,
    namespace: str,
    local_queue: str,
    bookings: list[Booking],
    types: Mapping[str, Any],
    now: float | None,
    takes: bool,
) -> dict[str, kb.Move]:
    now = time.time() if now is None else now
    version = await shared_kueue(api).version()
    if version is None:
        return {}
    base = f"/apis/{GROUP}/{version}"
    local = await get_json(api, f"{base}/namespaces/{namespace}/localqueues/{local_queue}")
    name = str((local.get("spec") or {}).get("clusterQueue") or "")
    main = await get_json(api, f"{base}/clusterqueues/{name}")
    had = kb.booked_out(main)
    by_id = {b.id: b for b in bookings}
    if not takes and not had:
        return {}
    want = await _wanted(api, base, main, had, bookings, types, now)
    # Booking queues no longer wanted give their quota up first, so that the cohort never
    # counts a booking's GPUs twice (its queue's and, given back, the hub's queue's).
    found = await get_json(api, f"{base}/clusterqueues", [("labelSelector", SELECTOR)])
    ours = [
        q
        for q in found.get("items") or []
        if ((q.get("metadata") or {}).get("annotations") or {}).get(kb.BOOKING_OF_ANNOTATION)
        == name
    ]
    names = {kb.queue_name(b): b for b in want}
    going = [q for q in ours if q["metadata"]["name"] not in names]
    for queue in going:
        if kb.has_quota(queue):
            path = f"{base}/clusterqueues/{queue['metadata']['name']}"
            await _call(api, path, "PATCH", kb.without_quota(queue), patch=True)
    body = kb.moved_main(main, want)
    moved = had
    if body is not None:
        moved = kb.booked_out(await _call(api, f"{base}/clusterqueues/{name}", "PUT", body))
        for booking in set(want) - set(had):
            log.info(
                "gpuhub: booking %s: %d GPUs moved into Kueue's ClusterQueue %s",
                booking,
                want[booking].gpus,
                kb.queue_name(booking),
            )
        for booking in set(had) - set(want):
            log.info("gpuhub: booking %s: its GPUs are back in the ClusterQueue %s", booking, name)
    for move in (moved[b] for b in want if b in moved):
        await _create(api, f"{base}/clusterqueues", kb.booking_cluster_queue(main, move, version))
        await _create(
            api,
            f"{base}/namespaces/{namespace}/localqueues",
            kb.booking_local_queue(
                move.booking,
                namespace,
                version,
                for_user=by_id[move.booking].for_user,
                for_group=by_id[move.booking].for_group,
                gpu_type=by_id[move.booking].gpu_type,
            ),
        )
    locals_ = await get_json(
        api, f"{base}/namespaces/{namespace}/localqueues", [("labelSelector", SELECTOR)]
    )
    gone = {q["metadata"]["name"] for q in going}
    for queue in locals_.get("items") or []:
        if (queue.get("spec") or {}).get("clusterQueue") in gone:
            await _delete(
                api, f"{base}/namespaces/{namespace}/localqueues/{queue['metadata']['name']}"
            )
    for queue in going:
        if not queue["metadata"].get("deletionTimestamp"):
            await _delete(api, f"{base}/clusterqueues/{queue['metadata']['name']}")
    return {b: moved[b] for b in want if b in moved}


async def _wanted(
    api: Any,
    base: str,
    main: Mapping[str, Any],
    had: Mapping[str, kb.Move],
    bookings: list[Booking],
    types: Mapping[str, Any],
    now: float,
) -> dict[str, kb.Move]:
    """The moves the bookings in force at ``now`` need: those made already stay as they are;
    a new one takes its GPUs where the hub's queue still has them (else it is said, once,
    why not)."""
    active = sorted((b for b in bookings if b.active(now)), key=lambda b: (b.start, b.id))
    main_name = (main.get("metadata") or {}).get("name")
    if active and not kb.cohort_of(main):
        for booking in active:
            _say_once(
                booking.id,
                f"the ClusterQueue {main_name!r} is in no cohort, so no booking's queue can "
                "reclaim GPUs from it; give it spec.cohort (v1beta1) or spec.cohortName",
            )
        return {}
    want = {b.id: had[b.id] for b in active if b.id in had}
    left: dict[tuple[str, str], int] = {}  # (flavor, resource) -> what the hub's queue keeps
    for move in had.values():
        key = (move.flavor, move.resource)
        if key not in left:
            left[key] = kb.nominal(main, *key) or 0
        if move.booking not in want:
            left[key] += move.gpus
    labels: dict[str, dict[str, str]] | None = None
    for booking in active:
        if booking.id in want:
            continue
        gpu_type = types.get(booking.gpu_type)
        resource = str(getattr(gpu_type, "resource_name", "") or "")
        if not resource:
            _say_once(booking.id, f"its GPU type {booking.gpu_type!r} has no resource_name")
            continue
        if labels is None and len(kb.flavors_with(main, resource)) > 1:
            labels = await _flavor_labels(api, base)
        flavor = kb.pick_flavor(
            main, resource, dict(getattr(gpu_type, "node_selector", {}) or {}), labels or {}
        )
        if flavor is None:
            _say_once(
                booking.id,
                f"no one flavor of the ClusterQueue {main_name!r} has {resource} for the type "
                f"{booking.gpu_type!r} (a flavor's nodeLabels must agree with its node_selector)",
            )
            continue
        key = (flavor, resource)
        if key not in left:
            left[key] = kb.nominal(main, *key) or 0
        if left[key] < booking.gpus:
            _say_once(
                booking.id,
                f"the ClusterQueue {main_name!r} has {left[key]} {resource} left in flavor "
                f"{flavor!r}, fewer than the {booking.gpus} booked",
            )
            continue
        left[key] -= booking.gpus
        want[booking.id] = kb.Move(booking.id, flavor, resource, booking.gpus)
    return want


async def _flavor_labels(api: Any, base: str) -> dict[str, dict[str, str]]:
    found = await get_json(api, f"{base}/resourceflavors")
    return {
        str(f["metadata"]["name"]): dict((f.get("spec") or {}).get("nodeLabels") or {})
        for f in found.get("items") or []
    }


async def _create(api: Any, path: str, body: dict[str, Any]) -> None:
    """Create ``body`` unless it exists (a 409 is a run before this one having made it)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await _call(api, path, "POST", body)
    except ApiException as exc:
        if exc.status != 409:
            raise


async def _delete(api: Any, path: str) -> None:
    """Delete the object at ``path`` (gone already is fine)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await _call(api, path, "DELETE")
    except ApiException as exc:
        if exc.status != 404:
            raise


async def queue_for(
    api: Any,
    namespace: str,
    bookings: Iterable[Booking],
    is_for: Any,
    user: str,
    gpu_type: str,
    now: float | None = None,
) -> str:
    """The LocalQueue a ``user``'s server of ``gpu_type`` waits in: the queue of a booking for
    them in force now, once :func:`reconcile` has made it; else "" (the hub's queue).
    ``is_for(booking, user)``: whether the booking is for the user (their groups)."""
    now = time.time() if now is None else now
    from kubernetes_asyncio.client.exceptions import ApiException

    version = await shared_kueue(api).version()
    if version is None:
        return ""
    for booking in sorted(bookings, key=lambda b: (b.start, b.id)):
        if booking.gpu_type != gpu_type or not booking.active(now) or not is_for(booking, user):
            continue
        name = kb.queue_name(booking.id)
        try:
            await get_json(
                api, f"/apis/{GROUP}/{version}/namespaces/{namespace}/localqueues/{name}"
            )
        except ApiException as exc:
            if exc.status in (403, 404):
                continue
            raise
        return name
    return ""


def kueue_types(spawner: Any) -> Mapping[str, Any]:
    """The hub's GPU types by key (their resource and node selector)."""
    try:
        return dict(spawner.gpu_policy.gpu_types)
    except Exception:
        return {}


def is_kueue_hub(spawner: Any) -> bool:
    """Whether the hub's GPU servers wait in Kueue (bookings are then Kueue's to keep)."""
    return bool(getattr(spawner, "kueue_queue_name", "")) and hasattr(spawner, "api")


async def watch(
    spawner: Any, bookings: Collection[Booking], now: float, takes: bool = True
) -> None:
    """:func:`reconcile` for the hub's spawner, on a Kueue hub; a failure is logged (the next
    tick tries again; on a hub that takes no bookings, only at debug level: its queue is
    read only to give back what an earlier run moved), never raised into the monitor."""
    if not is_kueue_hub(spawner):
        return
    try:
        await reconcile(
            spawner.api.api_client,
            spawner.namespace,
            spawner.kueue_queue_name,
            bookings,
            kueue_types(spawner),
            now,
            takes,
        )
    except Exception as exc:
        level = logging.WARNING if takes else logging.DEBUG
        log.log(level, "gpuhub: could not make Kueue's queues match the bookings: %s", exc)
