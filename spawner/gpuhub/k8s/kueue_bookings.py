"""A GPU booking on a Kueue hub as Kueue objects: quota moved into a ClusterQueue of its own for
its window (docs/architecture.md, "Bookings"). Pure builders, no I/O; the hub's reconciler
(:mod:`gpuhub.hub.monitor.booking_queues`) reads the cluster, calls these and writes.

For its window a booking of ``gpus`` GPUs is a ClusterQueue ``gpuhub-booking-<id>`` in the
cohort of the hub's ClusterQueue (the one its ``kueue_queue_name`` LocalQueue points at), with
a LocalQueue of the same name in the hub's namespace. Its GPU flavor has ``gpus`` of nominal
quota, taken from the hub's ClusterQueue; every other resource has 0 and is borrowed from the
cohort. It has ``preemption.reclaimWithinCohort: Any``: when the booker's work arrives and
the hub's queue is using more than its lowered nominal quota (it is borrowing the booked
GPUs), Kueue preempts those borrowers, as it does for any ClusterQueue reclaiming its quota
(https://kueue.sigs.k8s.io/docs/concepts/preemption/). Before the start the quota is the
hub's queue's (lent to whoever is admitted), and after the end it goes back.

What is moved out of the hub's ClusterQueue is written on it, in the annotation
:data:`BOOKED_OUT` (booking id -> flavor, resource, GPUs), in the same write that changes its
nominal quota: one update (with its ``resourceVersion``) both moves the quota and records it,
so a hub that restarts, or a booking deleted while the hub was down, always gives back exactly
what was taken.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from gpuhub.core.gpu_resources import is_gpu_resource
from gpuhub.core.quantity import QuantityError, parse_quantity
from gpuhub.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL

BOOKING_LABEL = "gpuhub.io/booking"  # on a booking's queues: the booking's id (a label slug)
BOOKING_OF_ANNOTATION = "gpuhub.io/booking-of"  # on a booking's ClusterQueue: the hub's one
BOOKED_OUT = "gpuhub.io/booked-out"  # on the hub's ClusterQueue: what bookings took (JSON)
AS_WRITTEN = "gpuhub.io/quota-as-written"  # and its quotas as they were written (JSON)
# On a booking's LocalQueue: whom it is for (a user's exact name, or a group) and its GPU type.
BOOKING_USER = "gpuhub.io/booking-user"
BOOKING_GROUP = "gpuhub.io/booking-group"
BOOKING_GPU_TYPE = "gpuhub.io/gpu-type"
PREFIX = "gpuhub-booking-"
GROUP = "kueue.x-k8s.io"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Taken:
    """What one booking took of one flavor's resource in the hub's ClusterQueue: ``quota``
    of its nominal quota, and ``lent`` of its ``lendingLimit`` (Kueue refuses a lendingLimit
    above the nominal quota; what was lendable goes first), both given back at the end."""

    flavor: str
    resource: str
    quota: Decimal
    lent: Decimal = Decimal(0)
    was: str = ""  # the nominal quota as written before it was taken (not kept in the record)

    def for_json(self) -> dict[str, str]:
        return {
            "flavor": self.flavor,
            "resource": self.resource,
            "quota": _text(self.quota),
            "lent": _text(self.lent),
        }


@dataclass(frozen=True)
class Move:
    """``gpus`` of ``resource`` in ``flavor`` moved from the hub's ClusterQueue to a
    booking's for its window, with the booked GPUs' share of the queue's other resources
    (CPU, memory: ``taken``, which holds the GPUs too once the move is made). A booking's
    queue must hold all that its work asks for within its own nominal quota: Kueue lets a
    queue reclaim its quota from borrowers in the cohort only for work that fits there
    (classical preemption's hierarchical advantage), and a server asks for CPU and memory
    beside its GPUs."""

    booking: str
    flavor: str
    resource: str
    gpus: int
    taken: tuple[Taken, ...] = field(default=(), compare=False)

    def for_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"flavor": self.flavor, "resource": self.resource}
        return {**out, "gpus": self.gpus, "taken": [t.for_json() for t in self.taken]}


def _value(amount: Decimal) -> int | str:
    """A quota as written on a ClusterQueue: a whole number as a number, else a quantity."""
    return int(amount) if amount == amount.to_integral_value() else _text(amount)


def _text(amount: Decimal) -> str:
    """A Kubernetes quantity of ``amount`` (a plain decimal: ``7.5``, ``8589934592``)."""
    return format(amount.normalize(), "f")


def queue_name(booking_id: str) -> str:
    """``gpuhub-booking-b-1a2b3c4d``: the name of a booking's ClusterQueue and LocalQueue (a
    DNS-1123 label; an id that would not make one is hashed)."""
    name = f"{PREFIX}{booking_id}"
    if _NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(booking_id.encode()).hexdigest()[:12]
    return f"{PREFIX}{digest}"


def label_value(booking_id: str) -> str:
    """The booking's id as a label value (the queue name's tail)."""
    return queue_name(booking_id)[len(PREFIX) :]


def cohort_key(version: str) -> str:
    """A ClusterQueue's cohort field: ``cohortName`` in v1beta2, ``cohort`` in v1beta1."""
    return "cohortName" if version == "v1beta2" else "cohort"


