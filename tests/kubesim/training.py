"""A Kubeflow training-operator (v1 API) for PyTorchJob and TFJob, reduced to what clients see.

For each replica type and index it creates a pod named ``<job>-<type>-<index>`` with the
operator's labels and environment (PyTorch: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
``RANK``; TensorFlow: ``TF_CONFIG``), owned by the job, and writes the job's status the way the
operator does: ``Created``, ``Running``, then ``Succeeded`` or ``Failed`` conditions, with
``replicaStatuses`` and start/completion times.

Success: PyTorchJob when the Master succeeded (all Workers if there is no Master); TFJob when
the Chief succeeded (Worker 0 if there is no Chief). Any failed pod fails the job (container
restarts are not simulated). No per-pod Services, no elastic policy, no gang scheduling.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json

from . import defaults
from .admission import Admission
from .errors import APIError
from .events import Recorder
from .resources import ResourceType
from .store import Obj, Store, now

KINDS = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch", 23456, ("Master",)),
    "TFJob": ("tfReplicaSpecs", "tensorflow", 2222, ("Chief", "Master")),
}
JOB_NAME = "training.kubeflow.org/job-name"


class TrainingOperator:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = Recorder(store, "training-operator")
        self._dirty: set[tuple[str, str, str]] = set()
        store.listeners.append(self._on_change)

    def _on_change(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> None:
        if rt.group == "kubeflow.org" and rt.kind in KINDS and kind != "DELETED":
            self._mark((rt.kind, obj["metadata"]["namespace"], obj["metadata"]["name"]))
        elif rt.kind == "Pod":
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("kind") in KINDS and ref.get("controller"):
                    self._mark((ref["kind"], obj["metadata"]["namespace"], ref["name"]))

    def _mark(self, key: tuple[str, str, str]) -> None:
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._sync_all)
        self._dirty.add(key)

    def _sync_all(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for key in sorted(dirty):
            with contextlib.suppress(KeyError):  # the CRD went away
                self.sync(*key)

    def sync(self, kind: str, namespace: str, name: str) -> None:
        rt = self.store.by_kind(kind, "kubeflow.org")
        job = self.store.peek(rt, namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        if any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions):
            return
        specs_key, container_name, port, leaders = KINDS[kind]
        specs = job["spec"].get(specs_key) or {}
        pods_rt = self.store.by_kind("Pod")
        stamp = now()
        new_conditions = [dict(c) for c in conditions]
        if not any(c["type"] == "Created" for c in new_conditions):
            new_conditions.append(
                _condition("Created", f"{kind}Created", f"{kind} {name} is created.", stamp)
            )
        suspended = bool((job["spec"].get("runPolicy") or {}).get("suspend"))
        was = next((c for c in new_conditions if c["type"] == "Suspended"), None)
        if suspended:
            # runPolicy.suspend: no pods (the operator deletes running ones); condition
            # Suspended, as training-operator v1.7+ writes it.
            if was is None or was["status"] != "True":
                new_conditions = [c for c in new_conditions if c["type"] != "Suspended"]
                new_conditions.append(
                    _condition(
                        "Suspended",
                        f"{kind}Suspended",
                        f"{kind} {name} is suspended.",
                        stamp,
                    )
                )

                def suspend(o: Obj) -> None:
                    o.setdefault("status", {})["conditions"] = new_conditions
                    o["status"]["lastReconcileTime"] = stamp

                self.store.mutate(rt, namespace, name, suspend)
                self.recorder.emit(
                    job, "Normal", f"{kind}Suspended", f"{kind} {name} is suspended."
                )
            return
        if was is not None and was["status"] == "True":
            was.update(
                status="False",
                reason=f"{kind}Resumed",
                message=f"{kind} {name} is resumed.",
                lastUpdateTime=stamp,
                lastTransitionTime=stamp,
            )
            self.recorder.emit(job, "Normal", f"{kind}Resumed", f"{kind} {name} is resumed.")
        world = sum(int(s.get("replicas", 1)) for s in specs.values())
        rank = 0
        replica_status: dict[str, dict[str, int]] = {}
        pods_by_type: dict[str, list[Obj]] = {}
        for rtype in sorted(specs, key=lambda t: (t not in leaders, t)):
            spec = specs[rtype]
            counts = {"active": 0, "succeeded": 0, "failed": 0}
            for index in range(int(spec.get("replicas", 1))):
                pod_name = f"{name}-{rtype.lower()}-{index}"
                pod = self.store.peek(pods_rt, namespace, pod_name)
                if pod is None:
                    created = self._create_pod(
                        job,
                        kind,
                        rtype,
                        index,
                        rank,
                        world,
                        spec,
                        container_name,
                        port,
                        leaders,
                        specs,
                    )
                    if created is None:  # refused at admission; retried shortly
                        rank += 1
                        continue
                    pod = created
                rank += 1
                pods_by_type.setdefault(rtype, []).append(pod)
                phase = pod["status"].get("phase")
                if phase == "Succeeded":
                    counts["succeeded"] += 1
                elif phase == "Failed":
                    counts["failed"] += 1
                elif phase == "Running":
                    counts["active"] += 1
            replica_status[rtype] = {k: v for k, v in counts.items() if v}
        running = any(s.get("active") for s in replica_status.values())
        failed_type = next((t for t, s in replica_status.items() if s.get("failed")), None)
        leader = next((t for t in leaders if t in specs), None)
        if leader is not None:
            succeeded = replica_status.get(leader, {}).get("succeeded", 0) == int(
                specs[leader].get("replicas", 1)
            )
        elif kind == "TFJob":
            workers = pods_by_type.get("Worker") or []
            succeeded = bool(workers) and workers[0]["status"].get("phase") == "Succeeded"
        else:
            succeeded = all(
                s.get("succeeded", 0) == int(specs[t].get("replicas", 1))
                for t, s in replica_status.items()
            )
        finished = None
        if failed_type is not None:
            count = replica_status[failed_type]["failed"]
            finished = _condition(
                "Failed",
                f"{kind}Failed",
                f"{kind} {namespace}/{name} has failed because {count} {failed_type} replica(s) failed.",
                stamp,
            )
        elif succeeded:
            finished = _condition(
                "Succeeded",
                f"{kind}Succeeded",
                f"{kind} {namespace}/{name} successfully completed.",
                stamp,
            )
        elif running and not any(c["type"] == "Running" for c in new_conditions):
            new_conditions.append(
                _condition(
                    "Running", f"{kind}Running", f"{kind} {namespace}/{name} is running.", stamp
                )
            )
        if finished is not None:
            for condition in new_conditions:
                if condition["type"] == "Running":
                    condition["status"] = "False"
            new_conditions.append(finished)

        def update(o: Obj) -> None:
            s = o.setdefault("status", {})
            s["conditions"] = new_conditions
            s["replicaStatuses"] = replica_status
            s.setdefault("startTime", stamp)
            s["lastReconcileTime"] = stamp
            if finished is not None and finished["type"] == "Succeeded":
                s["completionTime"] = stamp

        self.store.mutate(rt, namespace, name, update)
        if finished is not None:
            self.recorder.emit(
                job,
                "Normal" if finished["type"] == "Succeeded" else "Warning",
                finished["reason"],
                finished["message"],
            )
            self._clean_pods(job, [p for pods in pods_by_type.values() for p in pods])

    def _create_pod(
        self,
        job: Obj,
        kind: str,
        rtype: str,
        index: int,
        rank: int,
        world: int,
        spec: Obj,
        container_name: str,
        port: int,
        leaders: tuple[str, ...],
        specs: Obj,
    ) -> Obj | None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        template = copy.deepcopy(spec.get("template") or {})
        meta = template.get("metadata") or {}
        labels = {
            **(meta.get("labels") or {}),
            JOB_NAME: name,
            "training.kubeflow.org/operator-name": f"{kind.lower()}-controller",
            "training.kubeflow.org/replica-type": rtype.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
        if rtype in leaders:
            labels["training.kubeflow.org/job-role"] = "master"
        pod_spec = template.get("spec") or {}
        pod_spec.setdefault(
            "restartPolicy",
            "Never" if spec.get("restartPolicy") in (None, "ExitCode") else spec["restartPolicy"],
        )
        if spec.get("restartPolicy") == "ExitCode":
            pod_spec["restartPolicy"] = "Never"
        if kind == "PyTorchJob":
            master = next((t for t in leaders if t in specs), None)
            address = f"{name}-{master.lower()}-0" if master else f"{name}-worker-0"
            env = [
                {"name": "MASTER_PORT", "value": str(port)},
                {"name": "MASTER_ADDR", "value": address},
                {"name": "WORLD_SIZE", "value": str(world)},
                {"name": "RANK", "value": str(rank)},
                {"name": "PYTHONUNBUFFERED", "value": "1"},
            ]
        else:
            cluster = {
                t.lower(): [
                    f"{name}-{t.lower()}-{i}.{namespace}.svc:{port}"
                    for i in range(int(s.get("replicas", 1)))
                ]
                for t, s in specs.items()
            }
            env = [
                {
                    "name": "TF_CONFIG",
                    "value": json.dumps(
                        {
                            "cluster": cluster,
                            "task": {"type": rtype.lower(), "index": index},
                            "environment": "cloud",
                        }
                    ),
                }
            ]
        for container in pod_spec.get("containers") or []:
            if container.get("name") == container_name:
                container["env"] = [*(container.get("env") or []), *env]
        pod = {
            "metadata": {
                "name": f"{name}-{rtype.lower()}-{index}",
                "labels": labels,
                "annotations": meta.get("annotations") or {},
                "ownerReferences": [
                    {
                        "apiVersion": "kubeflow.org/v1",
                        "kind": kind,
                        "name": name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
        }
        defaults.pod_defaults(pod)
        pod["metadata"]["namespace"] = namespace
        try:
            Admission(self.store).admit(self.store.by_kind("Pod"), pod)
        except APIError as exc:
            self.recorder.emit(job, "Warning", "FailedCreatePod", f"Error creating: {exc.message}")
            key = (kind, namespace, job["metadata"]["name"])
            asyncio.get_running_loop().call_later(0.5, self._mark, key)
            return None
        created = self.store.create(self.store.by_kind("Pod"), pod, namespace)
        self.recorder.emit(
            job, "Normal", "SuccessfulCreatePod", f"Created pod: {created['metadata']['name']}"
        )
        return created

    def _clean_pods(self, job: Obj, pods: list[Obj]) -> None:
        policy = ((job["spec"].get("runPolicy") or {}).get("cleanPodPolicy")) or "None"
        pods_rt = self.store.by_kind("Pod")
        for pod in pods:
            current = self.store.peek(
                pods_rt, pod["metadata"]["namespace"], pod["metadata"]["name"]
            )
            if current is None or policy == "None":
                continue
            if policy == "All" or current["status"].get("phase") not in ("Succeeded", "Failed"):
                self.store.mutate(
                    pods_rt,
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    lambda o: o["metadata"].update(
                        deletionTimestamp=now(), deletionGracePeriodSeconds=0
                    ),
                )


def _condition(type_: str, reason: str, message: str, stamp: str) -> Obj:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }
