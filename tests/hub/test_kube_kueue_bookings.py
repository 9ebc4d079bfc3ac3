"""A booking on a Kueue hub, end to end: a real JupyterHub with ``kueue_queue_name`` and
``bookings`` on the test cluster's real Kueue. A fleet admin books the queue's one GPU for
ada over REST. At the start the hub's monitor moves the quota into the booking's
ClusterQueue, ada's GPU server waits in the booking's LocalQueue, and Kueue preempts the
pod that borrowed the GPU to admit it. Cancelling the booking gives the quota back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuhub.k8s import kueue_bookings as kb
from harness.cluster import PROCESS_NODE_SELECTOR, Kube
from harness.hub.kube import hub_config
from harness.hub.process import spawn, start_hub, stop, wait_ready
from tests.support.kueue import KUEUE, kueue_queues

pytestmark = pytest.mark.e2e

QUEUE = "servers"
ONE_GPU = {"gpu_type": "local", "gpus": 1, "cpu": 0.5, "memory": "512M"}


@pytest.fixture
def kubeconfig(kube: Kube) -> Iterator[None]:
    """KUBECONFIG for the hub this test starts (read by its process)."""
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kube.kubeconfig)
    yield
    if previous is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = previous


def borrower() -> dict[str, Any]:
    """Someone else's pod in the hub's queue, on the queue's one GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "borrower", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": PROCESS_NODE_SELECTOR,
            "containers": [
                {
                    "name": "train",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "100m", "memory": "64Mi"}
                    },
                }
            ],
        },
    }


def gated(pod: dict[str, Any] | None) -> bool:
    return pod is not None and any(
        g["name"] == "kueue.x-k8s.io/admission" for g in pod["spec"].get("schedulingGates") or []
    )


def workload_of(kube: Kube, pod: str) -> str:
    """The name of the Workload Kueue made for ``pod`` ("" before it has one)."""
    for workload in kube.list("Workload", api_version=KUEUE):
        if any(r.get("name") == pod for r in workload["metadata"].get("ownerReferences") or []):
            return str(workload["metadata"]["name"])
    return ""


def preempted(kube: Kube, workload: str) -> bool:
    """Whether Kueue preempted ``workload`` (its event says so; a preempted pod and its
    Workload are deleted, the event stays)."""
    return any(e.get("reason") == "Preempted" for e in kube.events(workload))


def gpu_quota(kube: Kube, name: str, flavor: str) -> int | None:
    queue = kube.get("ClusterQueue", name, api_version=KUEUE)
    return None if queue is None else kb.nominal(queue, flavor, "nvidia.com/gpu")


def iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def test_a_bookers_server_takes_the_booked_gpu_from_a_borrower_through_kueue(
    kube: Kube, kubeconfig: None, tmp_path: Any
) -> None:
    queues = kueue_queues(kube, gpus=1, local_queue=QUEUE, gpu_nodes=PROCESS_NODE_SELECTOR)
    main, flavor = queues.cluster_queue, queues.a100_flavor
    # The admin guide's one requirement: the hub's ClusterQueue is in a cohort.
    kube.patch("ClusterQueue", main, {"spec": {"cohort": kube.namespace}}, api_version=KUEUE)
    kube.create(borrower())
    kube.wait_for(lambda: not gated(kube.get("Pod", "borrower")), timeout=60)
    lent = kube.wait_for(lambda: workload_of(kube, "borrower"), timeout=30)
    extra = f"""
        from gpuhub.hub.web.api import configure_hub
        configure_hub(c)
        c.GPUSpawner.kueue_queue_name = {QUEUE!r}
        c.GPUSpawner.gpu_queue_timeout = 600
        c.GPUSpawner.gpu_monitor_interval = 1
        c.GPUSpawner.bookings = {{
            "groups": {{"staff": {{"max_gpus": 1, "max_hours": 2, "days_ahead": 1}}}},
            "warn_before": 60,
        }}
    """
    hub = start_hub(tmp_path / "hub", hub_config(kube.namespace, extra))
    name = ""
    try:
        assert hub.api("POST", "/users/ada").status_code == 201
        assert hub.api("POST", "/groups/staff").status_code == 201
        assert hub.api("POST", "/groups/staff/users", json={"users": ["ada"]}).status_code == 200
        now = time.time()
        body = {
            "gpu_type": "local",
            "gpus": 1,
            "start": iso(now + 2),
            "end": iso(now + 3600),
            "for": {"user": "ada"},
            "reason": "paper deadline",
        }
        made = hub.api("POST", "/gpuhub/bookings", json=body)
        assert made.status_code == 201, made.text
        name = kb.queue_name(made.json()["id"])

        # At the start the hub's monitor moves the GPU: the booking's queue has it, the
        # hub's has none, and the borrower still runs (lent, until Kueue reclaims it).
        kube.wait_for(lambda: gpu_quota(kube, name, flavor) == 1, timeout=60)
        assert gpu_quota(kube, main, flavor) == 0
        kube.wait_for(lambda: kube.get("LocalQueue", name, api_version=KUEUE), timeout=30)
        assert not preempted(kube, lent)

        # ada's server waits in her booking's queue; Kueue preempts the borrower for it.
        assert spawn(hub, "ada", ONE_GPU).status_code in (201, 202)
        pod = kube.wait_for(lambda: kube.get("Pod", "jupyter-ada"), timeout=60)
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == name
        kube.wait_for(lambda: preempted(kube, lent), timeout=120)
        kube.wait_for(lambda: kube.get("Pod", "borrower") is None, timeout=60)
        wait_ready(hub, "ada", timeout=180)

        # Cancelled: the GPU is back in the hub's queue and the booking's LocalQueue goes;
        # its ClusterQueue, with no quota left, goes once ada's server stops.
        assert hub.api("DELETE", f"/gpuhub/bookings/{made.json()['id']}").status_code == 204
        kube.wait_for(lambda: gpu_quota(kube, main, flavor) == 1, timeout=60)
        kube.wait_for(lambda: kube.get("LocalQueue", name, api_version=KUEUE) is None, timeout=60)
        stop(hub, "ada")
        kube.wait_for(
            lambda: kube.get("ClusterQueue", name, api_version=KUEUE) is None, timeout=120
        )
    finally:
        hub.stop()
        kube.delete("Pod", "borrower", gracePeriodSeconds=0)
        if name:
            kube.delete("ClusterQueue", name, api_version=KUEUE)
