"""A job waiting in Kueue's queue keeps its place against the GPU quota: a real JupyterHub
with gpuhub's ledger endpoints, the jobs service (its own process) with
``kueue: {queue_name: gpu-jobs}``, kubesim with its Kueue as the cluster.

A queued job has no pods, so the hub's pod watch does not see it; the grant the service got
at submit counts it, and the service renews that grant while the job waits
(``gpuhub.service.holds``). Here the hub's grants last 2 seconds, so that a lapse shows.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes_asyncio import config as kube_config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.service.holds import renew_once
from gpuhub.service.quota import HubQuota
from tests.kubesim import KubeSimThread
from tests.kubesim.pytest_plugin import hub_cluster
from tests.support.hub.kube import hub_config
from tests.support.hub.process import Hub, free_port, start_hub
from tests.support.jobs_service import NOTEBOOK_OK, jobs_service, write_notebook
from tests.support.kueue import kueue_queues
from tests.support.policies import DESIGN_CONFIG

pytestmark = pytest.mark.e2e

SERVICE_TOKEN = "gpuhub-kueue-service-token-0123456789"
USER_SCOPES = ["access:services!service=gpuhub", "read:users:groups!user"]
QUOTA = {"default": 4, "groups": {}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimThread]:
    with hub_cluster(tmp_path_factory.mktemp("kubesim") / "kubeconfig") as sim:
        kueue_queues(sim, gpus=2, local_queue="gpu-jobs", cpu=256, memory="2Ti")
        yield sim


@pytest.fixture(scope="module")
def service_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def hub(
    cluster: KubeSimThread, service_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    extra = textwrap.dedent(
        f"""
        import gpuhub.hub_api
        from gpuhub.hub_api import configure_hub
        configure_hub(c)
        gpuhub.hub_api.GRANT_SECONDS = 2.0
        c.GPUSpawner.gpu_quota = {QUOTA!r}
        c.JupyterHub.allow_named_servers = True
        c.Authenticator.allowed_users = {{"alice"}}
        c.JupyterHub.services.append(
            {{"name": "gpuhub", "url": "http://127.0.0.1:{service_port}",
              "api_token": {SERVICE_TOKEN!r}, "display": False}}
        )
        c.JupyterHub.load_roles.append(
            {{"name": "user", "scopes": ["self", "access:services!service=gpuhub"]}}
        )
        c.JupyterHub.load_roles.append(
            {{"name": "gpuhub-service", "services": ["gpuhub"],
              "scopes": ["read:users:name", "read:users:groups", "custom:gpuhub:grants"]}}
        )
        """
    )
    running = start_hub(tmp_path_factory.mktemp("kueue-hub"), hub_config(extra))
    try:
        running.api("POST", "/users/alice")
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def service(
    hub: Hub, cluster: KubeSimThread, service_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    config = {
        "namespace": "default",
        "policy": {**DESIGN_CONFIG, "default_limits": {"max_gpus": 16}},
        "gpu_quota": QUOTA,
        "job_image": "ghcr.io/gpuhub/gpuhub-notebook:0.1.0",
        "kueue": {"queue_name": "gpu-jobs"},
    }
    with jobs_service(
        tmp_path_factory.mktemp("kueue-service"),
        config,
        hub_api_url=hub.api_url,
        token=SERVICE_TOKEN,
        port=service_port,
        kubeconfig=cluster.kubeconfig,
        # The service's own renewal runs at start only here; the test renews by hand.
        extra_env={"GPUHUB_HOLD_SECONDS": "3600"},
    ) as running:
        yield running.url


def renew(hub: Hub, cluster: KubeSimThread) -> int:
    """The service's renewal of queued jobs' grants (every minute), once, now."""

    async def once() -> int:
        api = await kube_config.new_client_from_config(config_file=str(cluster.kubeconfig))
        kube = KubernetesBackend(api, m.KubeJobSettings(kueue_queue="gpu-jobs"))
        try:
            quota = HubQuota(hub.api_url, SERVICE_TOKEN, kube.own_quota(None))
            return await renew_once(kube, quota)
        finally:
            await kube.close()

    return asyncio.run(once())


def held(hub: Hub) -> int:
    answer = requests.get(
        f"{hub.api_url}/gpuhub/holdings/alice",
        headers={"Authorization": f"token {SERVICE_TOKEN}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["held"])


def test_a_queued_job_holds_its_place_against_the_quota(
    hub: Hub, service: str, cluster: KubeSimThread, tmp_path: Any
) -> None:
    token = hub.api("POST", "/users/alice/tokens", json={"scopes": USER_SCOPES}).json()["token"]
    text = write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK).read_text()

    def submit(gpus: int) -> requests.Response:
        return requests.post(
            service + "jobs",
            headers={"Authorization": f"token {token}"},
            json={
                "notebook": "train.ipynb",
                "notebook_content": text,
                "gpu_type": "a100",
                "gpus": gpus,
            },
            timeout=60,
        )

    running = submit(2)
    assert running.status_code == 201, running.text
    queued = submit(2)  # the ClusterQueue has 2 A100s: this one waits in line
    assert queued.status_code == 201, queued.text
    queued_id = queued.json()["id"]
    cluster.wait_for(
        lambda: cluster.list("Pod", "default", labels={m.LABEL_JOB_ID: running.json()["id"]})
    )
    job = requests.get(
        service + f"jobs/{queued_id}", headers={"Authorization": f"token {token}"}, timeout=30
    ).json()
    assert job["status"] == "queued" and job["queue_position"] == 1
    # Without renewal the queued job's grant lapses (2 s here) and it would vanish from the
    # quota: the running job's pods still count, the queued job's GPUs do not.
    deadline = time.monotonic() + 10
    while held(hub) != 2:
        assert time.monotonic() < deadline, "the grant did not lapse"
        time.sleep(0.2)

    # The service's renewal (every minute; once here): the queued job counts again, and a
    # further GPU is over alice's quota of 4.
    assert renew(hub, cluster) == 1
    assert held(hub) == 4
    over = submit(1)
    assert over.status_code == 403, over.text
    assert "4 of your quota of 4" in over.json()["message"]
    # Cancelling the queued job gives its place back at once (the service releases it).
    cancelled = requests.delete(
        service + f"jobs/{queued_id}", headers={"Authorization": f"token {token}"}, timeout=60
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert held(hub) == 2


class Jobs:
    """alice's jobs through the jobs service, as her JupyterLab submits them."""

    def __init__(self, hub: Hub, service: str, tmp_path: Any) -> None:
        self.service = service
        token = hub.api("POST", "/users/alice/tokens", json={"scopes": USER_SCOPES}).json()
        self.headers = {"Authorization": f"token {token['token']}"}
        self.text = write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK).read_text()

    def submit(self, gpus: int) -> dict[str, Any]:
        """Submit, then wait until Kueue decided: admitted, or waiting with a place."""
        answer = requests.post(
            self.service + "jobs",
            headers=self.headers,
            json={
                "notebook": "train.ipynb",
                "notebook_content": self.text,
                "gpu_type": "a100",
                "gpus": gpus,
            },
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        deadline = time.monotonic() + 30
        while True:
            job = self.get(answer.json()["id"])
            if job["status"] != "queued" or job.get("queue_position") is not None:
                return job
            assert time.monotonic() < deadline, job
            time.sleep(0.2)

    def get(self, job_id: str) -> dict[str, Any]:
        return requests.get(
            self.service + f"jobs/{job_id}", headers=self.headers, timeout=30
        ).json()

    def cancel_all(self, cluster: KubeSimThread) -> None:
        """Cancel every job of alice's that has not ended, and wait until Kueue let go of
        them (their Workloads are gone), so the next job finds the ClusterQueue empty."""
        listed = requests.get(self.service + "jobs", headers=self.headers, timeout=30).json()
        for job in listed.get("jobs", []):
            if job["status"] in ("queued", "pending", "running"):
                requests.delete(
                    self.service + f"jobs/{job['id']}", headers=self.headers, timeout=60
                )
        cluster.wait_for(lambda: not cluster.list("Workload", "default"), timeout=60)


def test_a_queued_jobs_grant_is_settled_by_its_own_pods_only(
    hub: Hub, service: str, cluster: KubeSimThread, tmp_path: Any
) -> None:
    """The ledger matches a job's grant to pods by the job's kind and uid: a pod of some
    other object that carries the queued job's id (and owner) settles nothing; both count."""
    jobs = Jobs(hub, service, tmp_path)
    jobs.cancel_all(cluster)
    running = jobs.submit(2)  # the ClusterQueue has 2 A100s: the next one waits in line
    assert running["status"] != "queued", running
    queued = jobs.submit(2)
    assert queued["status"] == "queued" and queued["queue_position"] == 1, queued
    renew(hub, cluster)
    assert held(hub) == 4
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "not-the-queued-job",
                "namespace": "default",
                "labels": {
                    m.LABEL_MANAGED_BY: m.MANAGED_BY,
                    m.LABEL_USER: m.user_label("alice"),
                    m.LABEL_JOB_ID: queued["id"],
                    m.LABEL_KIND: "job",
                },
                "annotations": {m.ANNOTATION_USERNAME: "alice"},
            },
            "spec": {
                "nodeSelector": {"gpuhub.io/no-such-node": "true"},  # stays pending
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "2"}},
                    }
                ],
            },
        }
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            renew(hub, cluster)
            now = held(hub)
            if now == 6:
                break  # the pod counts, and so does the queued job's grant
            assert now <= 6, now
            assert time.monotonic() < deadline, f"held {now}, not 6"
            time.sleep(0.2)
    finally:
        cluster.delete("Pod", "not-the-queued-job")
        jobs.cancel_all(cluster)


