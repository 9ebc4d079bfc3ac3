"""kubesim's scheduler, kubelet and controllers, pinned to Kubernetes' documented behaviour.

References: kube-scheduler's FitError wording (pkg/scheduler/framework/types.go) and filter
plugins (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit); the kubelet's
event reasons (Pulling, Pulled, Created, Started, Killing, Failed, BackOff); Jobs
(https://kubernetes.io/docs/concepts/workloads/controllers/job/) and garbage collection
(https://kubernetes.io/docs/concepts/architecture/garbage-collection/).
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.kubesim.pytest_plugin import A100_PRODUCT

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_pod(
    name: str,
    gpus: int,
    resource: str = "nvidia.com/gpu",
    *,
    tolerate: bool = True,
    selector: dict | None = None,
) -> dict:
    spec: dict = {
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/pytorch-notebook:cuda12",
                "resources": {"limits": {resource: str(gpus), "cpu": "1", "memory": "1Gi"}},
            }
        ]
    }
    if tolerate:
        spec["tolerations"] = [GPU_TOLERATION]
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def phase(kubesim, name: str) -> str | None:
    pod = kubesim.get("Pod", name)
    return pod and pod["status"].get("phase")


def reasons(kubesim, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in kubesim.events(involved=name)]


async def test_scheduled_pod_runs_with_events_and_status(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod(
        "default", gpu_pod("nb", 2, selector={"nvidia.com/gpu.product": A100_PRODUCT})
    )
    kubesim.wait_for(lambda: phase(kubesim, "nb") == "Running")
    pod = await v1.read_namespaced_pod("nb", "default")
    assert pod.spec.node_name in ("a100-0", "a100-1")
    assert pod.status.pod_ip.startswith("127.1.") and pod.status.host_ip.startswith("172.18.")
    status = pod.status.container_statuses[0]
    assert status.ready and status.state.running.started_at and status.restart_count == 0
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    events = reasons(kubesim, "nb")
    assert events[0] == ("Scheduled", f"Successfully assigned default/nb to {pod.spec.node_name}")
    assert [r for r, _ in events[1:]] == ["Pulling", "Pulled", "Created", "Started"]
    assert events[1][1] == 'Pulling image "quay.io/jupyter/pytorch-notebook:cuda12"'
    assert events[2][1].startswith(
        'Successfully pulled image "quay.io/jupyter/pytorch-notebook:cuda12" in '
    )
    assert events[3][1] == "Created container notebook"
    kubelet_event = kubesim.events(involved="nb")[1]
    assert kubelet_event["source"] == {"component": "kubelet", "host": pod.spec.node_name}
    assert kubelet_event["involvedObject"]["fieldPath"] == "spec.containers{notebook}"
    scheduler_event = kubesim.events(involved="nb")[0]
    assert (
        scheduler_event["reportingComponent"] == "default-scheduler"
        and scheduler_event["eventTime"]
    )


async def test_second_pod_on_node_finds_image_present(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    for name in ("first", "second"):
        await v1.create_namespaced_pod(
            "default",
            gpu_pod(name, 8, selector={"kubernetes.io/hostname": "a100-0"})
            if name == "first"
            else gpu_pod(name, 0, selector={"kubernetes.io/hostname": "a100-0"}),
        )
        kubesim.wait_for(lambda name=name: phase(kubesim, name) == "Running")
    assert (
        "Pulled",
        'Container image "quay.io/jupyter/pytorch-notebook:cuda12" already present on machine',
    ) in reasons(kubesim, "second")


async def test_failed_scheduling_wording_taints_and_insufficient(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", gpu_pod("greedy", 9))
    event = kubesim.wait_for(
        lambda: [e for e in kubesim.events(involved="greedy") if e["reason"] == "FailedScheduling"]
    )[0]
    assert event["type"] == "Warning"
    # cpu-0 and a100-mig-0 have no nvidia.com/gpu; the A100 nodes have 8 each.
    assert event["message"] == (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
        "available: 4 No preemption victims found for incoming pod.."
    )
    await v1.create_namespaced_pod("default", gpu_pod("untolerated", 1, tolerate=False))
    event = kubesim.wait_for(
        lambda: [
            e for e in kubesim.events(involved="untolerated") if e["reason"] == "FailedScheduling"
        ]
    )[0]
    assert event["message"] == (
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) had untolerated taint "
        "{nvidia.com/gpu: present}. preemption: 0/4 nodes are available: 1 No preemption victims "
        "found for incoming pod, 3 Preemption is not helpful for scheduling.."
    )
    pod = await v1.read_namespaced_pod("untolerated", "default")
    scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")


async def test_node_affinity_and_selector_mismatch(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    body = gpu_pod("affine", 1)
    body["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-H100-80GB-HBM3"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    await v1.create_namespaced_pod("default", body)
    event = kubesim.wait_for(
        lambda: [e for e in kubesim.events(involved="affine") if e["reason"] == "FailedScheduling"]
    )[0]
    assert event["message"].startswith(
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    )
    kubesim.add_node(
        "h100-0",
        {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 4},
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    kubesim.wait_for(lambda: phase(kubesim, "affine") == "Running")
    assert kubesim.get("Pod", "affine")["spec"]["nodeName"] == "h100-0"


async def test_pending_pod_scheduled_when_gpus_are_freed(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    for name in ("a", "b"):
        await v1.create_namespaced_pod("default", gpu_pod(name, 8))
    kubesim.wait_for(lambda: phase(kubesim, "a") == "Running" and phase(kubesim, "b") == "Running")
    await v1.create_namespaced_pod("default", gpu_pod("waiting", 4))
    kubesim.wait_for(
        lambda: [e for e in kubesim.events(involved="waiting") if e["reason"] == "FailedScheduling"]
    )
    await v1.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    kubesim.wait_for(lambda: phase(kubesim, "waiting") == "Running")


async def test_mig_slices_are_their_own_resource(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    for n in range(8):
        await v1.create_namespaced_pod("default", gpu_pod(f"mig{n}", 1, "nvidia.com/mig-1g.10gb"))
    kubesim.wait_for(lambda: sum(phase(kubesim, f"mig{n}") == "Running" for n in range(8)) == 7)
    await asyncio.sleep(0.1)
    assert phase(kubesim, "mig7") == "Pending"
    assert {kubesim.get("Pod", f"mig{n}")["spec"]["nodeName"] for n in range(7)} == {"a100-mig-0"}


async def test_image_pull_failure(kubesim, kube_api):
    kubesim.fail_image("registry.example.org/missing:1")
    v1 = client.CoreV1Api(kube_api)
    body = gpu_pod("pull", 0)
    body["spec"]["containers"][0]["image"] = "registry.example.org/missing:1"
    await v1.create_namespaced_pod("default", body)
    kubesim.wait_for(
        lambda: (
            ("Warning", "Error: ImagePullBackOff")
            in [(e["type"], e["message"]) for e in kubesim.events(involved="pull")]
        )
    )
    pod = await v1.read_namespaced_pod("pull", "default")
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
    with pytest.raises(ApiException) as exc:
        await v1.read_namespaced_pod_log("pull", "default")
    assert exc.value.status == 400 and "is waiting to start: ImagePullBackOff" in exc.value.body


def job(name: str, *, backoff: int = 6, parallelism: int = 1, completions: int = 1) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff,
            "parallelism": parallelism,
            "completions": completions,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "train", "image": "quay.io/jupyter/pytorch-notebook:cuda12"}
                    ],
                }
            },
        },
    }


def condition(kubesim, name: str) -> dict | None:
    obj = kubesim.get("Job", name)
    conditions = [
        c for c in (obj or {}).get("status", {}).get("conditions", []) if c["status"] == "True"
    ]
    return conditions[-1] if conditions else None


async def test_job_runs_pods_to_completion(kubesim, kube_api):
    batch = client.BatchV1Api(kube_api)
    created = await batch.create_namespaced_job(
        "default", job("train", completions=2, parallelism=2)
    )
    uid = created.metadata.uid
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert created.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "train"
    pods = kubesim.wait_for(
        lambda: (
            [
                p
                for p in kubesim.list("Pod", "default", labels={"job-name": "train"})
                if p["status"]["phase"] == "Running"
            ]
            if len(kubesim.list("Pod", "default", labels={"job-name": "train"})) == 2
            else None
        )
    )
    assert all(p["metadata"]["name"].startswith("train-") for p in pods)
    ref = pods[0]["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        "Job",
        "train",
        uid,
        True,
        True,
    )
    status = (await batch.read_namespaced_job("train", "default")).status
    assert status.active == 2 and status.start_time is not None
    kubesim.finish_job("train", logs="loss 0.1")
    done = kubesim.wait_for(lambda: condition(kubesim, "train"))
    assert done["type"] == "Complete"
    final = (await batch.read_namespaced_job("train", "default")).status
    assert final.succeeded == 2 and final.active is None and final.completion_time is not None
    job_events = [e["reason"] for e in kubesim.events(involved="train")]
    assert job_events.count("SuccessfulCreate") == 2 and job_events[-1] == "Completed"
    v1 = client.CoreV1Api(kube_api)
    log = await v1.read_namespaced_pod_log(pods[0]["metadata"]["name"], "default")
    assert log == "loss 0.1\n"
    assert all(
        p["status"]["phase"] == "Succeeded"
        for p in kubesim.list("Pod", "default", labels={"job-name": "train"})
    )


async def test_job_fails_after_backoff_limit(kubesim, kube_api):
    batch = client.BatchV1Api(kube_api)
    await batch.create_namespaced_job("default", job("flaky", backoff=1))
    kubesim.finish_job("flaky", succeed=False)
    failed = kubesim.wait_for(lambda: condition(kubesim, "flaky"))
    assert (failed["type"], failed["reason"], failed["message"]) == (
        "Failed",
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    status = (await batch.read_namespaced_job("flaky", "default")).status
    assert status.failed == 2  # the first pod and one retry


async def test_job_deletion_propagation(kubesim, kube_api):
    batch = client.BatchV1Api(kube_api)
    await batch.create_namespaced_job("default", job("orphaned"))
    await batch.create_namespaced_job("default", job("cascaded"))
    kubesim.wait_for(
        lambda: (
            len(kubesim.list("Pod", "default", labels={"job-name": "orphaned"})) == 1
            and len(kubesim.list("Pod", "default", labels={"job-name": "cascaded"})) == 1
        )
    )
    await batch.delete_namespaced_job("orphaned", "default")  # batch/v1 default: Orphan
    await batch.delete_namespaced_job("cascaded", "default", propagation_policy="Background")
    kubesim.wait_for(lambda: not kubesim.list("Pod", "default", labels={"job-name": "cascaded"}))
    orphan = kubesim.list("Pod", "default", labels={"job-name": "orphaned"})
    assert len(orphan) == 1 and not orphan[0]["metadata"].get("ownerReferences")


async def test_foreground_deletion_waits_for_dependents(kubesim, kube_api):
    batch = client.BatchV1Api(kube_api)
    await batch.create_namespaced_job("default", job("fg"))
    kubesim.wait_for(
        lambda: [
            p
            for p in kubesim.list("Pod", "default", labels={"job-name": "fg"})
            if p["status"]["phase"] == "Running"
        ]
    )
    kubesim.call(lambda: setattr(kubesim.sim.kubelet, "termination_seconds", 0.5))
    await batch.delete_namespaced_job(
        "fg", "default", propagation_policy="Foreground", grace_period_seconds=5
    )
    deleted = await batch.read_namespaced_job("fg", "default")
    assert (
        deleted.metadata.deletion_timestamp is not None
        and "foregroundDeletion" in deleted.metadata.finalizers
    )
    assert kubesim.get("Job", "fg") is not None
    kubesim.wait_for(lambda: kubesim.get("Job", "fg") is None, timeout=5)
    assert not kubesim.list("Pod", "default", labels={"job-name": "fg"})


async def test_follow_logs_streams_until_exit(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", gpu_pod("talker", 0))
    kubesim.wait_for(lambda: phase(kubesim, "talker") == "Running")
    kubesim.write_log("talker", "one\n")
    response = await v1.read_namespaced_pod_log(
        "talker", "default", follow=True, _preload_content=False
    )
    first = await response.content.readline()
    assert first == b"one\n"
    kubesim.write_log("talker", "two\n")
    assert await response.content.readline() == b"two\n"
    kubesim.finish_pod("talker", logs="bye")
    assert await asyncio.wait_for(response.content.read(), 5) == b"bye\n"
    tail = await v1.read_namespaced_pod_log("talker", "default", tail_lines=1)
    assert tail == "bye\n"


async def test_local_process_container(kubesim, kube_api):
    kubesim.run_locally(lambda pod, container: pod["metadata"]["name"] == "local")
    v1 = client.CoreV1Api(kube_api)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "local"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": [sys.executable, "-c"],
                    "args": [
                        "import os; print(os.environ['GREETING'], os.environ['POD_NAME'], os.environ['BIND'])"
                    ],
                    "env": [
                        {"name": "GREETING", "value": "hello"},
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {"name": "BIND", "value": "http://0.0.0.0:8888/"},
                    ],
                }
            ],
        },
    }
    await v1.create_namespaced_pod("default", body)
    kubesim.wait_for(lambda: phase(kubesim, "local") == "Succeeded", timeout=20)
    pod = await v1.read_namespaced_pod("local", "default")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    log = await v1.read_namespaced_pod_log("local", "default")
    assert log == f"hello local http://{pod.status.pod_ip}:8888/\n"


def training_job(kind: str, name: str, replicas: dict[str, int]) -> dict:
    key, container = (
        ("pytorchReplicaSpecs", "pytorch")
        if kind == "PyTorchJob"
        else ("tfReplicaSpecs", "tensorflow")
    )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            key: {
                rtype: {
                    "replicas": count,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": container,
                                    "image": "pytorch:2",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                }
                            ],
                            "tolerations": [GPU_TOLERATION],
                        }
                    },
                }
                for rtype, count in replicas.items()
            },
        },
    }


def training_condition(kubesim, kind: str, name: str) -> list[str]:
    obj = kubesim.get(kind, name) or {}
    return [c["type"] for c in obj.get("status", {}).get("conditions", []) if c["status"] == "True"]


async def test_pytorchjob_runs_replicas_to_success(kubesim, kube_api):
    custom = client.CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        training_job("PyTorchJob", "ddp", {"Master": 1, "Worker": 2}),
    )
    pods = kubesim.wait_for(
        lambda: (
            lambda ps: (
                ps if len(ps) == 3 and all(p["status"]["phase"] == "Running" for p in ps) else None
            )
        )(kubesim.list("Pod", "default", labels={"training.kubeflow.org/job-name": "ddp"}))
    )
    assert sorted(p["metadata"]["name"] for p in pods) == [
        "ddp-master-0",
        "ddp-worker-0",
        "ddp-worker-1",
    ]
    master = next(p for p in pods if p["metadata"]["name"] == "ddp-master-0")
    env = {e["name"]: e["value"] for e in master["spec"]["containers"][0]["env"]}
    assert env == {
        "MASTER_PORT": "23456",
        "MASTER_ADDR": "ddp-master-0",
        "WORLD_SIZE": "3",
        "RANK": "0",
        "PYTHONUNBUFFERED": "1",
    }
    assert master["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "master"
    assert master["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    kubesim.wait_for(lambda: "Running" in training_condition(kubesim, "PyTorchJob", "ddp"))
    kubesim.finish_job("ddp", logs="epoch 1\n")
    kubesim.wait_for(lambda: "Succeeded" in training_condition(kubesim, "PyTorchJob", "ddp"))
    job = await custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", "ddp"
    )
    assert job["status"]["replicaStatuses"] == {
        "Master": {"succeeded": 1},
        "Worker": {"succeeded": 2},
    }
    assert job["status"]["completionTime"]
    succeeded = next(c for c in job["status"]["conditions"] if c["type"] == "Succeeded")
    assert (succeeded["reason"], succeeded["message"]) == (
        "PyTorchJobSucceeded",
        "PyTorchJob default/ddp successfully completed.",
    )
    log = await client.CoreV1Api(kube_api).read_namespaced_pod_log("ddp-worker-1", "default")
    assert log == "epoch 1\n"


async def test_tfjob_fails_when_a_replica_fails(kubesim, kube_api):
    custom = client.CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "tfjobs", training_job("TFJob", "tf", {"Worker": 2})
    )
    kubesim.wait_for(lambda: "Running" in training_condition(kubesim, "TFJob", "tf"))
    pod = kubesim.get("Pod", "tf-worker-1")
    tf_config = json.loads(
        next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG")
    )
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert tf_config["cluster"]["worker"] == [
        "tf-worker-0.default.svc:2222",
        "tf-worker-1.default.svc:2222",
    ]
    kubesim.finish_pod("tf-worker-1", exit_code=1)
    kubesim.wait_for(lambda: "Failed" in training_condition(kubesim, "TFJob", "tf"))
    job = kubesim.get("TFJob", "tf")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "TFJob default/tf has failed because 1 Worker replica(s) failed."
    await custom.delete_namespaced_custom_object("kubeflow.org", "v1", "default", "tfjobs", "tf")
    kubesim.wait_for(
        lambda: not kubesim.list("Pod", "default", labels={"training.kubeflow.org/job-name": "tf"})
    )
