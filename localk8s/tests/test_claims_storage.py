"""PersistentVolumeClaims on the local cluster (docs/cluster.md): the default StorageClass
(kube-controller-manager's own hostPath provisioner) binds a claim, the process node mounts
its volume where the pod says, what one pod writes the next finds, a pod whose claim is not
bound waits as on a kubelet, and the volume goes with its claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cluster import PROCESS_NODE_SELECTOR, Kube

pytestmark = pytest.mark.e2e


def claim(name: str, storage_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod_with_claim(name: str, claim_name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/srv/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
            **spec,
        },
    }


def phase(kube: Kube, name: str) -> str:
    return str((kube.get("Pod", name) or {}).get("status", {}).get("phase", ""))


def test_a_claim_is_provisioned_mounted_and_outlives_its_pod(kube: Kube) -> None:
    kube.require_local("the process node and the hostPath provisioner")
    kube.create(claim("data"))
    bound = kube.wait_for(
        lambda: (
            (c := kube.get("PersistentVolumeClaim", "data"))
            and c["status"].get("phase") == "Bound"
            and c
        ),
        timeout=60,
    )
    volume = kube.api.get("v1", "PersistentVolume", bound["spec"]["volumeName"])
    assert volume["spec"]["storageClassName"] == "local-hostpath"
    folder = Path(volume["spec"]["hostPath"]["path"])
    selector = {"nodeSelector": PROCESS_NODE_SELECTOR}
    kube.create(pod_with_claim("writer", "data", "echo kept > /srv/data/state", **selector))
    kube.wait_for(lambda: phase(kube, "writer") in ("Succeeded", "Failed"), 60)
    assert phase(kube, "writer") == "Succeeded", kube.logs("writer")
    assert (folder / "state").read_text() == "kept\n"
    kube.delete("Pod", "writer")
    kube.create(pod_with_claim("reader", "data", "cat /srv/data/state", **selector))
    kube.wait_for(lambda: phase(kube, "reader") in ("Succeeded", "Failed"), 60)
    assert kube.logs("reader") == "kept\n"
    kube.delete("Pod", "reader")
    kube.wait_for(lambda: kube.get("Pod", "reader") is None, 60)
    kube.delete("PersistentVolumeClaim", "data")
    kube.wait_for(lambda: not folder.exists(), 60)


def test_a_pod_whose_claim_is_not_bound_waits(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(claim("never", storage_class="no-such-class"))
    # Bound to the node by name, as the scheduler would never do with an unbound claim: the
    # node waits for it, as a kubelet does.
    kube.create(pod_with_claim("waits", "never", "true", nodeName="local-0"))

    kube.wait_for(
        lambda: any(e.get("reason") == "FailedMount" for e in kube.events("waits")), timeout=60
    )
    pod = kube.get("Pod", "waits")
    assert pod["status"]["phase"] == "Pending", pod["status"]
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"] == {"waiting": {"reason": "ContainerCreating"}}, status
