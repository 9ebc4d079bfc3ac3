"""A fair queue on the real Kueue: each user waits in a LocalQueue of their own, and Kueue's
admission fair sharing admits the one who used less first.

One setup checks it all, as the hub meets it: the chart's RBAC with ``line_order: fair`` lets
the hub's ServiceAccount make LocalQueues in the servers' namespace (nowhere else); as that
account, gpuhub finds fair sharing on (:meth:`KueueAPI.fair_sharing`) and makes heavy's and
light's LocalQueues (:meth:`KueueAPI.user_queue`); heavy's workload holds the queue's only
GPU until Kueue counts the usage; heavy then asks again, light after heavy, and when heavy's
first workload ends Kueue admits light's, while the visibility API already put light first.
Those workloads are made directly (no pods), so nothing waits on a scheduler. Last, heavy's
job, submitted by the jobs service's backend with the fair setting, waits in heavy's queue
too, a newcomer's later workload goes first, and the job's message says the queue favours
who used least.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio import config as kube_config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.k8s.kueue import (
    FAIR_QUEUE_WORDS,
    KueueAPI,
    NotOurQueue,
    user_queue_name,
    waiting_words,
)
from gpuhub.k8s.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
    user_label,
)
from harness.cluster import Kube
from harness.helm import HELM, can_i, install, make_chart, render, served_api_versions
from localk8s.kubeapi import kubeconfig
from tests.support.jobs_service import NOTEBOOK_OK, cluster_request, write_notebook
from tests.support.kueue import kueue_queues
from tests.support.policies import cluster_policy

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed"),
]

T = TypeVar("T")
GPU_NAMES = {k: t.display_name for k, t in cluster_policy().gpu_types.items()}
WORKLOADS = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


def workload(name: str, queue: str) -> dict[str, Any]:
    """A Workload of one pod asking for one GPU (what Kueue makes for a GPU server's pod)."""
    container = {"name": "main", "image": "busybox", "resources": {"requests": {GPU: "1"}}}
    return {
        "apiVersion": WORKLOADS,
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


async def eventually(check: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
    """Ask ``check`` until its answer is ``done`` (30 s at most); the last answer."""
    deadline = time.monotonic() + 30
    while not done(found := await check()) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return found


def admitted(kube: Kube, name: str) -> bool:
    found = kube.get("Workload", name, api_version=WORKLOADS) or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


def consumed_gpus(kube: Kube, queue: str) -> float:
    """What Kueue counts of a LocalQueue's past GPU usage (0 where it counts none yet)."""
    found = kube.get("LocalQueue", queue, api_version=WORKLOADS) or {}
    status = ((found.get("status") or {}).get("fairSharing") or {}).get(
        "admissionFairSharingStatus"
    ) or {}
    value = str((status.get("consumedResources") or {}).get(GPU, "0"))
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3}.get(value[-1:], 1.0)
    return float(value.rstrip("num") or 0) * scale


async def test_kueue_admits_the_lighter_users_workload_first(kube: Kube, tmp_path: Path) -> None:
    kube.require_local("Kueue configured with admission fair sharing (localk8s/addons.py)")
    queues = kueue_queues(kube, gpus=1, local_queue="gpus", fair=True)
    # The chart, with line_order: fair: the hub may make LocalQueues here, and only here.
    hub_account = f"system:serviceaccount:{kube.namespace}:hub"
    values = {
        "jupyterhub": {
            "hub": {"config": {"GPUSpawner": {"kueue_queue_name": "gpus", "line_order": "fair"}}}
        }
    }
    objects = render(
        make_chart(tmp_path / "chart"),
        values=values,
        namespace=kube.namespace,
        api_versions=served_api_versions(kube),
    )
    install(kube, [o for o in objects if o["metadata"]["name"].endswith("hub-kueue")])
    kube.wait_for(
        lambda: can_i(kube, "create", "localqueues.kueue.x-k8s.io", kube.namespace, hub_account)
    )
    assert not can_i(kube, "create", "localqueues.kueue.x-k8s.io", "default", hub_account)
    assert not can_i(kube, "delete", "localqueues.kueue.x-k8s.io", kube.namespace, hub_account)

    # gpuhub, as the hub's ServiceAccount.
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "hub"}})
    token = kube.api.token(kube.namespace, "hub", 600)
    path = tmp_path / "hub-kubeconfig"
    path.write_text(
        kubeconfig(kube.api.server, kube.api.ca, token=token, user="hub", namespace=kube.namespace)
    )
    client = await kube_config.new_client_from_config(config_file=str(path))
    try:
        api = KueueAPI(client)
        # Kueue writes every LocalQueue's usage status once it has reconciled it.
        fair = await eventually(
            lambda: api.fair_sharing(kube.namespace, "gpus"), lambda found: found.on
        )
        assert fair.on and fair.cluster_queue == queues.cluster_queue, fair
        heavy_q = await api.user_queue(kube.namespace, "gpus", "heavy", fair.cluster_queue)
        light_user = "Light.User@example.org"
        light_q = await api.user_queue(kube.namespace, "gpus", light_user, fair.cluster_queue)
        assert heavy_q == user_queue_name("gpus", "heavy") == "gpus-heavy"
        assert light_q.startswith("gpus-") and len(light_q) <= 63 and light_q != heavy_q
        # Asked again (a hub restarted, another spawn): the same queue, no error.
        again = await KueueAPI(client).user_queue(
            kube.namespace, "gpus", "heavy", fair.cluster_queue
        )
        assert again == heavy_q
        made = kube.get("LocalQueue", light_q, api_version=WORKLOADS) or {}
        assert made["spec"]["clusterQueue"] == queues.cluster_queue
        assert made["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
        assert made["metadata"]["labels"][USER_LABEL] == user_label(light_user)
        assert made["metadata"]["annotations"][USERNAME_ANNOTATION] == light_user
        # A queue of that name that is not gpuhub's for that user is never used: someone
        # named "team" does not wait in the admin's queue "gpus-team".
        kube.create(
            {
                "apiVersion": WORKLOADS,
                "kind": "LocalQueue",
                "metadata": {"name": "gpus-team"},
                "spec": {"clusterQueue": queues.cluster_queue},
            }
        )
        with pytest.raises(NotOurQueue, match="gpus-team exists but is not team's queue"):
            await api.user_queue(kube.namespace, "gpus", "team", fair.cluster_queue)
        # As the hub and the jobs service ask: team keeps the admin's queue (""), heavy his own.
        assert await api.own_queue(kube.namespace, "gpus", "team", "jobs") == ""
        assert await api.own_queue(kube.namespace, "gpus", "heavy", "jobs") == heavy_q

        # heavy holds the only GPU until Kueue has counted some of its use.
        kube.create(workload("heavy-1", heavy_q))
        kube.wait_for(lambda: admitted(kube, "heavy-1"), timeout=30)
        kube.wait_for(lambda: consumed_gpus(kube, heavy_q) > 0, timeout=30)
        # heavy asks again, then light: both wait, and light is first in the ClusterQueue.
        kube.create(workload("heavy-2", heavy_q))
        kube.create(workload("light-1", light_q))

        async def places() -> tuple[int | None, int | None]:
            """(heavy's second, light's) place in the ClusterQueue, as the hub reads them."""
            heavy_line = await api.line(kube.namespace, heavy_q)
            light_line = await api.line(kube.namespace, light_q)
            return (
                next((p.in_cluster_queue for p in heavy_line or [] if p.name == "heavy-2"), None),
                next((p.in_cluster_queue for p in light_line or [] if p.name == "light-1"), None),
            )

        found = await eventually(places, lambda found: found == (2, 1))
        assert found == (2, 1), found  # light, who came later, is next
        assert not admitted(kube, "heavy-2") and not admitted(kube, "light-1")
        said = waiting_words("gpus", gpus=1, place=2, line=[], fair=True)
        assert (
            said == f'Waiting in queue "gpus" for 1 GPU: you are 2nd in line; {FAIR_QUEUE_WORDS}.'
        )
        # The GPU comes back: Kueue admits light's workload, heavy's waits on.
        kube.delete("Workload", "heavy-1", api_version=WORKLOADS)
        kube.wait_for(lambda: admitted(kube, "light-1"), timeout=30)
        assert not admitted(kube, "heavy-2")
    finally:
        await client.close()

    # heavy's job (the jobs service, line_order fair) waits in heavy's queue too, and a
    # newcomer who never used a GPU, asking after it, goes first (not light, whose admitted
    # workload now adds to light's usage); the job's place is its place in the ClusterQueue
    # and its message says why, with the queue's own name.
    settings = m.KubeJobSettings(
        namespace=kube.namespace, job_image="img:1", kueue_queue="gpus", kueue_fair=True
    )
    api = await kube_config.new_client_from_config(config_file=str(kube.kubeconfig))
    backend = KubernetesBackend(api, settings, gpu_names=GPU_NAMES)
    try:
        root = tmp_path / "home"
        write_notebook(root / "train.ipynb", NOTEBOOK_OK)
        request = cluster_request(root, gpus=1, gpu_type="a100")
        job = await backend.submit(request, "heavy", notebook=(root / "train.ipynb").read_bytes())
        made = kube.get("Job", job.id) or {}
        assert made["metadata"]["labels"][QUEUE_NAME_LABEL] == heavy_q
        new_q = await backend.kueue.user_queue(kube.namespace, "gpus", "new", fair.cluster_queue)
        kube.create(workload("new-1", new_q))

        async def seen() -> tuple[int | None, int | None, int | None]:
            """(the job's place as the backend says it, as the visibility API does; new-1's)"""
            record = await backend.get("heavy", job.id)
            uid = made["metadata"]["uid"]
            heavy_line = await backend.kueue.line(kube.namespace, heavy_q) or []
            new_line = await backend.kueue.line(kube.namespace, new_q) or []
            return (
                record.queue_position,
                next(
                    (p.in_cluster_queue for p in heavy_line if uid in {o[2] for o in p.owners}),
                    None,
                ),
                next((p.in_cluster_queue for p in new_line if p.name == "new-1"), None),
            )

        said, listed, new = await eventually(
            seen, lambda f: f[0] is not None and f[0] == f[1] and f[2] == 1
        )
        assert new == 1 and said == listed and said in (2, 3), (said, listed, new)
        record = await backend.get("heavy", job.id)
        assert record.status == "queued", record
        assert record.message.startswith('Waiting in queue "gpus" for 1 NVIDIA A100'), record
        assert record.message.endswith(f"{FAIR_QUEUE_WORDS}."), record
    finally:
        await backend.close()
