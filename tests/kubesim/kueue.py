"""Kueue (kueue.x-k8s.io/v1beta1), reduced to what gpuhub relies on: quota-based admission
of suspended jobs in FIFO order, and the visibility API's pending workloads.

Real Kueue's rules, as its documentation states them:

* A job (batch/v1 Job, Kubeflow PyTorchJob/TFJob) with the ``kueue.x-k8s.io/queue-name``
  label gets a **Workload** in its namespace ("Run A Kubernetes Job", kueue.sigs.k8s.io/docs/
  tasks/run/jobs/; concepts/workload/): named ``<kind>-<job>-<hash>``, owned by the job
  (controller ownerReference, so it goes with the job), labelled ``kueue.x-k8s.io/job-uid``,
  one pod set per replica type (``main`` for a Job; ``master``, ``worker``, ... for the
  Kubeflow kinds) with the pod template and its replica count. Kueue's webhook suspends
  such a job on create; kubesim has no webhooks, so a running job without a Workload is
  suspended by the controller instead (the job reconciler's "stop" path).
* The **LocalQueue** named by the label points to a **ClusterQueue** (concepts/local_queue/);
  the ClusterQueue's ``resourceGroups[].flavors[].resources[].nominalQuota`` is the quota per
  ResourceFlavor and resource (concepts/cluster_queue/). A workload fits when, for every
  resource its pods request (requests, else limits; times the pod set's count), some flavor
  of the resource's group has that much nominal quota left over what admitted workloads use
  and whose ``nodeLabels`` agree with the pod's ``nodeSelector``. A resource no group covers
  never fits (``resource X unavailable in ClusterQueue``).
* **Queueing** (concepts/cluster_queue/#queueing-strategy): oldest first (creation time);
  ``StrictFIFO``: a head that does not fit blocks everything behind it; ``BestEffortFIFO``
  (the default): workloads behind it that fit are admitted.
* **Admission** (concepts/workload/#workload-status): ``status.admission`` (clusterQueue,
  podSetAssignments with flavors, resourceUsage, count), conditions ``QuotaReserved`` and
  ``Admitted`` True; the job is resumed (``spec.suspend`` / ``spec.runPolicy.suspend``
  false) with the flavors' ``nodeLabels`` added to its pod templates' nodeSelector. A
  workload tried and not fitting has ``QuotaReserved=False``, reason ``Pending`` and the
  flavor assigner's message (``couldn't assign flavors to pod set main: insufficient unused
  quota for nvidia.com/gpu in flavor a100, 1 more needed``); a missing LocalQueue or
  ClusterQueue, or a namespace the ClusterQueue's ``namespaceSelector`` does not select
  (null selects none, ``{}`` all), is reason ``Inadmissible``.
* **Release**: a finished job's Workload gets ``Finished=True`` (``JobFinished``) and its
  quota is free; a deleted job's Workload is garbage-collected through its ownerReference.
* **Visibility** (tasks/manage/monitor_pending_workloads/pending_workloads_on_demand/):
  ``GET /apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/NS/localqueues/LQ/pendingworkloads``
  and ``.../clusterqueues/CQ/pendingworkloads`` answer a ``PendingWorkloadsSummary`` whose
  items carry ``positionInClusterQueue`` and ``positionInLocalQueue`` (0 = next), with
  ``limit`` (default 1000) and ``offset``.

Not simulated: priorities and preemption, cohorts and borrowing, admission checks, partial
admission, waitForPodsReady, fair sharing, topology-aware scheduling, flavor taints and
tolerations, stop policies, LocalQueue defaulting; workload names use a hash of kubesim's own
making. See the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
from fractions import Fraction
from typing import Any

from aiohttp import web

from .errors import APIError
from .events import Recorder
from .quantity import parse_quantity
from .resources import ResourceType
from .store import Obj, Store, now

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

# kind -> (group, api version, replica specs key or None for a batch Job)
JOB_KINDS = {
    "Job": ("batch", "batch/v1", None),
    "PyTorchJob": ("kubeflow.org", "kubeflow.org/v1", "pytorchReplicaSpecs"),
    "TFJob": ("kubeflow.org", "kubeflow.org/v1", "tfReplicaSpecs"),
}


def _format(value: Fraction) -> str:
    """A quantity as Kueue prints an amount: whole numbers plainly, else milli-units."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{round(value * 1000)}m"