def cohort_of(cluster_queue: Mapping[str, Any]) -> str:
    """The cohort a ClusterQueue (either version's JSON) is in; "" for none."""
    spec = cluster_queue.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def _quantity(value: Any) -> int | None:
    """A whole nominal quota of GPUs (``2`` or ``"2"``); None for any other figure."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def nominal(cluster_queue: Mapping[str, Any], flavor: str, resource: str) -> int | None:
    """The nominal quota of ``resource`` in ``flavor`` of a ClusterQueue; None when it has no
    such flavor and resource, or the quota is no whole number."""
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for entry in group.get("flavors") or []:
            if entry.get("name") != flavor:
                continue
            for res in entry.get("resources") or []:
                if res.get("name") == resource:
                    return _quantity(res.get("nominalQuota"))
    return None


def flavors_with(cluster_queue: Mapping[str, Any], resource: str) -> list[str]:
    """The flavors of a ClusterQueue that have quota of ``resource``, in its order."""
    found = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        if resource not in (group.get("coveredResources") or []):
            continue
        found += [str(f.get("name") or "") for f in group.get("flavors") or []]
    return [f for f in found if f]


def pick_flavor(
    cluster_queue: Mapping[str, Any],
    resource: str,
    node_selector: Mapping[str, str],
    flavor_labels: Mapping[str, Mapping[str, str]],
) -> str | None:
    """The flavor a booking of a GPU type takes its quota from: of the ClusterQueue's flavors
    with ``resource``, the one whose ResourceFlavor's ``nodeLabels`` (``flavor_labels``) the
    type's ``node_selector`` agrees with (the GPU model's node labels); the only one where
    there is one; else None (which one is meant cannot be told)."""
    found = flavors_with(cluster_queue, resource)
    if len(found) == 1:
        return found[0]
    agree = [
        f
        for f in found
        if flavor_labels.get(f)
        and all(node_selector.get(k) == v for k, v in (flavor_labels.get(f) or {}).items())
    ]
    return agree[0] if len(agree) == 1 else None


def booked_out(cluster_queue: Mapping[str, Any]) -> dict[str, Move]:
    """What bookings have taken from the hub's ClusterQueue, from its :data:`BOOKED_OUT`
    annotation (entries that are not well formed are left out)."""
    raw = ((cluster_queue.get("metadata") or {}).get("annotations") or {}).get(BOOKED_OUT)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    out: dict[str, Move] = {}
    if not isinstance(data, dict):
        return out
    for booking, entry in data.items():
        try:
            move = _move(str(booking), entry)
        except (KeyError, TypeError, ValueError, QuantityError):
            continue
        out[move.booking] = move
    return out


def _move(booking: str, entry: Any) -> Move:
    gpus = entry["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError("gpus")
    flavor, resource = entry["flavor"], entry["resource"]
    if not isinstance(flavor, str) or not isinstance(resource, str):
        raise ValueError("names")
    taken = []
    for t in entry.get("taken") or []:
        quota, lent = parse_quantity(t["quota"]), parse_quantity(t["lent"])
        if lent > quota or not isinstance(t["flavor"], str) or not isinstance(t["resource"], str):
            raise ValueError("taken")
        taken.append(Taken(t["flavor"], t["resource"], quota, lent))
    return Move(booking, flavor, resource, gpus, tuple(taken))


def _resource(groups: Any, flavor: str, resource: str) -> dict[str, Any] | None:
    """The entry of ``resource`` in ``flavor`` of a ClusterQueue's resource groups."""
    for group in groups or []:
        for entry in group.get("flavors") or []:
            if entry.get("name") != flavor:
                continue
            for res in entry.get("resources") or []:
                if res.get("name") == resource:
                    return res
    return None


