"""kubesim's Kueue, pinned to Kueue's documented behaviour (kueue.x-k8s.io/v1beta1).

References (kueue.sigs.k8s.io):
- docs/concepts/workload/ — a Workload per job, its podSets, conditions QuotaReserved,
  Admitted, Finished;
- docs/concepts/cluster_queue/ — resourceGroups, flavors, nominalQuota, namespaceSelector,
  queueingStrategy StrictFIFO / BestEffortFIFO;
- docs/concepts/local_queue/ — spec.clusterQueue;
- docs/tasks/run/jobs/ and docs/tasks/run/kubeflow/pytorchjobs/ — the queue-name label, the
  job suspended until admitted, "Created Workload" / "Admitted by clusterQueue" events;
- docs/tasks/manage/monitor_pending_workloads/pending_workloads_on_demand/ — the visibility
  API's PendingWorkloadsSummary (items[].positionInClusterQueue, positionInLocalQueue);
- the flavor assigner's wording (pkg/scheduler/flavorassigner): "couldn't assign flavors to
  pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, 1 more needed".
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from tests.support.kueue import A100, kueue_queues

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def job(name: str, gpus: int, *, queue: str | None = "team", suspend: bool = True) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {
                                "limits": {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
                            },
                        }
                    ],
                }
            },
        },
    }


def workload_of(kubesim: Any, job_name: str) -> dict | None:
    obj = kubesim.get("Job", job_name)
    if obj is None:
        return None
    found = kubesim.list(
        "Workload", "default", labels={"kueue.x-k8s.io/job-uid": obj["metadata"]["uid"]}
    )
    return found[0] if found else None


def condition(obj: dict | None, kind: str) -> dict | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return cond
    return None


def admitted(kubesim: Any, name: str) -> bool:
    cond = condition(workload_of(kubesim, name), "Admitted")
    return bool(cond and cond["status"] == "True")


def pending_workloads(kubesim: Any, path: str) -> dict:
    url = f"{kubesim.url}/apis/visibility.kueue.x-k8s.io/v1beta1/{path}/pendingworkloads"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def test_workload_per_job_owned_and_labelled_with_pod_sets(kubesim: Any) -> None:
    kueue_queues(kubesim)
    created = kubesim.create(job("train", 1))
    workload = kubesim.wait_for(lambda: workload_of(kubesim, "train"))
    meta = workload["metadata"]
    assert meta["name"].startswith("job-train-")
    assert meta["labels"]["kueue.x-k8s.io/job-uid"] == created["metadata"]["uid"]
    (owner,) = meta["ownerReferences"]
    assert owner["kind"] == "Job" and owner["uid"] == created["metadata"]["uid"]
    assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
    assert workload["spec"]["queueName"] == "team"
    (pod_set,) = workload["spec"]["podSets"]
    assert pod_set["name"] == "main" and pod_set["count"] == 1
    # Quota free: admitted, resumed, with the flavor's node labels in its pods' selector.
    kubesim.wait_for(lambda: admitted(kubesim, "train"))
    workload = workload_of(kubesim, "train")
    assert condition(workload, "QuotaReserved")["status"] == "True"
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert workload["status"]["admission"]["clusterQueue"] == "gpus"
    assert assignment["flavors"] == {
        "cpu": "default-flavor",
        "memory": "default-flavor",
        "nvidia.com/gpu": "a100",
    }
    assert assignment["resourceUsage"]["nvidia.com/gpu"] == "1"
    resumed = kubesim.wait_for(
        lambda: (lambda j: j if j["spec"].get("suspend") is False else None)(
            kubesim.get("Job", "train")
        )
    )
    assert resumed["spec"]["template"]["spec"]["nodeSelector"] == A100
    kubesim.wait_for(lambda: kubesim.list("Pod", "default", labels={"job-name": "train"}))
    reasons = [e["reason"] for e in kubesim.events(involved="train")]
    assert "CreatedWorkload" in reasons and "Started" in reasons
    assert "Suspended" in reasons and "Resumed" in reasons  # the Job controller's


def test_strict_fifo_admits_in_order_as_quota_is_released(kubesim: Any) -> None:
    kueue_queues(kubesim, gpus=2)
    for name, gpus in (("first", 2), ("second", 1), ("third", 1)):
        kubesim.create(job(name, gpus))
        kubesim.wait_for(lambda n=name: workload_of(kubesim, n))
    kubesim.wait_for(lambda: admitted(kubesim, "first"))
    second = kubesim.wait_for(
        lambda: (lambda c: c if c and c["status"] == "False" else None)(
            condition(workload_of(kubesim, "second"), "QuotaReserved")
        )
    )
    assert second["reason"] == "Pending"
    assert second["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 1 more needed"
    )
    # StrictFIFO: the third is behind the second and is not even tried.
    assert not admitted(kubesim, "third")
    assert kubesim.get("Job", "second")["spec"]["suspend"] is True
    assert not kubesim.list("Pod", "default", labels={"job-name": "second"})
    summary = pending_workloads(kubesim, "namespaces/default/localqueues/team")
    assert summary["kind"] == "PendingWorkloadsSummary"
    assert [
        (
            i["metadata"]["ownerReferences"][0]["name"],
            i["positionInLocalQueue"],
            i["positionInClusterQueue"],
        )
        for i in summary["items"]
    ] == [("second", 0, 0), ("third", 1, 1)]
    assert summary["items"][0]["localQueueName"] == "team"
    paged = pending_workloads(kubesim, "clusterqueues/gpus")
    assert len(paged["items"]) == 2
    # The first finishes: its quota is released, the next two are admitted in order.
    kubesim.finish_job("first")
    kubesim.wait_for(lambda: condition(workload_of(kubesim, "first"), "Finished"))
    assert condition(workload_of(kubesim, "first"), "Finished")["reason"] == "JobFinished"
    kubesim.wait_for(lambda: admitted(kubesim, "second") and admitted(kubesim, "third"))
    assert pending_workloads(kubesim, "namespaces/default/localqueues/team")["items"] == []
    local = kubesim.get("LocalQueue", "team")
    assert local["status"]["admittedWorkloads"] == 2 and local["status"]["pendingWorkloads"] == 0


def test_best_effort_fifo_lets_a_smaller_job_pass(kubesim: Any) -> None:
    kueue_queues(kubesim, gpus=2, strategy="BestEffortFIFO")
    kubesim.create(job("holder", 1))
    kubesim.wait_for(lambda: admitted(kubesim, "holder"))
    kubesim.create(job("big", 2))
    kubesim.wait_for(lambda: workload_of(kubesim, "big"))
    kubesim.create(job("small", 1))
    kubesim.wait_for(lambda: admitted(kubesim, "small"))
    assert not admitted(kubesim, "big")


def test_deleting_a_queued_job_removes_its_workload_and_admits_the_next(kubesim: Any) -> None:
    kueue_queues(kubesim, gpus=1)
    for name in ("a", "b", "c"):
        kubesim.create(job(name, 1))
        kubesim.wait_for(lambda n=name: workload_of(kubesim, n))
    kubesim.wait_for(lambda: admitted(kubesim, "a"))
    gone = workload_of(kubesim, "b")["metadata"]["name"]
    kubesim.delete("Job", "b", "default", propagationPolicy="Background")
    kubesim.wait_for(lambda: kubesim.get("Workload", gone) is None)
    # Deleting the running one releases its quota: the next in line (c) goes.
    kubesim.delete("Job", "a", "default", propagationPolicy="Background")
    kubesim.wait_for(lambda: admitted(kubesim, "c"))


def test_quota_over_nominal_and_uncovered_resources_never_fit(kubesim: Any) -> None:
    kueue_queues(kubesim, gpus=2, strategy="BestEffortFIFO")  # StrictFIFO: "huge" would block "mig"
    kubesim.create(job("huge", 4))
    cond = kubesim.wait_for(
        lambda: (lambda c: c if c and c["status"] == "False" else None)(
            condition(workload_of(kubesim, "huge"), "QuotaReserved")
        )
    )
    assert cond["message"] == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor a100, previously considered podsets requests (0) + current podset request (4) "
        "> maximum capacity (2)"
    )
    mig = job("mig", 1)
    limits = mig["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/mig-1g.10gb"] = limits.pop("nvidia.com/gpu")
    kubesim.create(mig)
    cond = kubesim.wait_for(
        lambda: (lambda c: c if c and c["status"] == "False" else None)(
            condition(workload_of(kubesim, "mig"), "QuotaReserved")
        )
    )
    assert "resource nvidia.com/mig-1g.10gb unavailable in ClusterQueue" in cond["message"]


def test_missing_local_queue_and_unselected_namespace_are_inadmissible(kubesim: Any) -> None:
    kueue_queues(kubesim, namespace_selector={"matchLabels": {"team": "ml"}})
    kubesim.create(job("nowhere", 1, queue="missing"))
    cond = kubesim.wait_for(lambda: condition(workload_of(kubesim, "nowhere"), "QuotaReserved"))
    assert (cond["reason"], cond["message"]) == ("Inadmissible", "LocalQueue missing doesn't exist")
    kubesim.create(job("outside", 1))
    cond = kubesim.wait_for(lambda: condition(workload_of(kubesim, "outside"), "QuotaReserved"))
    assert cond["message"] == "Workload namespace doesn't match ClusterQueue selector"


def test_jobs_without_the_label_are_left_alone(kubesim: Any) -> None:
    kueue_queues(kubesim)
    kubesim.create(job("plain", 1, queue=None, suspend=False))
    kubesim.wait_for(lambda: kubesim.list("Pod", "default", labels={"job-name": "plain"}))
    assert workload_of(kubesim, "plain") is None


def test_pytorchjob_pod_sets_and_resume(kubesim: Any) -> None:
    kueue_queues(kubesim, gpus=3)
    spec = {
        rtype: {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "spec": {
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "pytorch:2",
                            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1"}},
                        }
                    ],
                }
            },
        }
        for rtype, count in (("Master", 1), ("Worker", 2))
    }
    kubesim.create(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": spec},
        }
    )
    obj = kubesim.get("PyTorchJob", "ddp")
    workload = kubesim.wait_for(
        lambda: kubesim.list(
            "Workload", "default", labels={"kueue.x-k8s.io/job-uid": obj["metadata"]["uid"]}
        )
    )[0]
    assert workload["metadata"]["name"].startswith("pytorchjob-ddp-")
    assert sorted((p["name"], p["count"]) for p in workload["spec"]["podSets"]) == [
        ("master", 1),
        ("worker", 2),
    ]
    kubesim.wait_for(
        lambda: kubesim.get("PyTorchJob", "ddp")["spec"]["runPolicy"]["suspend"] is False
    )
    pods = kubesim.wait_for(
        lambda: (lambda ps: ps if len(ps) == 3 else None)(
            kubesim.list("Pod", "default", labels={"training.kubeflow.org/job-name": "ddp"})
        )
    )
    assert all(p["spec"]["nodeSelector"] == A100 for p in pods)


def test_visibility_api_can_be_absent(kubesim: Any) -> None:
    kueue_queues(kubesim)
    kubesim.call(lambda: setattr(kubesim.sim.kueue, "visibility", False))
    with pytest.raises(urllib.error.HTTPError) as missing:
        pending_workloads(kubesim, "namespaces/default/localqueues/team")
    assert missing.value.code == 404
