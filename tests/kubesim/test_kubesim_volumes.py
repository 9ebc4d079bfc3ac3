"""What a pod's volumes and config references do on a real cluster, pinned for kubesim.

References: https://kubernetes.io/docs/concepts/storage/persistent-volumes/ (claim phases,
``volumeMode`` default, storage object in use protection), the scheduler's VolumeBinding plugin
(``persistentvolumeclaim "x" not found``, ``pod has unbound immediate PersistentVolumeClaims``),
the kubelet's volume manager (``FailedMount``: ``MountVolume.SetUp failed for volume ...``, pod
held in ``ContainerCreating``) and container config (``CreateContainerConfigError``),
https://kubernetes.io/docs/concepts/configuration/secret/ and .../configmap/.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

PREFILTER = "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.."


def pod(name: str, volumes: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.36", **container}],
            "volumes": volumes or [],
        },
    }


def claim(name: str, storage_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def warnings(kubesim: Any, name: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in kubesim.events(involved=name)
        if e["reason"] == reason and e["type"] == "Warning"
    ]


def waiting_reason(kubesim: Any, name: str) -> str | None:
    statuses = (kubesim.get("Pod", name) or {}).get("status", {}).get("containerStatuses") or []
    return next((s["state"].get("waiting", {}).get("reason") for s in statuses), None)


async def test_claim_is_defaulted_then_bound(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    created = await v1.create_namespaced_persistent_volume_claim("default", claim("home"))
    assert created.spec.volume_mode == "Filesystem"
    assert created.status.phase == "Pending"
    assert created.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    bound = kubesim.wait_for(
        lambda: (
            (c := kubesim.get("PersistentVolumeClaim", "home"))
            and c["status"].get("phase") == "Bound"
            and c
        )
    )
    assert bound["spec"]["volumeName"] == f"pvc-{created.metadata.uid}"
    assert bound["status"]["capacity"] == {"storage": "1Gi"}


async def test_missing_or_unbound_claim_fails_scheduling(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    volume = [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}]
    await v1.create_namespaced_pod("default", pod("lost", volume))
    message = kubesim.wait_for(lambda: warnings(kubesim, "lost", "FailedScheduling"))[0]
    assert (
        message == f'0/4 nodes are available: persistentvolumeclaim "home" not found. {PREFILTER}'
    )
    # An unbound claim (no StorageClass, no PersistentVolume for it) keeps the pod pending.
    await v1.create_namespaced_persistent_volume_claim("default", claim("home", ""))
    message = kubesim.wait_for(lambda: warnings(kubesim, "lost", "FailedScheduling")[1:])[0]
    assert message == (
        f"0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. {PREFILTER}"
    )
    assert not kubesim.get("Pod", "lost")["spec"].get("nodeName")
    # A provisioned claim lets it schedule.
    await v1.create_namespaced_persistent_volume_claim("default", claim("scratch"))
    volume = [{"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}]
    await v1.create_namespaced_pod("default", pod("found", volume))
    kubesim.wait_for(lambda: kubesim.get("Pod", "found")["status"].get("phase") == "Running")


async def test_in_use_claim_is_kept_until_unused(kubesim, kube_api):
    """Storage Object in Use Protection: the claim waits, Terminating, for its pod to go."""
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_persistent_volume_claim("default", claim("home"))
    volume = [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}]
    await v1.create_namespaced_pod("default", pod("user", volume))
    kubesim.wait_for(lambda: kubesim.get("Pod", "user")["status"].get("phase") == "Running")
    await v1.delete_namespaced_persistent_volume_claim("home", "default")
    kept = kubesim.get("PersistentVolumeClaim", "home")
    assert kept is not None and kept["metadata"].get("deletionTimestamp")
    await v1.delete_namespaced_pod("user", "default", grace_period_seconds=0)
    kubesim.wait_for(lambda: kubesim.get("PersistentVolumeClaim", "home") is None, timeout=5)


async def test_missing_secret_or_configmap_volume_blocks_in_container_creating(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    volumes = [
        {"name": "job", "configMap": {"name": "job-input"}},
        {"name": "token", "secret": {"secretName": "token"}},
    ]
    await v1.create_namespaced_pod("default", pod("mounts", volumes))
    first = kubesim.wait_for(lambda: warnings(kubesim, "mounts", "FailedMount"))[0]
    assert first == 'MountVolume.SetUp failed for volume "job" : configmap "job-input" not found'
    assert waiting_reason(kubesim, "mounts") == "ContainerCreating"
    assert kubesim.get("Pod", "mounts")["status"]["phase"] == "Pending"
    await v1.create_namespaced_config_map("default", {"metadata": {"name": "job-input"}})
    second = kubesim.wait_for(lambda: warnings(kubesim, "mounts", "FailedMount")[1:])[0]
    assert second == 'MountVolume.SetUp failed for volume "token" : secret "token" not found'
    await v1.create_namespaced_secret("default", {"metadata": {"name": "token"}})
    kubesim.wait_for(lambda: kubesim.get("Pod", "mounts")["status"].get("phase") == "Running")


async def test_missing_key_reference_is_create_container_config_error(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}}]
    await v1.create_namespaced_pod("default", pod("cfg", env=env))
    kubesim.wait_for(
        lambda: waiting_reason(kubesim, "cfg") == "CreateContainerConfigError",
        timeout=5,
        message=str(kubesim.get("Pod", "cfg")),
    )
    assert warnings(kubesim, "cfg", "Failed") == ['Error: secret "api" not found']
    await v1.create_namespaced_secret(
        "default", {"metadata": {"name": "api"}, "stringData": {"other": "x"}}
    )
    kubesim.wait_for(lambda: warnings(kubesim, "cfg", "Failed")[1:])
    assert warnings(kubesim, "cfg", "Failed")[1] == (
        "Error: couldn't find key token in Secret default/api"
    )
    await v1.patch_namespaced_secret("api", "default", {"stringData": {"token": "t"}})
    kubesim.wait_for(lambda: kubesim.get("Pod", "cfg")["status"].get("phase") == "Running")


async def test_optional_references_do_not_block(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    env = [
        {
            "name": "TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "api", "key": "t", "optional": True}},
        }
    ]
    volumes = [{"name": "cm", "configMap": {"name": "absent", "optional": True}}]
    await v1.create_namespaced_pod("default", pod("opt", volumes, env=env))
    kubesim.wait_for(lambda: kubesim.get("Pod", "opt")["status"].get("phase") == "Running")
