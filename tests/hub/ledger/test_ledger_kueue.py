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
import html
import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import requests
from kubernetes_asyncio import config as kube_config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    KIND_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from gpuhub.service.holds import renew_once
from gpuhub.service.quota import HubQuota
from harness.cluster import Kube
from harness.hub.process import API_TOKEN
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
    )
    config = {
        "policy": {**CLUSTER_POLICY, "default_limits": {"max_gpus": 16}},
        "gpu_quota": QUOTA,
        "kueue": {"queue_name": QUEUE},
    }
    hub = """
        import gpuhub.hub.web.grants
        gpuhub.hub.web.grants.GRANT_SECONDS = 2.0
        c.JupyterHub.allow_named_servers = True
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


def renew(jobs: JobsOnCluster) -> int:
    """The service's renewal of queued jobs' grants (every minute), once, now: as the service
    does it, with its own credentials (the chart's ServiceAccount)."""

    async def once() -> int:
        api = await kube_config.new_client_from_config(config_file=str(jobs.service_kubeconfig))
        kube = KubernetesBackend(
            api, m.KubeJobSettings(namespace=jobs.kube.namespace, kueue_queue=QUEUE)
        )
        try:
            quota = HubQuota(jobs.hub.api_url, jobs.service_token, kube.own_quota(None))
            return await renew_once(kube, quota)
        finally:
            await kube.close()

    return asyncio.run(once())


class AlicesJobs:
    """alice's jobs through the jobs service, as her JupyterLab submits them."""

    def __init__(self, jobs: JobsOnCluster, tmp_path: Any) -> None:
        self.jobs = jobs
        self.token = jobs.token("alice")
        self.text = write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK).read_text()

    def post(self, gpus: int) -> requests.Response:
        body = {"notebook": "train.ipynb", "notebook_content": self.text, "gpu_type": "a100"}
        return self.jobs.call("POST", "jobs", self.token, json={**body, "gpus": gpus})

    def submit(self, gpus: int) -> dict[str, Any]:
        """Submit, then wait until Kueue decided: admitted, or waiting with a place."""
        answer = self.post(gpus)
        assert answer.status_code == 201, answer.text

        def decided() -> dict[str, Any] | None:
            job = self.jobs.call("GET", f"jobs/{answer.json()['id']}", self.token).json()
            return job if job["status"] != "queued" or job.get("queue_position") else None

        return dict(self.jobs.kube.wait_for(decided, timeout=30))

    def cancel_all(self) -> None:
        """Cancel every job of alice's that has not ended, and wait until Kueue let go of
        them (their Workloads are gone), so the next job finds the ClusterQueue empty."""
        listed = self.jobs.call("GET", "jobs", self.token).json()
        for job in listed.get("jobs", []):
            if job["status"] in ("queued", "pending", "running"):
                self.jobs.call("DELETE", f"jobs/{job['id']}", self.token)
        self.jobs.kube.wait_for(lambda: not self.jobs.kube.list("Workload"), timeout=60)


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
    cluster.wait_for(lambda: cluster.list("Pod", labels={JOB_ID_LABEL: running.json()["id"]}))
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
    cluster.wait_for(lambda: jobs.counted("alice") == 2, timeout=10, interval=0.2)

    # The service's renewal (every minute; once here): the queued job counts again, and a
    # further GPU is over alice's quota of 4.
    assert renew(jobs) == 1
    assert jobs.counted("alice") == 4
    over = submit(1)
    assert over.status_code == 403, over.text
    assert "4 of your quota of 4" in over.json()["message"]
    # Cancelling the queued job gives its place back at once (the service releases it).
    cancelled = jobs.call("DELETE", f"jobs/{queued_id}", token)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert jobs.counted("alice") == 2


def test_a_queued_jobs_grant_is_settled_by_its_own_pods_only(
    jobs: JobsOnCluster, tmp_path: Any
) -> None:
    """The ledger matches a job's grant to pods by the job's kind and uid: a pod of some
    other object that carries the queued job's id (and owner) settles nothing; both count."""
    alice = AlicesJobs(jobs, tmp_path)
    cluster = jobs.kube
    alice.cancel_all()
    running = alice.submit(2)  # the ClusterQueue has 2 A100s: the next one waits in line
    assert running["status"] != "queued", running
    queued = alice.submit(2)
    assert queued["status"] == "queued" and queued["queue_position"] == 1, queued
    renew(jobs)
    assert jobs.counted("alice") == 4
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "not-the-queued-job",
                "labels": {
                    MANAGED_BY_LABEL: MANAGED_BY,
                    USER_LABEL: m.user_label("alice"),
                    JOB_ID_LABEL: queued["id"],
                    KIND_LABEL: "job",
                },
                "annotations": {USERNAME_ANNOTATION: "alice"},
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

        def both_count() -> bool:  # the pod counts, and so does the queued job's grant
            renew(jobs)
            now = jobs.counted("alice")
            assert now <= 6, now
            return now == 6

        cluster.wait_for(both_count, timeout=30, interval=0.2)
    finally:
        cluster.delete("Pod", "not-the-queued-job", gracePeriodSeconds=0)
        alice.cancel_all()


