"""kubesim's admission chain, as a default apiserver runs it on create.

References: https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/
(ServiceAccount, Priority, RuntimeClass, LimitRanger, ResourceQuota),
https://kubernetes.io/docs/concepts/policy/resource-quotas/ (``status.used``, "exceeded quota",
requests required when a quota tracks them), https://kubernetes.io/docs/concepts/policy/limit-range/
(defaults and min/max), https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/
and the ServiceAccount controller (a namespace's ``default`` account appears after it).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def with_resources(body: dict[str, Any], **resources: Any) -> dict[str, Any]:
    body["spec"]["containers"][0]["resources"] = resources
    return body


async def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as exc:
        await call
    assert exc.value.status == 403, exc.value.body
    status: dict[str, Any] = json.loads(exc.value.body)
    assert status["reason"] == "Forbidden"
    return status


async def test_missing_service_account_priority_and_runtime_class_are_403(kube_api):
    v1 = client.CoreV1Api(kube_api)
    status = await refused(
        v1.create_namespaced_pod("default", pod("sa", serviceAccountName="robot"))
    )
    assert status["message"] == (
        'pods "sa" is forbidden: error looking up service account default/robot: '
        'serviceaccount "robot" not found'
    )
    status = await refused(
        v1.create_namespaced_pod("default", pod("pc", priorityClassName="gpu-high"))
    )
    assert (
        status["message"] == 'pods "pc" is forbidden: no PriorityClass with name gpu-high was found'
    )
    status = await refused(
        v1.create_namespaced_pod("default", pod("rc", runtimeClassName="nvidia"))
    )
    assert (
        status["message"] == 'pods "rc" is forbidden: pod rejected: RuntimeClass "nvidia" not found'
    )


async def test_priority_class_sets_priority(kube_api):
    """The Priority plugin resolves priorityClassName to spec.priority (and a global default)."""
    scheduling = client.SchedulingV1Api(kube_api)
    await scheduling.create_priority_class(
        {"metadata": {"name": "gpu-high"}, "value": 1000, "preemptionPolicy": "Never"}
    )
    v1 = client.CoreV1Api(kube_api)
    created = await v1.create_namespaced_pod("default", pod("pc", priorityClassName="gpu-high"))
    assert (created.spec.priority, created.spec.preemption_policy) == (1000, "Never")
    system = await v1.create_namespaced_pod(
        "default", pod("sys", priorityClassName="system-cluster-critical")
    )
    assert system.spec.priority == 2000000000
    await client.NodeV1Api(kube_api).create_runtime_class(
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"}
    )
    await v1.create_namespaced_pod("default", pod("rc", runtimeClassName="nvidia"))


async def test_default_service_account_appears_after_the_namespace(kubesim, kube_api):
    """A pod created before the ServiceAccount controller has run is refused: the real race."""
    kubesim.set_service_account_delay(2.0)
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespace({"metadata": {"name": "fresh"}})
    status = await refused(v1.create_namespaced_pod("fresh", pod()))
    assert 'serviceaccount "default" not found' in status["message"]
    kubesim.wait_for(lambda: kubesim.get("ServiceAccount", "default", "fresh"), timeout=5)
    await v1.create_namespaced_pod("fresh", pod())


async def test_resource_quota_used_and_exceeded(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_resource_quota(
        "default",
        {
            "metadata": {"name": "gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2", "pods": "3"}},
        },
    )
    gpu = {"nvidia.com/gpu": "2"}
    await v1.create_namespaced_pod("default", with_resources(pod("a"), limits=gpu))
    quota = kubesim.wait_for(
        lambda: (
            (q := kubesim.get("ResourceQuota", "gpus"))
            and q.get("status", {}).get("used", {}).get("pods") == "1"
            and q
        )
    )
    assert quota["status"]["used"] == {"requests.nvidia.com/gpu": "2", "pods": "1"}
    assert quota["status"]["hard"] == {"requests.nvidia.com/gpu": "2", "pods": "3"}
    status = await refused(
        v1.create_namespaced_pod(
            "default", with_resources(pod("b"), limits={"nvidia.com/gpu": "1"})
        )
    )
    assert status["message"] == (
        'pods "b" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2"
    )
    await v1.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    kubesim.wait_for(lambda: kubesim.get("Pod", "a") is None)
    await v1.create_namespaced_pod(
        "default", with_resources(pod("b"), limits={"nvidia.com/gpu": "1"})
    )


async def test_quota_on_cpu_requires_requests_and_blocks_job_pods(kubesim, kube_api):
    """A quota that tracks requests.cpu refuses pods without one ("must specify"); a Job whose
    pods are refused records FailedCreate events instead of pods."""
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_resource_quota(
        "default", {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "1"}}}
    )
    status = await refused(v1.create_namespaced_pod("default", pod("bare")))
    assert status["message"] == (
        'pods "bare" is forbidden: failed quota: compute: must specify requests.cpu for: main'
    )
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            }
        },
    }
    await client.BatchV1Api(kube_api).create_namespaced_job("default", job)
    event = kubesim.wait_for(
        lambda: next(
            (e for e in kubesim.events(involved="train") if e["reason"] == "FailedCreate"), None
        )
    )
    assert event["type"] == "Warning"
    assert event["message"] == (
        'Error creating: pods "train-" is forbidden: failed quota: compute: must specify '
        "requests.cpu for: main"
    )
    assert kubesim.list("Pod", "default") == []


async def test_limit_range_defaults_and_maximum(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_limit_range(
        "default",
        {
            "metadata": {"name": "limits"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"cpu": "1", "memory": "1Gi"},
                        "defaultRequest": {"cpu": "500m", "memory": "512Mi"},
                        "max": {"cpu": "2"},
                    }
                ]
            },
        },
    )
    created = await v1.create_namespaced_pod("default", pod("defaulted"))
    resources = created.spec.containers[0].resources
    assert resources.limits == {"cpu": "1", "memory": "1Gi"}
    assert resources.requests == {"cpu": "500m", "memory": "512Mi"}
    assert "kubernetes.io/limit-ranger" in created.metadata.annotations
    status = await refused(
        v1.create_namespaced_pod("default", with_resources(pod("big"), limits={"cpu": "4"}))
    )
    assert status["message"] == (
        'pods "big" is forbidden: maximum cpu usage per Container is 2, but limit is 4'
    )


def gpu_pod(name: str, gpus: int, priority_class: str | None = None) -> dict[str, Any]:
    body = with_resources(pod(name), limits={"nvidia.com/gpu": str(gpus)})
    body["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    return body


async def test_higher_priority_pending_pod_is_scheduled_first(kubesim, kube_api):
    """The scheduler's queue (PrioritySort) orders pending pods by priority, then age."""
    await client.SchedulingV1Api(kube_api).create_priority_class(
        {"metadata": {"name": "gpu-high"}, "value": 1000}
    )
    v1 = client.CoreV1Api(kube_api)
    for name in ("a", "b"):
        await v1.create_namespaced_pod("default", gpu_pod(name, 8))
    kubesim.wait_for(
        lambda: all(kubesim.get("Pod", n)["status"].get("phase") == "Running" for n in "ab")
    )
    await v1.create_namespaced_pod("default", gpu_pod("low", 8))
    await v1.create_namespaced_pod("default", gpu_pod("high", 8, "gpu-high"))
    kubesim.wait_for(
        lambda: any(e["reason"] == "FailedScheduling" for e in kubesim.events(involved="high"))
    )
    await v1.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    kubesim.wait_for(lambda: kubesim.get("Pod", "high")["spec"].get("nodeName"))
    assert not kubesim.get("Pod", "low")["spec"].get("nodeName")
