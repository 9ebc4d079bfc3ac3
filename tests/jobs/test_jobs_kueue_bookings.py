"""A booker's jobs wait in their booking's Kueue queue (issue 38): the Kubernetes backend, on
the test cluster's real Kueue, submits a job of a user with a booking of its GPU type in
force into the LocalQueue the hub made for the booking (gpuhub.hub.monitor.booking_queues),
where Kueue admits it on the booked quota; others' jobs, and the booker's of another type,
wait in the admin's queue."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import config

from gpuhub.core.bookings import Booking
from gpuhub.core.policy import GPUType
from gpuhub.hub.monitor import booking_queues
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.k8s import kueue_bookings as kb
from gpuhub.k8s.labels import QUEUE_NAME_LABEL
from harness.cluster import Kube
from tests.support.jobs_service import NOTEBOOK_OK, cluster_request, write_notebook
from tests.support.kueue import A100, KUEUE, kueue_queues
from tests.support.policies import cluster_policy

pytestmark = pytest.mark.e2e

QUEUE = "gpu-jobs"
TYPES = {"a100": GPUType("a100", "A100", "nvidia.com/gpu", 2, A100)}
SETTINGS = m.KubeJobSettings(
    namespace="default", job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0", kueue_queue=QUEUE
)


@pytest.fixture
async def backend(kube: Kube) -> AsyncIterator[KubernetesBackend]:
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    names = {k: t.display_name for k, t in cluster_policy().gpu_types.items()}
    settings = dataclasses.replace(SETTINGS, namespace=kube.namespace)
    backend = KubernetesBackend(api, settings, gpu_names=names)
    try:
        yield backend
    finally:
        await backend.close()


async def test_a_bookers_job_waits_in_the_bookings_queue(
    kube: Kube, kube_api: Any, backend: KubernetesBackend, tmp_path: Any
) -> None:
    queues = kueue_queues(kube, 2, local_queue=QUEUE, cpu=256, memory="2Ti")
    kube.patch(
        "ClusterQueue",
        queues.cluster_queue,
        {"spec": {"cohort": kube.namespace}},
        api_version=KUEUE,
    )
    mine = Booking(
        f"b-{secrets.token_hex(4)}", "a100", 1, time.time() - 1, time.time() + 3600, for_user="ada"
    )
    name = kb.queue_name(mine.id)
    write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK)
    notebook = (tmp_path / "train.ipynb").read_bytes()

    def queue_of(job_id: str) -> str:
        job = kube.get("Job", job_id)
        assert job is not None
        return str(job["metadata"]["labels"][QUEUE_NAME_LABEL])

    try:
        await booking_queues.reconcile(kube_api, kube.namespace, QUEUE, [mine], TYPES)
        local = kube.get("LocalQueue", name, api_version=KUEUE)
        assert local is not None
        assert local["metadata"]["annotations"][kb.BOOKING_USER] == "ada"
        assert local["metadata"]["annotations"][kb.BOOKING_GPU_TYPE] == "a100"

        gpu = cluster_request(tmp_path, gpus=1, gpu_type="a100")
        booked = await backend.submit(gpu, "ada", notebook=notebook)
        assert queue_of(booked.id) == name
        # Kueue admits it on the booked quota, in the booking's ClusterQueue.
        kube.wait_for(lambda: admitted_in(kube, booked.id) == name, timeout=60)

        other = await backend.submit(gpu, "bob", notebook=notebook)
        assert queue_of(other.id) == QUEUE
        cpu_only = await backend.submit(cluster_request(tmp_path), "ada", notebook=notebook)
        assert queue_of(cpu_only.id) == QUEUE
    finally:
        await booking_queues.reconcile(kube_api, kube.namespace, QUEUE, [], TYPES)
        kube.delete("ClusterQueue", name, api_version=KUEUE)


def admitted_in(kube: Kube, job_id: str) -> str:
    """The ClusterQueue that admitted the Workload of ``job_id`` ("" while none has)."""
    for workload in kube.list("Workload", api_version=KUEUE):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(r.get("name") == job_id for r in owners):
            return str(
                ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or ""
            )
    return ""