def test_a_server_named_like_a_queued_job_counts_apart_from_it(
    jobs: JobsOnCluster, tmp_path: Any
) -> None:
    """A server's grant is the server's (user and name), a job's is the job's: a named server
    whose name is a queued job's id neither replaces nor settles the job's grant."""
    alice = AlicesJobs(jobs, tmp_path)
    cluster, hub = jobs.kube, jobs.hub
    alice.cancel_all()
    running = alice.submit(1)
    assert running["status"] != "queued", running
    queued = alice.submit(2)  # 1 of the ClusterQueue's 2 A100s is left: it waits
    assert queued["status"] == "queued", queued
    name = queued["id"]
    answer = hub.api("POST", f"/users/alice/servers/{name}", json={"gpus": 1, "gpu_type": "a100"})
    assert answer.status_code in (201, 202), answer.text
    try:
        # 1 running + 2 queued + 1 for the server (its grant, then its pod): 4 of 4.
        def server_pod_seen() -> bool:
            renew(jobs)
            assert jobs.counted("alice") == 4
            pods = cluster.list("Pod", labels={"component": "singleuser-server"})
            return any(
                p["metadata"]["annotations"].get("hub.jupyter.org/servername") == name for p in pods
            )

        cluster.wait_for(server_pod_seen, timeout=60, interval=0.2)
        renew(jobs)
        assert jobs.counted("alice") == 4
        refused = alice.post(1)
        assert refused.status_code == 403 and "4 of your quota of 4" in refused.json()["message"]
    finally:
        hub.api("DELETE", f"/users/alice/servers/{name}")
        alice.cancel_all()


def test_a_queued_job_waits_and_holds_nothing_on_every_screen(
    jobs: JobsOnCluster, tmp_path: Any
) -> None:
    """A job queued in Kueue keeps its place against the quota, but nothing calls it held:
    the holdings API, the quota's sentence, alice's fleet page and /hub/metrics say it waits
    in Kueue's queue; only the admitted job's bound pods are held, and billed."""
    alice = AlicesJobs(jobs, tmp_path)
    cluster, hub = jobs.kube, jobs.hub
    alice.cancel_all()
    running = alice.submit(2)  # the ClusterQueue's 2 A100s: the next one waits
    assert running["status"] != "queued", running
    cluster.wait_for(lambda: jobs.held("alice") == 2, timeout=60, interval=0.2)  # bound pods
    queued = alice.submit(2)
    assert queued["status"] == "queued", queued
    name = queued["id"]
    stack = ExitStack()
    try:
        # Bound to its object as created (no renewal needed): waiting in Kueue's queue.
        holdings = jobs.holdings("alice")
        assert (holdings["held"], holdings["waiting"]) == (2, 2), holdings
        [waits] = [h for h in holdings["holdings"] if h["waiting"]]
        assert (waits["name"], waits["waiting"]) == (name, "waiting in Kueue's queue"), waits
        over = alice.post(1)
        assert over.status_code == 403, over.text
        assert (
            f"You hold 2 and wait for 2, 4 of your quota of 4 GPUs (job {running['id']!r}: 2, "
            f"job {name!r}: 2, waiting in Kueue's queue), and this job needs 1 more"
        ) in over.json()["message"]

        # alice's fleet page: her queued job's row waits; her running one holds. The hub's
        # monitor looks every 30 s; the service renews the grant meanwhile (2 s grants here).
        stack.enter_context(renewing(jobs))
        page = hub.login("alice")

        def rows() -> dict[str, str] | None:
            text = html.unescape(page.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text)
            found = dict(re.findall(r'data-name="([^"]+)" data-state="(\w+)"', text))
            return found if found.get(name) == "waiting" else None

        states = cluster.wait_for(rows, timeout=60, interval=0.5)
        assert states[running["id"]] == "held", states
        text = html.unescape(page.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text)
        row = re.search(rf'<tr[^>]*data-name="{name}"[^>]*>.*?</tr>', text, re.S)
        assert row and "waiting in Kueue's queue" in row[0], text[-3000:]

        # /hub/metrics: waiting in the queue; held (and billed) are the running job's.
        def scraped() -> str | None:
            text = requests.get(
                f"{hub.url}/hub/metrics",
                headers={"Authorization": f"token {API_TOKEN}"},
                timeout=30,
            ).text
            waiting = re.search(
                r'^gpuhub_gpus_waiting\{[^}]*kind="job"[^}]*user="alice"[^}]*where="queue"\} (\S+)$',
                text,
                re.M,
            )
            return text if waiting and float(waiting[1]) == 2 else None

        metrics = cluster.wait_for(scraped, timeout=60, interval=0.5)
        held = re.findall(r'^gpuhub_gpus_held\{[^}]*user="alice"[^}]*\} (\S+)$', metrics, re.M)
        assert sum(map(float, held)) == 2, held
    finally:
        stack.close()
        alice.cancel_all()


@contextmanager
def renewing(jobs: JobsOnCluster, every: float = 0.5) -> Iterator[None]:
    """The service's renewal of queued jobs' grants, every ``every`` seconds (in a thread)
    while the block runs: the hub's 2-second grants here would lapse between its looks."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            renew(jobs)
            stop.wait(every)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