def _amount(res: Mapping[str, Any], key: str) -> Decimal:
    try:
        return parse_quantity(res.get(key, 0))
    except QuantityError:
        return Decimal(0)


def _as_was(amount: Decimal, was: str) -> Any:
    """``amount`` as the quota was written before it was taken (``16Gi``, ``4``), where that
    is the same amount; else as a plain quantity."""
    try:
        if was and parse_quantity(was) == amount:
            return int(was) if was.isdigit() else was
    except QuantityError:
        pass
    return _value(amount)


def _take(groups: Any, move: Move) -> tuple[Taken, ...]:
    """Take ``move``'s GPUs out of ``groups`` (in place), and the same share of every
    resource that is no GPU (rounded down: CPU to millicores, the rest to whole units)."""
    res = _resource(groups, move.flavor, move.resource)
    if res is None:
        return ()
    before = _amount(res, "nominalQuota")
    share = Decimal(move.gpus) / before if before > 0 else Decimal(0)
    taken = []
    for group in groups or []:
        for entry in group.get("flavors") or []:
            for other in entry.get("resources") or []:
                name = str(other.get("name") or "")
                booked = other is res
                if not booked and is_gpu_resource(name):
                    continue
                was = other.get("nominalQuota")
                quota = _amount(other, "nominalQuota")
                amount = Decimal(move.gpus) if booked else quota * share
                unit = Decimal("0.001") if name == "cpu" else Decimal(1)
                amount = min(quota, amount.quantize(unit, rounding=ROUND_FLOOR))
                if amount <= 0:
                    continue
                other["nominalQuota"] = _value(quota - amount)
                lent = Decimal(0)
                if "lendingLimit" in other:
                    limit = _amount(other, "lendingLimit")
                    lent = min(amount, limit)
                    other["lendingLimit"] = _value(limit - lent)
                flavor = str(entry.get("name") or "")
                taken.append(Taken(flavor, name, amount, lent, str(was)))
    return tuple(taken)


def moved_main(cluster_queue: Mapping[str, Any], want: Mapping[str, Move]) -> dict[str, Any] | None:
    """The hub's ClusterQueue with exactly the moves ``want`` taken out of it: what it had
    moved out already (:func:`booked_out`) and is no longer wanted goes back, what is wanted
    and not yet moved is taken, and the annotation says so. None when nothing changes. The
    result keeps the object's ``resourceVersion``: written with an update, a change made by
    someone else in between is refused (409) rather than overwritten."""
    had = booked_out(cluster_queue)
    if had == dict(want):
        return None
    out = copy.deepcopy(dict(cluster_queue))
    groups = (out.get("spec") or {}).get("resourceGroups")
    kept = {b: m for b, m in had.items() if want.get(b) == m}
    back: set[tuple[str, str]] = set()
    for booking, move in had.items():
        if booking in kept:
            continue
        for taken in move.taken:
            res = _resource(groups, taken.flavor, taken.resource)
            if res is None:
                continue
            res["nominalQuota"] = _value(_amount(res, "nominalQuota") + taken.quota)
            back.add((taken.flavor, taken.resource))
            if "lendingLimit" in res:
                res["lendingLimit"] = _value(_amount(res, "lendingLimit") + taken.lent)
    for booking, move in want.items():
        if booking not in kept:
            kept[booking] = replace(move, taken=_take(groups, move))
    # The quotas as the admin wrote them (``256Gi``), written back so where they add up again.
    meta = out.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    try:
        written = dict(json.loads(annotations.get(AS_WRITTEN) or "{}"))
    except (TypeError, ValueError):
        written = {}
    for move in kept.values():
        for taken in move.taken:
            if taken.was:
                written.setdefault(f"{taken.flavor}/{taken.resource}", taken.was)
    for flavor, resource in back:
        res = _resource(groups, flavor, resource)
        text = written.get(f"{flavor}/{resource}")
        if res is not None and isinstance(text, str):
            res["nominalQuota"] = _as_was(_amount(res, "nominalQuota"), text)
    if kept:
        annotations[BOOKED_OUT] = json.dumps(
            {b: m.for_json() for b, m in sorted(kept.items())}, sort_keys=True
        )
        annotations[AS_WRITTEN] = json.dumps(written, sort_keys=True)
    else:
        annotations.pop(BOOKED_OUT, None)
        annotations.pop(AS_WRITTEN, None)
    meta["annotations"] = annotations
    meta.pop("managedFields", None)
    out.pop("status", None)
    return out