def test_a_server_named_like_a_queued_job_counts_apart_from_it(
    hub: Hub, service: str, cluster: KubeSimThread, tmp_path: Any
) -> None:
    """A server's grant is the server's (user and name), a job's is the job's: a named server
    whose name is a queued job's id neither replaces nor settles the job's grant."""
    jobs = Jobs(hub, service, tmp_path)
    jobs.cancel_all(cluster)
    running = jobs.submit(1)
    assert running["status"] != "queued", running
    queued = jobs.submit(2)  # 1 of the ClusterQueue's 2 A100s is left: it waits
    assert queued["status"] == "queued", queued
    name = queued["id"]
    answer = hub.api("POST", f"/users/alice/servers/{name}", json={"gpus": 1, "gpu_type": "a100"})
    assert answer.status_code in (201, 202), answer.text
    try:
        # 1 running + 2 queued + 1 for the server (its grant, then its pod): 4 of 4.
        deadline = time.monotonic() + 60
        while True:
            renew(hub, cluster)
            assert held(hub) == 4
            pods = cluster.list("Pod", "default", labels={"component": "singleuser-server"})
            if any(
                p["metadata"]["annotations"].get("hub.jupyter.org/servername") == name for p in pods
            ):
                break
            assert time.monotonic() < deadline, "the server's pod did not show"
            time.sleep(0.2)
        renew(hub, cluster)
        assert held(hub) == 4
        refused = requests.post(
            service + "jobs",
            headers=jobs.headers,
            json={
                "notebook": "train.ipynb",
                "notebook_content": jobs.text,
                "gpu_type": "a100",
                "gpus": 1,
            },
            timeout=60,
        )
        assert refused.status_code == 403 and "4 of your quota of 4" in refused.json()["message"]
    finally:
        hub.api("DELETE", f"/users/alice/servers/{name}")
        jobs.cancel_all(cluster)
