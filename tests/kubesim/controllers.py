"""Control-plane loops: the scheduler, the Job controller, garbage collection, namespaces."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from fractions import Fraction
from typing import Any

from . import admission, scheduler, storage
from .apiserver import APIServer
from .errors import APIError
from .events import Recorder
from .resources import ResourceType
from .store import Obj, Store, now


def _bound_and_active(pod: Obj | None) -> bool:
    return bool(
        pod
        and pod["spec"].get("nodeName")
        and pod["status"].get("phase") not in ("Succeeded", "Failed")
    )


class Scheduler:
    """Binds pending pods whose ``schedulerName`` is ``default-scheduler``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = Recorder(store, "default-scheduler")
        self.usage: dict[str, Counter[str]] = {}  # node -> summed requests of its active pods
        self.pending: dict[tuple[str, str], int] = {}  # pod -> creation order
        self.last_failure: dict[str, tuple[str, Obj]] = {}  # pod uid -> (message, event)
        self._scheduled = False
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if rt.kind in ("Node", "PersistentVolumeClaim"):
            self._kick()
            return
        if rt.kind != "Pod":
            return
        if _bound_and_active(old):
            self._account(old, -1)  # type: ignore[arg-type]
        if kind != "DELETED" and _bound_and_active(obj):
            self._account(obj, +1)
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        waiting = (
            kind != "DELETED"
            and not obj["spec"].get("nodeName")
            and not meta.get("deletionTimestamp")
            and obj["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"
            and obj["status"].get("phase") == "Pending"
        )
        if waiting:
            self.pending.setdefault(key, int(meta["resourceVersion"]))
        else:
            self.pending.pop(key, None)
            if kind == "DELETED":
                self.last_failure.pop(meta["uid"], None)
        # New pending pods, and freed resources, are reasons to try again.
        freed = _bound_and_active(old) and (kind == "DELETED" or not _bound_and_active(obj))
        if (waiting and kind == "ADDED") or freed:
            self._kick()

    def _account(self, pod: Obj, sign: int) -> None:
        usage = self.usage.setdefault(pod["spec"]["nodeName"], Counter())
        for name, amount in scheduler.pod_requests(pod).items():
            usage[name] += sign * amount  # type: ignore[assignment]

    def _kick(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.schedule)

    def schedule(self) -> None:
        """One scheduling cycle over all pending pods, oldest first."""
        self._scheduled = False
        if not self.pending:
            return
        pods_rt, nodes_rt = self.store.by_kind("Pod"), self.store.by_kind("Node")
        nodes = self.store.list(nodes_rt)

        def queue_order(item: tuple[tuple[str, str], int]) -> tuple[int, int]:
            # PrioritySort: higher spec.priority first, then oldest first.
            queued = self.store.peek(pods_rt, *item[0])
            return (-int((queued or {}).get("spec", {}).get("priority") or 0), item[1])

        for key, _ in sorted(self.pending.items(), key=queue_order):
            pod = self.store.peek(pods_rt, *key)
            if pod is None:
                continue
            problem = storage.claim_problem(self.store, pod)
            if problem is not None:
                # VolumeBinding's PreFilter: no node can help, so preemption cannot either.
                total = len(nodes)
                self._unschedulable(
                    pod,
                    f"0/{total} nodes are available: {problem}. preemption: 0/{total} nodes are "
                    f"available: {total} Preemption is not helpful for scheduling..",
                )
                continue
            failures: dict[str, list[str]] = {}
            best: tuple[Fraction, str] | None = None
            requests = scheduler.pod_requests(pod)
            for node in nodes:
                name = node["metadata"]["name"]
                used = self.usage.get(name, Counter())
                reasons = scheduler.filter_node(pod, node, used)  # type: ignore[arg-type]
                if reasons:
                    failures[name] = reasons
                    continue
                node_score = scheduler.score(node, used, requests)  # type: ignore[arg-type]
                if best is None or node_score > best[0]:
                    best = (node_score, name)
            if best is not None:
                self._bind(pod, best[1])
            else:
                self._unschedulable(pod, scheduler.fit_error(len(nodes), failures))

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        self.pending.pop((meta["namespace"], meta["name"]), None)
        self.last_failure.pop(meta["uid"], None)

        def bind(o: Obj) -> None:
            o["spec"]["nodeName"] = node
            conditions = [
                c for c in o["status"].get("conditions") or [] if c["type"] != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now(),
                }
            )
            o["status"]["conditions"] = conditions

        bound = self.store.mutate(self.store.by_kind("Pod"), meta["namespace"], meta["name"], bind)
        self.recorder.emit(
            bound,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
        )

    def _unschedulable(self, pod: Obj, message: str) -> None:
        meta = pod["metadata"]
        previous = self.last_failure.get(meta["uid"])
        if previous is not None and previous[0] == message:
            return  # nothing changed for this pod: the recorder would not write again yet

        def mark(o: Obj) -> None:
            conditions = [
                c for c in o["status"].get("conditions") or [] if c["type"] != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now(),
                }
            )
            o["status"]["conditions"] = conditions

        updated = self.store.mutate(
            self.store.by_kind("Pod"), meta["namespace"], meta["name"], mark
        )
        event = self.recorder.emit(updated, "Warning", "FailedScheduling", message)
        self.last_failure[meta["uid"]] = (message, event)