def _labels(booking_id: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, BOOKING_LABEL: label_value(booking_id)}


def booking_cluster_queue(main: Mapping[str, Any], move: Move, version: str) -> dict[str, Any]:
    """A booking's ClusterQueue: the hub's ClusterQueue's cohort, namespaces and flavors, with
    the booking's GPUs of nominal quota in the booked flavor and none of
    anything else (borrowed from the cohort), reclaiming its quota from borrowers by
    preemption (``reclaimWithinCohort: Any``)."""
    spec = main.get("spec") or {}
    groups = copy.deepcopy(spec.get("resourceGroups") or [])
    for group in groups:
        for entry in group.get("flavors") or []:
            for res in entry.get("resources") or []:
                mine = [
                    t.quota
                    for t in move.taken
                    if (t.flavor, t.resource) == (entry.get("name"), res.get("name"))
                ]
                res["nominalQuota"] = _value(mine[0]) if mine else 0
                res.pop("borrowingLimit", None)
                res.pop("lendingLimit", None)
    name = str((main.get("metadata") or {}).get("name") or "")
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ClusterQueue",
        "metadata": {
            "name": queue_name(move.booking),
            "labels": _labels(move.booking),
            "annotations": {BOOKING_OF_ANNOTATION: name},
        },
        "spec": {
            cohort_key(version): cohort_of(main),
            "namespaceSelector": copy.deepcopy(spec.get("namespaceSelector") or {}),
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": groups,
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
        },
    }


def booking_local_queue(
    booking_id: str,
    namespace: str,
    version: str,
    *,
    for_user: str = "",
    for_group: str = "",
    gpu_type: str = "",
) -> dict[str, Any]:
    """A booking's LocalQueue in the hub's ``namespace``: the booker's servers wait in it, and
    their jobs (the jobs service's namespace is the servers'), which the service finds by the
    annotations saying whom it is for and of which GPU type (:func:`job_queue`)."""
    name = queue_name(booking_id)
    whom = {BOOKING_USER: for_user} if for_user else {BOOKING_GROUP: for_group}
    meta = {"name": name, "namespace": namespace, "labels": _labels(booking_id)}
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "LocalQueue",
        "metadata": {**meta, "annotations": {**whom, BOOKING_GPU_TYPE: gpu_type}},
        "spec": {"clusterQueue": name},
    }


def job_queue(local_queues: Any, owner: str, gpu_type: str) -> str:
    """The booking's LocalQueue (of those the hub made, :func:`booking_local_queue`) a job of
    ``owner`` asking for GPUs of ``gpu_type`` (a type key) waits in: one booked for them, the
    first by name; "" for none. A group's booking is not told from here yet (the service
    does not hand its backend the owner's groups), so its members' jobs wait in the admin's
    queue."""
    for queue in sorted(local_queues or [], key=lambda q: str(q["metadata"]["name"])):
        meta = queue.get("metadata") or {}
        notes = meta.get("annotations") or {}
        if not (meta.get("labels") or {}).get(BOOKING_LABEL) or meta.get("deletionTimestamp"):
            continue
        if notes.get(BOOKING_USER) == owner and notes.get(BOOKING_GPU_TYPE) == gpu_type:
            return str(meta["name"])
    return ""


def without_quota(cluster_queue: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that leaves a booking's ClusterQueue no nominal quota at all: at the
    booking's end, before its GPUs go back, so that work of it still running borrows from
    the cohort rather than being counted twice."""
    groups = copy.deepcopy((cluster_queue.get("spec") or {}).get("resourceGroups") or [])
    for group in groups:
        for entry in group.get("flavors") or []:
            for res in entry.get("resources") or []:
                res["nominalQuota"] = 0
    return {"spec": {"resourceGroups": groups}}


def has_quota(cluster_queue: Mapping[str, Any]) -> bool:
    """Whether a ClusterQueue has any nominal quota left."""
    return any(
        _amount(res, "nominalQuota") > 0
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
        for entry in group.get("flavors") or []
        for res in entry.get("resources") or []
    )
