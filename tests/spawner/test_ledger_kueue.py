"""A job waiting in Kueue's queue keeps its place against the GPU quota: a real JupyterHub
with gpuhub's ledger endpoints, the jobs service (its own process) with
``kueue: {queue_name: gpu-jobs}``, both under the chart's RBAC for that queue, on the test
cluster with the real Kueue (tests/support/hub/jobs_on_cluster.py).

A queued job has no pods, so the hub's pod watch does not see it; the grant the service got
at submit counts it, and the service renews that grant while the job waits
(``gpuhub.service.holds``). Here the hub's grants last 2 seconds, so that a lapse shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes_asyncio import config as kube_config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.service.holds import renew_once
from gpuhub.service.quota import HubQuota
from tests.support.cluster import Kube
from tests.support.hub.jobs_on_cluster import CLUSTER_POLICY, JobsOnCluster, jobs_on_cluster
from tests.support.jobs_service import NOTEBOOK_OK, write_notebook
from tests.support.kueue import kueue_queues

pytestmark = pytest.mark.e2e

QUEUE = "gpu-jobs"
QUOTA = {"default": 4, "groups": {}}


@pytest.fixture(scope="module")
def jobs(module_kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsOnCluster]:
    kueue_queues(
        module_kube,
        gpus=2,
        local_queue=QUEUE,
        cpu=256,
        memory="2Ti",
        namespace=module_kube.namespace,
    )
    config = {
        "policy": {**CLUSTER_POLICY, "default_limits": {"max_gpus": 16}},
        "gpu_quota": QUOTA,
        "kueue": {"queue_name": QUEUE},
    }
    hub = """
        import gpuhub.hub_api
        gpuhub.hub_api.GRANT_SECONDS = 2.0
        """
    with jobs_on_cluster(
        module_kube,
        tmp_path_factory.mktemp("ledger-kueue"),
        users={"alice": []},
        service_config=config,
        ledger=True,
        hub_extra=hub,
        chart_values={"jobs": {"kueue": {"queueName": QUEUE}}},
        # The service's own renewal runs at start only here; the test renews by hand.
        service_env={"GPUHUB_HOLD_SECONDS": "3600"},
    ) as running:
        yield running


def test_a_queued_job_holds_its_place_against_the_quota(jobs: JobsOnCluster, tmp_path: Any) -> None:
    cluster = jobs.kube
    token = jobs.token("alice")
    text = write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK).read_text()

    def submit(gpus: int) -> requests.Response:
        body = {"notebook": "train.ipynb", "notebook_content": text, "gpu_type": "a100"}
        return jobs.call("POST", "jobs", token, json={**body, "gpus": gpus})

    running = submit(2)
    assert running.status_code == 201, running.text
    # Kueue admits the first (the ClusterQueue has 2 A100s) and its pods start.
    cluster.wait_for(lambda: cluster.list("Pod", labels={m.LABEL_JOB_ID: running.json()["id"]}))
    queued = submit(2)  # this one waits in line
    assert queued.status_code == 201, queued.text
    queued_id = queued.json()["id"]

    def in_line() -> dict[str, Any] | None:
        # Kueue makes the job's Workload and finds no quota for it a moment after the create.
        job = jobs.call("GET", f"jobs/{queued_id}", token).json()
        return job if job["status"] == "queued" and job["queue_position"] == 1 else None

    job = cluster.wait_for(in_line, timeout=30)
    assert job["message"], job  # Kueue's reason
    # Without renewal the queued job's grant lapses (2 s here) and it would vanish from the
    # quota: the running job's pods still count, the queued job's GPUs do not.
    cluster.wait_for(lambda: jobs.held("alice") == 2, timeout=10, interval=0.2)

    async def renew() -> int:
        # As the service does it: its own credentials (the chart's ServiceAccount).
        api = await kube_config.new_client_from_config(config_file=str(jobs.service_kubeconfig))
        kube = KubernetesBackend(
            api, m.KubeJobSettings(namespace=cluster.namespace, kueue_queue=QUEUE)
        )
        try:
            quota = HubQuota(jobs.hub.api_url, jobs.service_token, kube.own_quota(None))
            return await renew_once(kube, quota)
        finally:
            await kube.close()

    # The service's renewal (every minute; once here): the queued job counts again, and a
    # further GPU is over alice's quota of 4.
    assert asyncio.run(renew()) == 1
    assert jobs.held("alice") == 4
    over = submit(1)
    assert over.status_code == 403, over.text
    assert "4 of your quota of 4" in over.json()["message"]
    # Cancelling the queued job gives its place back at once (the service releases it).
    cancelled = jobs.call("DELETE", f"jobs/{queued_id}", token)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert jobs.held("alice") == 2
