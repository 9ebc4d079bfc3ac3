"""The local cluster keeps its promises (docs/cluster.md), checked through the Kubernetes API
as any client would: the process node runs pods for real, kwok's stages move fake pods, the
operators serve their APIs, and `make cluster` reuses a running cluster."""

from __future__ import annotations

import base64
import time

import pytest

from harness.cluster import (
    A100_PRODUCT,
    GPU_TOLERATION,
    KWOK_TOLERATION,
    MISSING_IMAGE_SUFFIX,
    PROCESS_NODE_SELECTOR,
    Kube,
)

from .pod_specs import finished, phase, pod

pytestmark = pytest.mark.e2e  # a real kube-apiserver, scheduler, kwok and operators


def test_a_pod_runs_with_its_volumes_env_and_gpus(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": {"epochs": "3"},
        }
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "key"},
            "data": {"token": base64.b64encode(b"s3cret").decode()},
        }
    )
    script = (
        "echo gpus=$NVIDIA_VISIBLE_DEVICES cuda=$CUDA_VISIBLE_DEVICES; "
        "echo epochs=$(cat /etc/settings/epochs) secret=$(cat /etc/key/token) env=$EPOCHS "
        "ns=$MY_NAMESPACE ip=$MY_IP; "
        "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token ok; "
        "echo scratch > /scratch/a && cat /scratch/a; pwd"
    )
    kube.create(
        pod(
            "runner",
            script,
            container={
                "resources": {"limits": {"nvidia.com/gpu": "2"}},
                "workingDir": "/work",
                "env": [
                    {
                        "name": "EPOCHS",
                        "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "epochs"}},
                    },
                    {
                        "name": "MY_NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    },
                    {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "volumeMounts": [
                    {"name": "settings", "mountPath": "/etc/settings", "readOnly": True},
                    {"name": "key", "mountPath": "/etc/key"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            },
            volumes=[
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "key", "secret": {"secretName": "key"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        )
    )
    done = finished(kube, "runner")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["podIP"].startswith("127.")
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    out = kube.logs("runner").splitlines()
    gpus = out[0].split()[0].removeprefix("gpus=")
    assert len(gpus.split(",")) == 2 and out[0] == f"gpus={gpus} cuda={gpus}"
    assert out[1] == (
        f"epochs=3 secret=s3cret env=3 ns={kube.namespace} ip={done['status']['podIP']}"
    )
    assert out[2:] == ["token ok", "scratch", "/work"]
    reasons = [e["reason"] for e in kube.events(involved="runner")]
    assert {"Scheduled", "Pulled", "Created", "Started"} <= set(reasons)


def test_exit_codes_restarts_and_logs_of_the_previous_run(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(pod("fails", "echo going; exit 3"))
    state = finished(kube, "fails")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (3, "Error")
    # OnFailure: the first run fails, the second (after the kubelet's 10 s back-off) succeeds.
    script = "if [ -e /keep/ran ]; then echo second; else touch /keep/ran; echo first; exit 1; fi"
    kube.create(
        pod(
            "retries",
            script,
            restartPolicy="OnFailure",
            container={"volumeMounts": [{"name": "keep", "mountPath": "/keep"}]},
            volumes=[{"name": "keep", "emptyDir": {}}],
        )
    )
    done = finished(kube, "retries", timeout=90)
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["containerStatuses"][0]["restartCount"] == 1
    assert kube.logs("retries").strip() == "second"
    previous = kube.api.session.get(
        kube.api.server + kube._path("Pod", "retries") + "/log", params={"previous": "true"}
    )
    assert previous.text.strip() == "first"
    assert "BackOff" in [e["reason"] for e in kube.events(involved="retries")]


def test_a_container_not_started_yet_has_no_log_and_a_400_says_why(kube: Kube) -> None:
    """As a kubelet answers: 400 for a container still waiting (KubeSpawner, like kubectl,
    reads a 404 as "the pod is gone" and stops following its log) and for a previous run
    that never was."""
    kube.require_local("the process node")
    first = {"name": "first", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 60"]}
    kube.create(pod("waits", "echo main", initContainers=[first]))

    def init_running() -> bool:
        statuses = (kube.get("Pod", "waits") or {}).get("status", {}).get("initContainerStatuses")
        return bool(statuses and "running" in statuses[0]["state"])

    kube.wait_for(init_running, 60)
    url = kube.api.server + kube._path("Pod", "waits") + "/log"
    waiting = kube.api.session.get(url, params={"container": "main"})
    assert waiting.status_code == 400, waiting.text
    assert (
        'container "main" in pod "waits" is waiting to start: PodInitializing'
        in (waiting.json()["message"])
    )
    previous = kube.api.session.get(url, params={"container": "first", "previous": "true"})
    assert previous.status_code == 400, previous.text
    assert (
        'previous terminated container "first" in pod "waits" not found'
        in (previous.json()["message"])
    )
    kube.delete("Pod", "waits")


def test_deleting_a_pod_stops_its_process_within_the_grace_period(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(pod("sleeper", "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.1; done"))
    kube.wait_for(lambda: phase(kube, "sleeper") == "Running")
    started = time.monotonic()
    kube.delete("Pod", "sleeper")
    kube.wait_for(lambda: kube.get("Pod", "sleeper") is None, timeout=30)
    assert time.monotonic() - started < 5  # SIGTERM ended it; no SIGKILL after the grace
    # Its address is free again, once: two pods after it never share it.
    for name in ("after-1", "after-2"):
        kube.create(pod(name, "sleep 30"))
    kube.wait_for(lambda: phase(kube, "after-1") == phase(kube, "after-2") == "Running")
    ips = [(kube.get("Pod", n) or {})["status"]["podIP"] for n in ("after-1", "after-2")]
    assert ips[0] != ips[1], ips


def test_gpus_are_never_shared_and_a_pod_waits_for_them(kube: Kube) -> None:
    kube.require_local("the process node")
    for name in ("one", "two"):
        kube.create(
            pod(
                name,
                "echo $NVIDIA_VISIBLE_DEVICES; sleep 30",
                container={"resources": {"limits": {"nvidia.com/gpu": "2"}}},
            )
        )
    kube.wait_for(lambda: phase(kube, "one") == phase(kube, "two") == "Running")
    seen = [set(kube.wait_for(lambda n=n: kube.logs(n).strip()).split(",")) for n in ("one", "two")]
    assert len(seen[0] | seen[1]) == 4
    kube.create(pod("three", "true", container={"resources": {"limits": {"nvidia.com/gpu": "1"}}}))

    def unschedulable() -> bool:
        conditions = (kube.get("Pod", "three") or {}).get("status", {}).get("conditions") or []
        return any(c.get("reason") == "Unschedulable" for c in conditions)

    kube.wait_for(unschedulable)
    kube.delete("Pod", "one", gracePeriodSeconds=0)
    assert finished(kube, "three")["status"]["phase"] == "Succeeded"


def test_pods_of_a_service_are_found_by_name(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "leader"},
            "spec": {
                "clusterIP": "None",
                "selector": {"role": "leader"},
                "ports": [{"port": 29500}],
            },
        }
    )
    leader = pod("leader-0", "sleep 30")
    leader["metadata"]["labels"] = {"role": "leader"}
    kube.create(leader)
    kube.wait_for(lambda: phase(kube, "leader-0") == "Running")
    kube.create(pod("follower", "getent hosts leader; getent hosts leader." + kube.namespace))
    done = finished(kube, "follower")
    ip = (kube.get("Pod", "leader-0") or {})["status"]["podIP"]
    lines = kube.logs("follower").splitlines()
    assert done["status"]["phase"] == "Succeeded" and len(lines) == 2
    assert all(line.split()[0] == ip for line in lines)


def test_kwok_nodes_run_pods_until_told_and_cannot_pull_missing_images(kube: Kube) -> None:
    kube.require_local("kwok's fake nodes")
    fake = {
        "restartPolicy": "Never",
        "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
        "nodeSelector": {"nvidia.com/gpu.product": A100_PRODUCT},
    }
    for name, image in (("trains", "pytorch"), ("broken", f"none/x{MISSING_IMAGE_SUFFIX}")):
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    **fake,
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
        )
    kube.wait_for(lambda: phase(kube, "trains") == "Running")
    kube.finish_pods([kube.get("Pod", "trains")], exit_code=2)
    state = finished(kube, "trains")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 2

    def pulling_failed() -> bool:
        status = (kube.get("Pod", "broken") or {}).get("status", {})
        waiting = ((status.get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting")
        return bool(waiting) and waiting["reason"] == "ImagePullBackOff"

    kube.wait_for(pulling_failed)
    failed = [e for e in kube.events(involved="broken") if e["reason"] == "Failed"]
    assert failed and failed[0]["message"].startswith("Failed to pull image")


def test_kueue_admits_in_order_and_serves_both_api_versions(kube: Kube) -> None:
    kube.require_local("the local cluster's Kueue")
    kueue = "kueue.x-k8s.io/v1beta2"
    flavor = f"local-{kube.namespace}"
    kube.create(
        {
            "apiVersion": kueue,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": PROCESS_NODE_SELECTOR},
        }
    )
    kube.create(
        {
            "apiVersion": kueue,
            "kind": "ClusterQueue",
            "metadata": {"name": flavor},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": kube.namespace}
                },
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 8},
                                    {"name": "nvidia.com/gpu", "nominalQuota": 2},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    kube.create(
        {
            "apiVersion": kueue,
            "kind": "LocalQueue",
            "metadata": {"name": "team"},
            "spec": {"clusterQueue": flavor},
        }
    )
    for n in (1, 2):
        kube.create(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"train-{n}", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "x",
                                    "command": ["sh", "-c", "sleep 3"],
                                    "resources": {
                                        "requests": {"cpu": "100m"},
                                        "limits": {"nvidia.com/gpu": "2"},
                                    },
                                }
                            ],
                        }
                    },
                },
            }
        )

    def admitted() -> list[str]:
        return sorted(
            w["metadata"]["name"]
            for w in kube.list("Workload")
            if any(
                c["type"] == "Admitted" and c["status"] == "True"
                for c in w.get("status", {}).get("conditions") or []
            )
        )

    first = kube.wait_for(admitted)
    assert len(first) == 1 and "train-1" in first[0]
    path = f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{kube.namespace}/localqueues/team/pendingworkloads"

    def owners() -> list[tuple[str, int]]:
        pending = kube.api.request("GET", path)["items"]
        return [
            (w["metadata"]["ownerReferences"][0]["name"], w["positionInLocalQueue"])
            for w in pending
        ]

    # The visibility API answers from Kueue's queues, which train-2 joins once Kueue has made
    # its Workload: soon after train-1's admission, not necessarily before.
    kube.wait_for(lambda: owners() == [("train-2", 0)])
    assert kube.list("Workload", api_version="kueue.x-k8s.io/v1beta1")
    kube.wait_for(lambda: len(admitted()) == 2, timeout=60)


def test_a_trainjob_runs_on_the_process_node(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tj"},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {
                    "numNodes": 2,
                    "image": "x",
                    "command": ["sh", "-c", "echo node $PET_NODE_RANK of $PET_NNODES"],
                },
            },
        }
    )

    def complete() -> bool:
        conditions = (kube.get("TrainJob", "tj") or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

    kube.wait_for(complete, timeout=90)
    logs = sorted(kube.logs(p["metadata"]["name"]).strip() for p in kube.job_pods("tj", "TrainJob"))
    assert logs == ["node 0 of 2", "node 1 of 2"]


def test_make_cluster_reuses_a_running_cluster(kube: Kube) -> None:
    kube.require_local("the local cluster")
    from localk8s.launcher import Launcher
    from localk8s.nodes import DEFAULT_NODES_FILE

    root = kube.kubeconfig.parent
    started = time.monotonic()
    line = Launcher(root, DEFAULT_NODES_FILE, gpus=4, quiet=True).up()
    assert "already running" in line and str(kube.kubeconfig) in line
    assert time.monotonic() - started < 10