def pod_requests(template: Obj) -> dict[str, Fraction]:
    """One pod's requests as Kueue counts them: requests, else limits; containers summed,
    the max with each init container."""
    spec = template.get("spec") or {}

    def of(container: Obj) -> dict[str, Fraction]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: parse_quantity(v) for k, v in merged.items()}

    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, Fraction(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, Fraction(0)), value)
    return total


def _selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector; None selects nothing (Kueue's namespaceSelector rule)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(obj: Obj, kind: str) -> bool:
    cond = _condition(obj, kind)
    return bool(cond and cond.get("status") == "True")


def _set_condition(
    conditions: list[Obj], type_: str, status: str, reason: str, message: str
) -> list[Obj]:
    """Replace one condition; lastTransitionTime changes only when the status does."""
    out = [c for c in conditions if c.get("type") != type_]
    old = next((c for c in conditions if c.get("type") == type_), None)
    stamp = old["lastTransitionTime"] if old and old.get("status") == status else now()
    out.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": stamp,
        }
    )
    return out


class Kueue:
    """Kueue's job reconcilers, scheduler and visibility server over kubesim's store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = Recorder(store, "kueue-admission")
        self.job_recorder = Recorder(store, "kueue-job-controller")
        self.visibility = True  # the visibility APIService is installed and answers
        self._scheduled = False
        self._syncing = False
        store.listeners.append(self._on_change)

    # -- plumbing -------------------------------------------------------------------------------
    def _rt(self, kind: str, group: str = GROUP) -> ResourceType | None:
        try:
            return self.store.by_kind(kind, group)
        except KeyError:
            return None

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if self._syncing or rt.kind == "Event":
            return
        relevant = rt.group == GROUP or (rt.kind in JOB_KINDS and rt.group == JOB_KINDS[rt.kind][0])
        if rt.kind == "Namespace":
            relevant = True
        if relevant:
            self._kick()

    def _kick(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            with contextlib.suppress(RuntimeError):  # no loop: called from set-up code
                asyncio.get_running_loop().call_soon(self.sync)
                return
            self._scheduled = False

    def sync(self) -> None:
        """One pass: reconcile jobs and their Workloads, then admit what fits."""
        self._scheduled = False
        if self._rt("Workload") is None:
            return  # Kueue's CRDs are not installed
        self._syncing = True
        try:
            self._reconcile_jobs()
            self._schedule()
            self._update_queue_status()
        finally:
            self._syncing = False

    # -- the job reconcilers ---------------------------------------------------------------------
    def _jobs(self) -> list[tuple[ResourceType, Obj]]:
        found = []
        for kind, (group, _, _) in JOB_KINDS.items():
            rt = self._rt(kind, group)
            if rt is None:
                continue
            for obj in self.store.list(rt):
                if (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL):
                    found.append((rt, obj))
        return found

    def _workloads(self) -> list[Obj]:
        rt = self._rt("Workload")
        return self.store.list(rt) if rt else []

    @staticmethod
    def _suspended(job: Obj) -> bool:
        if job["kind"] == "Job":
            return bool(job["spec"].get("suspend"))
        return bool((job["spec"].get("runPolicy") or {}).get("suspend"))

    @staticmethod
    def _finished(job: Obj) -> tuple[bool, bool]:
        """(finished, succeeded)"""
        done = ("Complete", "Failed") if job["kind"] == "Job" else ("Succeeded", "Failed")
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond.get("type") in done and cond.get("status") == "True":
                return True, cond["type"] != "Failed"
        return False, False

    @staticmethod
    def _pod_sets(job: Obj) -> list[Obj]:
        specs_key = JOB_KINDS[job["kind"]][2]
        if specs_key is None:
            parallelism = int(job["spec"].get("parallelism", 1))
            return [{"name": "main", "count": parallelism, "template": job["spec"]["template"]}]
        specs = job["spec"].get(specs_key) or {}
        return [
            {
                "name": rtype.lower(),
                "count": int(spec.get("replicas", 1)),
                "template": copy.deepcopy(spec.get("template") or {}),
            }
            for rtype, spec in specs.items()
        ]

    @staticmethod
    def workload_name(job: Obj) -> str:
        meta = job["metadata"]
        digest = hashlib.sha1(
            f"{job['kind']}/{meta['name']}/{meta['uid']}".encode(), usedforsecurity=False
        ).hexdigest()[:5]
        prefix = f"{job['kind'].lower()}-{meta['name']}"[: 253 - 6]
        return f"{prefix}-{digest}"

    def _reconcile_jobs(self) -> None:
        wl_rt = self._rt("Workload")
        assert wl_rt is not None
        by_owner = {
            (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL): w for w in self._workloads()
        }
        for rt, job in self._jobs():
            meta = job["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            workload = by_owner.get(meta["uid"])
            finished, succeeded = self._finished(job)
            if workload is None:
                if finished:
                    continue
                if not self._suspended(job):
                    # Kueue's webhook would have suspended it at create; its reconciler stops
                    # a job that runs without being admitted.
                    self.store.mutate(rt, meta["namespace"], meta["name"], _suspend)
                self._create_workload(wl_rt, job)
                continue
            if finished and not _true(workload, "Finished"):
                message = "Job finished successfully" if succeeded else "Job failed"
                self._mutate_status(
                    workload,
                    lambda c, m=message: _set_condition(c, "Finished", "True", "JobFinished", m),
                )

    def _create_workload(self, wl_rt: ResourceType, job: Obj) -> None:
        meta = job["metadata"]
        _, api_version, _ = JOB_KINDS[job["kind"]]
        workload = {
            "metadata": {
                "name": self.workload_name(job),
                "namespace": meta["namespace"],
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": api_version,
                        "kind": job["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "active": True,
                "queueName": meta["labels"][QUEUE_LABEL],
                "podSets": self._pod_sets(job),
                "priority": 0,
                "priorityClassSource": "",
            },
        }
        created = self.store.create(wl_rt, workload, meta["namespace"])
        self.job_recorder.emit(
            job,
            "Normal",
            "CreatedWorkload",
            f"Created Workload: {meta['namespace']}/{created['metadata']['name']}",
        )

    def _mutate_status(self, workload: Obj, change: Any, admission: Obj | None = None) -> Obj:
        rt = self._rt("Workload")
        assert rt is not None

        def update(o: Obj) -> None:
            status = o.setdefault("status", {})
            status["conditions"] = change(list(status.get("conditions") or []))
            if admission is not None:
                status["admission"] = admission

        return self.store.mutate(
            rt, workload["metadata"]["namespace"], workload["metadata"]["name"], update
        )

    # -- the scheduler ----------------------------------------------------------------------------
    def _active(self, workload: Obj) -> bool:
        return (
            not workload["metadata"].get("deletionTimestamp")
            and workload["spec"].get("active", True)
            and not _true(workload, "Finished")
        )

    def pending(self) -> dict[str, list[Obj]]:
        """ClusterQueue name -> its pending workloads, in queue order (oldest first)."""
        lq_rt = self._rt("LocalQueue")
        out: dict[str, list[Obj]] = {}
        for workload in self._workloads():
            if not self._active(workload) or _true(workload, "QuotaReserved"):
                continue
            local = (
                self.store.peek(
                    lq_rt, workload["metadata"]["namespace"], workload["spec"]["queueName"]
                )
                if lq_rt
                else None
            )
            if local is None:
                continue
            out.setdefault(local["spec"].get("clusterQueue", ""), []).append(workload)
        for items in out.values():
            items.sort(
                key=lambda w: (
                    w["metadata"]["creationTimestamp"],
                    int(w["metadata"]["resourceVersion"]),
                )
            )
        return out

    def _usage(self, cq_name: str) -> dict[tuple[str, str], Fraction]:
        used: dict[tuple[str, str], Fraction] = {}
        for workload in self._workloads():
            admission = (workload.get("status") or {}).get("admission") or {}
            if admission.get("clusterQueue") != cq_name or not self._active(workload):
                continue
            if not _true(workload, "QuotaReserved"):
                continue
            for assignment in admission.get("podSetAssignments") or []:
                for resource, flavor in (assignment.get("flavors") or {}).items():
                    amount = parse_quantity(
                        (assignment.get("resourceUsage") or {}).get(resource, 0)
                    )
                    used[(flavor, resource)] = used.get((flavor, resource), Fraction(0)) + amount
        return used

    def _schedule(self) -> None:
        cq_rt, lq_rt, ns_rt = (
            self._rt("ClusterQueue"),
            self._rt("LocalQueue"),
            self._rt("Namespace", ""),
        )
        for workload in sorted(self._workloads(), key=lambda w: w["metadata"]["creationTimestamp"]):
            if not self._active(workload) or _true(workload, "QuotaReserved"):
                continue
            namespace = workload["metadata"]["namespace"]
            queue = workload["spec"].get("queueName", "")
            local = self.store.peek(lq_rt, namespace, queue) if lq_rt else None
            if local is None:
                self._inadmissible(workload, f"LocalQueue {queue} doesn't exist")
                continue
            cq_name = local["spec"].get("clusterQueue", "")
            cluster = self.store.peek(cq_rt, "", cq_name) if cq_rt else None
            if cluster is None:
                self._inadmissible(workload, f"ClusterQueue {cq_name} doesn't exist")
                continue
            ns = self.store.peek(ns_rt, "", namespace) if ns_rt else None
            labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
            if not _selector_matches(cluster["spec"].get("namespaceSelector"), labels):
                self._inadmissible(
                    workload, "Workload namespace doesn't match ClusterQueue selector"
                )
        for cq_name, queue in self.pending().items():
            cluster = self.store.peek(cq_rt, "", cq_name) if cq_rt else None
            if cluster is None:
                continue
            strict = cluster["spec"].get("queueingStrategy") == "StrictFIFO"
            used = self._usage(cq_name)
            for workload in queue:
                ns = (
                    self.store.peek(ns_rt, "", workload["metadata"]["namespace"]) if ns_rt else None
                )
                labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
                if not _selector_matches(cluster["spec"].get("namespaceSelector"), labels):
                    continue
                assignment, message = self._assign(cluster, workload, used)
                if assignment is None:
                    self._mutate_status(
                        workload,
                        lambda c, m=message: _set_condition(
                            c, "QuotaReserved", "False", "Pending", m
                        ),
                    )
                    if strict:
                        break  # the head blocks the line
                    continue
                for ps in assignment["podSetAssignments"]:
                    for resource, flavor in ps["flavors"].items():
                        key = (flavor, resource)
                        used[key] = used.get(key, Fraction(0)) + parse_quantity(
                            ps["resourceUsage"][resource]
                        )
                self._admit(workload, assignment)

    def _inadmissible(self, workload: Obj, message: str) -> None:
        self._mutate_status(
            workload, lambda c: _set_condition(c, "QuotaReserved", "False", "Inadmissible", message)
        )

    def _assign(
        self, cluster: Obj, workload: Obj, used: dict[tuple[str, str], Fraction]
    ) -> tuple[Obj | None, str]:
        """The flavor assigner: an admission, or None and Kueue's message why not."""
        groups = cluster["spec"].get("resourceGroups") or []
        flavors_rt = self._rt("ResourceFlavor")
        assumed: dict[tuple[str, str], Fraction] = {}
        assignments = []
        problems = []
        for pod_set in workload["spec"]["podSets"]:
            count = int(pod_set.get("count", 1))
            per_pod = pod_requests(pod_set.get("template") or {})
            total = {r: v * count for r, v in per_pod.items() if v}
            selector = ((pod_set.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
            chosen: dict[str, str] = {}
            reasons: list[str] = []
            for resource, amount in sorted(total.items()):
                group = next(
                    (g for g in groups if resource in (g.get("coveredResources") or [])), None
                )
                if group is None:
                    reasons.append(f"resource {resource} unavailable in ClusterQueue")
                    continue
                found = None
                for flavor in group.get("flavors") or []:
                    name = flavor["name"]
                    rf = self.store.peek(flavors_rt, "", name) if flavors_rt else None
                    if rf is None:
                        reasons.append(f"flavor {name} not found")
                        continue
                    node_labels = (rf.get("spec") or {}).get("nodeLabels") or {}
                    if any(k in node_labels and node_labels[k] != v for k, v in selector.items()):
                        reasons.append(f"flavor {name} doesn't match node affinity")
                        continue
                    quota = next(
                        (r for r in flavor.get("resources") or [] if r.get("name") == resource),
                        None,
                    )
                    nominal = parse_quantity(quota["nominalQuota"]) if quota else Fraction(0)
                    key = (name, resource)
                    wanted = assumed.get(key, Fraction(0)) + amount
                    available = nominal - used.get(key, Fraction(0))
                    if wanted > nominal:
                        reasons.append(
                            f"insufficient quota for {resource} in flavor {name}, previously "
                            f"considered podsets requests ({_format(assumed.get(key, Fraction(0)))}) "
                            f"+ current podset request ({_format(amount)}) > maximum capacity "
                            f"({_format(nominal)})"
                        )
                        continue
                    if wanted > available:
                        reasons.append(
                            f"insufficient unused quota for {resource} in flavor {name}, "
                            f"{_format(wanted - available)} more needed"
                        )
                        continue
                    found = name
                    break
                if found is not None:
                    chosen[resource] = found
                    assumed[(found, resource)] = (
                        assumed.get((found, resource), Fraction(0)) + amount
                    )
            if reasons and len(chosen) < len(total):
                problems.append(
                    f"couldn't assign flavors to pod set {pod_set.get('name', 'main')}: "
                    + ", ".join(sorted(reasons))
                )
                continue
            assignments.append(
                {
                    "name": pod_set.get("name", "main"),
                    "flavors": chosen,
                    "resourceUsage": {r: _format(total[r]) for r in chosen},
                    "count": count,
                }
            )
        if problems:
            return None, "; ".join(problems)
        return {"clusterQueue": cluster["metadata"]["name"], "podSetAssignments": assignments}, ""

    def _admit(self, workload: Obj, admission: Obj) -> None:
        cq = admission["clusterQueue"]

        def conditions(c: list[Obj]) -> list[Obj]:
            c = _set_condition(
                c, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}"
            )
            return _set_condition(c, "Admitted", "True", "Admitted", "The workload is admitted")

        admitted = self._mutate_status(workload, conditions, admission)
        self.recorder.emit(
            admitted,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}, wait time since queued was 0s",
        )
        self.recorder.emit(
            admitted,
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {cq}, wait time since reservation was 0s",
        )
        owner = next(
            (r for r in workload["metadata"].get("ownerReferences") or [] if r.get("controller")),
            None,
        )
        if owner is None or owner["kind"] not in JOB_KINDS:
            return
        rt = self._rt(owner["kind"], JOB_KINDS[owner["kind"]][0])
        job = self.store.peek(rt, workload["metadata"]["namespace"], owner["name"]) if rt else None
        if rt is None or job is None or job["metadata"]["uid"] != owner["uid"]:
            return
        flavors_rt = self._rt("ResourceFlavor")
        node_labels: dict[str, dict[str, str]] = {}
        for ps in admission["podSetAssignments"]:
            labels: dict[str, str] = {}
            for flavor in set(ps["flavors"].values()):
                rf = self.store.peek(flavors_rt, "", flavor) if flavors_rt else None
                labels.update(((rf or {}).get("spec") or {}).get("nodeLabels") or {})
            node_labels[ps["name"]] = labels

        def resume(o: Obj) -> None:
            specs_key = JOB_KINDS[o["kind"]][2]
            if specs_key is None:
                o["spec"]["suspend"] = False
                templates = {"main": o["spec"]["template"]}
            else:
                o["spec"].setdefault("runPolicy", {})["suspend"] = False
                templates = {
                    t.lower(): s.setdefault("template", {}) for t, s in o["spec"][specs_key].items()
                }
            for name, template in templates.items():
                if node_labels.get(name):
                    spec = template.setdefault("spec", {})
                    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **node_labels[name]}

        resumed = self.store.mutate(
            rt, job["metadata"]["namespace"], job["metadata"]["name"], resume
        )
        self.job_recorder.emit(resumed, "Normal", "Started", f"Admitted by clusterQueue {cq}")

    def _update_queue_status(self) -> None:
        lq_rt, cq_rt = self._rt("LocalQueue"), self._rt("ClusterQueue")
        counts: dict[tuple[str, str], list[int]] = {}
        cq_counts: dict[str, list[int]] = {}
        for workload in self._workloads():
            if not self._active(workload):
                continue
            key = (workload["metadata"]["namespace"], workload["spec"].get("queueName", ""))
            index = 1 if _true(workload, "Admitted") else 0
            counts.setdefault(key, [0, 0])[index] += 1
            local = self.store.peek(lq_rt, *key) if lq_rt else None
            if local is not None:
                cq_counts.setdefault(local["spec"].get("clusterQueue", ""), [0, 0])[index] += 1
        for rt, objects, keyof, table in (
            (
                lq_rt,
                self.store.list(lq_rt) if lq_rt else [],
                lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]),
                counts,
            ),
            (
                cq_rt,
                self.store.list(cq_rt) if cq_rt else [],
                lambda o: o["metadata"]["name"],
                cq_counts,
            ),
        ):
            for obj in objects:
                pending, admitted = table.get(keyof(obj), [0, 0])  # type: ignore[call-overload]

                def update(o: Obj, p: int = pending, a: int = admitted) -> None:
                    status = o.setdefault("status", {})
                    status.update(pendingWorkloads=p, admittedWorkloads=a, reservingWorkloads=a)

                assert rt is not None
                self.store.mutate(
                    rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], update
                )

    # -- the visibility API -------------------------------------------------------------------------
    def visibility_request(self, request: web.Request, parts: list[str]) -> web.Response:
        """``/apis/visibility.kueue.x-k8s.io/v1beta1/...``: discovery and pendingworkloads."""
        import json

        def answer(body: Obj) -> web.Response:
            return web.Response(text=json.dumps(body), content_type="application/json")

        missing = APIError(404, "NotFound", "the server could not find the requested resource", {})
        if not self.visibility or self._rt("Workload") is None:
            raise missing
        if len(parts) == 2:
            return answer(
                {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": VISIBILITY_GROUP,
                    "versions": [
                        {"groupVersion": f"{VISIBILITY_GROUP}/{VERSION}", "version": VERSION}
                    ],
                    "preferredVersion": {
                        "groupVersion": f"{VISIBILITY_GROUP}/{VERSION}",
                        "version": VERSION,
                    },
                }
            )
        if parts[2] != VERSION:
            raise missing
        rest = parts[3:]
        if not rest:
            return answer(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{VISIBILITY_GROUP}/{VERSION}",
                    "resources": [
                        {
                            "name": "clusterqueues",
                            "singularName": "",
                            "namespaced": False,
                            "kind": "ClusterQueue",
                            "verbs": ["get"],
                        },
                        {
                            "name": "clusterqueues/pendingworkloads",
                            "singularName": "",
                            "namespaced": False,
                            "kind": "PendingWorkloadsSummary",
                            "verbs": ["get"],
                        },
                        {
                            "name": "localqueues",
                            "singularName": "",
                            "namespaced": True,
                            "kind": "LocalQueue",
                            "verbs": ["get"],
                        },
                        {
                            "name": "localqueues/pendingworkloads",
                            "singularName": "",
                            "namespaced": True,
                            "kind": "PendingWorkloadsSummary",
                            "verbs": ["get"],
                        },
                    ],
                }
            )
        if request.method != "GET":
            raise APIError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
                {},
            )
        try:
            limit = int(request.query.get("limit", "1000"))
            offset = int(request.query.get("offset", "0"))
        except ValueError:
            raise APIError(400, "BadRequest", "limit and offset must be integers", {}) from None
        if (
            rest[0] == "namespaces"
            and len(rest) == 5
            and rest[2] == "localqueues"
            and rest[4] == "pendingworkloads"
        ):
            namespace, name = rest[1], rest[3]
            lq_rt = self._rt("LocalQueue")
            local = self.store.peek(lq_rt, namespace, name) if lq_rt else None
            if local is None:
                raise APIError(
                    404,
                    "NotFound",
                    f'localqueues.visibility.kueue.x-k8s.io "{name}" not found',
                    {"name": name, "group": VISIBILITY_GROUP, "kind": "localqueues"},
                )
            items = self._summary(local["spec"].get("clusterQueue", ""), (namespace, name))
        elif rest[0] == "clusterqueues" and len(rest) == 3 and rest[2] == "pendingworkloads":
            name = rest[1]
            cq_rt = self._rt("ClusterQueue")
            if cq_rt is None or self.store.peek(cq_rt, "", name) is None:
                raise APIError(
                    404,
                    "NotFound",
                    f'clusterqueues.visibility.kueue.x-k8s.io "{name}" not found',
                    {"name": name, "group": VISIBILITY_GROUP, "kind": "clusterqueues"},
                )
            items = self._summary(name, None)
        else:
            raise missing
        return answer(
            {
                "kind": "PendingWorkloadsSummary",
                "apiVersion": f"{VISIBILITY_GROUP}/{VERSION}",
                "metadata": {"creationTimestamp": None},
                "items": items[offset : offset + limit],
            }
        )

    def _summary(self, cq_name: str, local: tuple[str, str] | None) -> list[Obj]:
        queue = self.pending().get(cq_name, [])
        per_local: dict[tuple[str, str], int] = {}
        items = []
        for position, workload in enumerate(queue):
            key = (workload["metadata"]["namespace"], workload["spec"].get("queueName", ""))
            in_local = per_local.get(key, 0)
            per_local[key] = in_local + 1
            if local is not None and key != local:
                continue
            meta = workload["metadata"]
            items.append(
                {
                    "metadata": {
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "creationTimestamp": meta["creationTimestamp"],
                        "ownerReferences": [
                            {k: r[k] for k in ("apiVersion", "kind", "name", "uid")}
                            for r in meta.get("ownerReferences") or []
                        ],
                    },
                    "priority": workload["spec"].get("priority", 0),
                    "localQueueName": key[1],
                    "positionInClusterQueue": position,
                    "positionInLocalQueue": in_local,
                }
            )
        return items


def _suspend(obj: Obj) -> None:
    if obj["kind"] == "Job":
        obj["spec"]["suspend"] = True
    else:
        obj["spec"].setdefault("runPolicy", {})["suspend"] = True