class JobController:
    """batch/v1 Jobs: pods from the template until enough succeed, or too many fail."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = Recorder(store, "job-controller")
        self.counted: dict[str, set[str]] = {}  # job uid -> pod uids already counted
        self._dirty: set[tuple[str, str]] = set()
        self._deadlines: dict[str, asyncio.TimerHandle] = {}
        self.deadline_exceeded: set[str] = set()
        self.retry_seconds = 0.5  # after a refused pod create (the real one backs off from 1s)
        self.refused: dict[str, Obj] = {}  # job uid -> its last FailedCreate event
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if rt.kind == "Job" and rt.group == "batch":
            if kind == "DELETED":
                self.counted.pop(obj["metadata"]["uid"], None)
                handle = self._deadlines.pop(obj["metadata"]["uid"], None)
                if handle:
                    handle.cancel()
                return
            self._mark((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        elif rt.kind == "Pod":
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    self._mark((obj["metadata"]["namespace"], ref["name"]))

    def _mark(self, key: tuple[str, str]) -> None:
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._sync_all)
        self._dirty.add(key)

    def _sync_all(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for key in sorted(dirty):
            self.sync(*key)

    def _owned_pods(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.store.list(self.store.by_kind("Pod"), job["metadata"]["namespace"])
            if any(
                r.get("uid") == uid and r.get("controller")
                for r in p["metadata"].get("ownerReferences") or []
            )
        ]

    def sync(self, namespace: str, name: str) -> None:
        jobs_rt, pods_rt = self.store.by_kind("Job", "batch"), self.store.by_kind("Pod")
        job = self.store.peek(jobs_rt, namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        spec, status = job["spec"], job.get("status") or {}
        if any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True"
            for c in status.get("conditions") or []
        ):
            return
        uid = job["metadata"]["uid"]
        counted = self.counted.setdefault(uid, set())
        pods = self._owned_pods(job)
        succeeded, failed = status.get("succeeded", 0), status.get("failed", 0)
        for pod in pods:
            phase = pod["status"].get("phase")
            if phase in ("Succeeded", "Failed") and pod["metadata"]["uid"] not in counted:
                counted.add(pod["metadata"]["uid"])
                if phase == "Succeeded":
                    succeeded += 1
                else:
                    failed += 1
        active = [
            p
            for p in pods
            if p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        ready = sum(
            1
            for p in active
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []
            )
        )
        stamp = now()
        start = status.get("startTime")
        if not spec.get("suspend") and start is None:
            start = stamp
            if spec.get("activeDeadlineSeconds"):
                loop = asyncio.get_running_loop()
                self._deadlines[uid] = loop.call_later(
                    spec["activeDeadlineSeconds"], self._deadline, namespace, name, uid
                )
        completions = spec.get("completions", 1)
        finished: tuple[str, str, str] | None = None
        if succeeded >= completions:
            finished = ("Complete", "", "")
        elif failed > spec.get("backoffLimit", 6):
            finished = (
                "Failed",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
        elif uid in self.deadline_exceeded:
            finished = (
                "Failed",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            )
        if finished is None and not spec.get("suspend"):
            wanted = min(spec.get("parallelism", 1), completions - succeeded)
            for _ in range(wanted - len(active)):
                if not self._create_pod(job):
                    break
            active = self._owned_active(job)
        elif finished is not None:
            for pod in active:
                self.store.remove(pods_rt, pod) if not pod["spec"].get(
                    "nodeName"
                ) else self.store.mutate(
                    pods_rt,
                    namespace,
                    pod["metadata"]["name"],
                    lambda o: o["metadata"].update(
                        deletionTimestamp=stamp, deletionGracePeriodSeconds=0
                    ),
                )
                self.recorder.emit(
                    job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}"
                )
            active = []

        # spec.suspend: condition Suspended (JobSuspended / JobResumed), as the Job
        # controller writes it, with its Suspended / Resumed events.
        suspended = bool(spec.get("suspend"))
        was = next((c for c in status.get("conditions") or [] if c["type"] == "Suspended"), None)
        flip: tuple[str, str, str, str] | None = None
        if suspended and (was is None or was["status"] != "True"):
            flip = ("True", "JobSuspended", "Job suspended", "Suspended")
        elif not suspended and was is not None and was["status"] == "True":
            flip = ("False", "JobResumed", "Job resumed", "Resumed")

        def update(o: Obj) -> None:
            s = o.setdefault("status", {})
            if start:
                s["startTime"] = start
            if flip is not None:
                s["conditions"] = [
                    *(c for c in s.get("conditions") or [] if c["type"] != "Suspended"),
                    {
                        "type": "Suspended",
                        "status": flip[0],
                        "reason": flip[1],
                        "message": flip[2],
                        "lastProbeTime": stamp,
                        "lastTransitionTime": stamp,
                    },
                ]
            for field_name, value in (
                ("active", len(active)),
                ("succeeded", succeeded),
                ("failed", failed),
            ):
                if value:
                    s[field_name] = value
                else:
                    s.pop(field_name, None)
            s["ready"] = 0 if finished else ready
            s["terminating"] = 0
            s["uncountedTerminatedPods"] = {}
            if finished:
                kind, reason, message = finished
                condition: Obj = {
                    "type": kind,
                    "status": "True",
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
                if reason:
                    condition.update(reason=reason, message=message)
                s["conditions"] = [*(s.get("conditions") or []), condition]
                if kind == "Complete":
                    s["completionTime"] = stamp

        self.store.mutate(jobs_rt, namespace, name, update)
        if flip is not None:
            self.recorder.emit(job, "Normal", flip[3], flip[2])
        if finished:
            kind, reason, message = finished
            if kind == "Complete":
                self.recorder.emit(job, "Normal", "Completed", "Job completed")
            else:
                self.recorder.emit(job, "Warning", reason, message)

    def _owned_active(self, job: Obj) -> list[Obj]:
        return [
            p
            for p in self._owned_pods(job)
            if p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]

    def _create_pod(self, job: Obj) -> bool:
        import copy

        template = copy.deepcopy(job["spec"]["template"])
        meta = template.get("metadata") or {}
        pod = {
            "metadata": {
                "generateName": f"{job['metadata']['name']}-",
                "labels": meta.get("labels") or {},
                "annotations": meta.get("annotations") or {},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        from . import defaults

        pods_rt = self.store.by_kind("Pod")
        pod["metadata"]["namespace"] = job["metadata"]["namespace"]
        defaults.pod_defaults(pod)
        try:
            admission.Admission(self.store).admit(pods_rt, pod)
        except APIError as exc:
            # The controller's create is refused: an event, and another try a little later.
            message = f"Error creating: {exc.message}"
            uid = job["metadata"]["uid"]
            previous = self.refused.get(uid)
            if previous is not None and previous["message"] == message:
                self.refused[uid] = self.recorder.repeat(previous)
            else:
                self.refused[uid] = self.recorder.emit(job, "Warning", "FailedCreate", message)
            key = (job["metadata"]["namespace"], job["metadata"]["name"])
            asyncio.get_running_loop().call_later(self.retry_seconds, self._mark, key)
            return False
        created = self.store.create(pods_rt, pod, job["metadata"]["namespace"])
        self.recorder.emit(
            job, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
        )
        return True

    def _deadline(self, namespace: str, name: str, uid: str) -> None:
        rt = self.store.by_kind("Job", "batch")
        job = self.store.peek(rt, namespace, name)
        if job is None or job["metadata"]["uid"] != uid:
            return
        self.deadline_exceeded.add(uid)
        self.sync(namespace, name)


class GarbageCollector:
    """Deletes dependents of deleted owners (background), and finishes foreground deletions."""

    def __init__(self, store: Store, api: APIServer) -> None:
        self.store = store
        self.api = api
        store.listeners.append(self._on_change)

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, Obj]]:
        found = []
        for rt in list(self.store.types.values()):
            if not rt.namespaced or rt.kind == "Event":
                continue
            for obj in self.store.list(rt):
                if any(
                    r.get("uid") == owner_uid for r in obj["metadata"].get("ownerReferences") or []
                ):
                    found.append((rt, obj))
        return found

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if rt.kind == "Event":
            return
        loop = asyncio.get_running_loop()
        meta = obj["metadata"]
        if kind == "DELETED":
            loop.call_soon(self._collect, meta["uid"])
            for ref in meta.get("ownerReferences") or []:
                loop.call_soon(self._finish_foreground, ref.get("uid"))
        elif "foregroundDeletion" in (meta.get("finalizers") or []) and meta.get(
            "deletionTimestamp"
        ):
            loop.call_soon(self._foreground, rt, meta.get("namespace", ""), meta["name"])
        if kind != "DELETED" and meta.get("ownerReferences"):
            loop.call_soon(self._verify_owners, rt, meta.get("namespace", ""), meta["name"])

    def _owner_state(self, ref: dict[str, Any], namespace: str) -> bool | None:
        """True if the owner with this UID exists, False if it does not, None if its kind is
        not served (the real collector cannot resolve it either, and leaves the dependent)."""
        group = ref.get("apiVersion", "").rpartition("/")[0]
        try:
            owner_rt = self.store.by_kind(ref.get("kind", ""), group)
        except KeyError:
            return None
        owner = self.store.peek(owner_rt, namespace, ref.get("name", ""))
        return owner is not None and owner["metadata"]["uid"] == ref.get("uid")

    def _verify_owners(self, rt: ResourceType, namespace: str, name: str) -> None:
        """A dependent whose owners are all gone (no object with that name *and* UID) is
        deleted; dangling references beside a live owner are removed."""
        if rt.key not in self.store.types:
            return
        obj = self.store.peek(rt, namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        refs = obj["metadata"].get("ownerReferences") or []
        states = [self._owner_state(r, namespace) for r in refs]
        if not refs or all(s is not False for s in states):
            return
        if all(s is False for s in states):
            with contextlib.suppress(Exception):
                self.api.delete(rt, namespace, name, {"propagationPolicy": "Background"})
            return
        live = [r for r, s in zip(refs, states, strict=True) if s is not False]
        self.store.mutate(rt, namespace, name, lambda o: o["metadata"].update(ownerReferences=live))

    def _collect(self, owner_uid: str) -> None:
        for rt, obj in self._dependents(owner_uid):
            meta = obj["metadata"]
            remaining = [
                r
                for r in meta.get("ownerReferences") or []
                if r.get("uid") != owner_uid and self._exists(r)
            ]
            if remaining:
                continue
            with contextlib.suppress(Exception):
                self.api.delete(
                    rt, meta.get("namespace", ""), meta["name"], {"propagationPolicy": "Background"}
                )

    def _exists(self, ref: dict[str, Any]) -> bool:
        return any(
            o["metadata"]["uid"] == ref.get("uid")
            for rt in self.store.types.values()
            if rt.kind == ref.get("kind")
            for o in self.store.list(rt)
        )

    def _foreground(self, rt: ResourceType, namespace: str, name: str) -> None:
        owner = self.store.peek(rt, namespace, name)
        if owner is None:
            return
        dependents = self._dependents(owner["metadata"]["uid"])
        for dep_rt, dep in dependents:
            if not dep["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(Exception):
                    self.api.delete(
                        dep_rt,
                        dep["metadata"].get("namespace", ""),
                        dep["metadata"]["name"],
                        {"propagationPolicy": "Foreground"},
                    )
        self._finish_foreground(owner["metadata"]["uid"])

    def _finish_foreground(self, owner_uid: str | None) -> None:
        if owner_uid is None:
            return
        for rt in list(self.store.types.values()):
            for obj in self.store.list(rt):
                meta = obj["metadata"]
                if meta["uid"] != owner_uid or "foregroundDeletion" not in (
                    meta.get("finalizers") or []
                ):
                    continue
                if not self._dependents(owner_uid):
                    self.store.mutate(
                        rt,
                        meta.get("namespace", ""),
                        meta["name"],
                        lambda o: o["metadata"].update(
                            finalizers=[
                                f for f in o["metadata"]["finalizers"] if f != "foregroundDeletion"
                            ]
                        ),
                    )
                return


class NamespaceController:
    """Empties a Terminating namespace, then removes it."""

    def __init__(self, store: Store, api: APIServer) -> None:
        self.store = store
        self.api = api
        self.terminating: set[str] = set()
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        loop = asyncio.get_running_loop()
        if (
            rt.kind == "Namespace"
            and kind == "MODIFIED"
            and obj["status"].get("phase") == "Terminating"
        ):
            self.terminating.add(obj["metadata"]["name"])
            loop.call_soon(self._sweep, obj["metadata"]["name"])
        elif (
            kind == "DELETED"
            and rt.namespaced
            and obj["metadata"].get("namespace") in self.terminating
        ):
            loop.call_soon(self._sweep, obj["metadata"]["namespace"])

    def _sweep(self, namespace: str) -> None:
        ns_rt = self.store.by_kind("Namespace")
        if self.store.peek(ns_rt, "", namespace) is None:
            self.terminating.discard(namespace)
            return
        left = 0
        for rt in list(self.store.types.values()):
            if not rt.namespaced:
                continue
            for obj in self.store.list(rt, namespace):
                left += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(Exception):
                        self.api.delete(
                            rt,
                            namespace,
                            obj["metadata"]["name"],
                            {"propagationPolicy": "Background"},
                        )
        if left == 0 or not any(
            self.store.list(rt, namespace) for rt in self.store.types.values() if rt.namespaced
        ):
            ns = self.store.peek(ns_rt, "", namespace)
            if ns is not None:
                self.terminating.discard(namespace)
                self.store.remove(ns_rt, ns)


class ServiceAccountController:
    """Gives every new namespace its ``default`` ServiceAccount, ``delay`` seconds later.

    On a real cluster the token controller needs a moment after the namespace appears; a pod
    created in between is refused (403 ``serviceaccount "default" not found``).
    """

    def __init__(self, store: Store, delay: float = 0.05) -> None:
        self.store = store
        self.delay = delay
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if rt.kind == "Namespace" and kind == "ADDED":
            name = obj["metadata"]["name"]
            asyncio.get_running_loop().call_later(self.delay, self.ensure, name)
        elif (
            rt.kind == "ServiceAccount"
            and kind == "DELETED"
            and obj["metadata"]["name"] == "default"
        ):  # the controller puts it back
            asyncio.get_running_loop().call_later(
                self.delay, self.ensure, obj["metadata"]["namespace"]
            )

    def ensure(self, namespace: str) -> None:
        ns = self.store.peek(self.store.by_kind("Namespace"), "", namespace)
        if ns is None or ns["status"].get("phase") == "Terminating":
            return
        rt = self.store.by_kind("ServiceAccount")
        if self.store.peek(rt, namespace, "default") is None:
            self.store.create(rt, {"metadata": {"name": "default"}}, namespace)


class QuotaController:
    """Keeps each ResourceQuota's ``status.hard`` and ``status.used`` current."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirty: set[str] = set()
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if not rt.namespaced or rt.kind == "Event":
            return
        if (
            rt.kind == "ResourceQuota"
            and kind == "MODIFIED"
            and old is not None
            and old.get("spec") == obj.get("spec")
        ):
            return  # our own status write
        namespace = obj["metadata"]["namespace"]
        if not self.store.list(self.store.by_kind("ResourceQuota"), namespace):
            return
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._sync_all)
        self._dirty.add(namespace)

    def _sync_all(self) -> None:
        dirty, self._dirty = self._dirty, set()
        rt = self.store.by_kind("ResourceQuota")
        for namespace in sorted(dirty):
            for quota in self.store.list(rt, namespace):
                hard = dict((quota.get("spec") or {}).get("hard") or {})
                used = admission.namespace_usage(self.store, namespace, hard)
                status = {
                    "hard": hard,
                    "used": {k: admission.format_quantity(v) for k, v in used.items()},
                }
                self.store.mutate(
                    rt, namespace, quota["metadata"]["name"], lambda o, s=status: o.update(status=s)
                )
