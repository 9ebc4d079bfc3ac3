"""The GPU ledger on Kubernetes: a real JupyterHub with GPUSpawner and gpuhub's hub endpoints,
the jobs service as its own process, both under the Helm chart's RBAC on the test cluster
(tests/support/hub/jobs_on_cluster.py), and the KFP stand-in.

One quota across servers (named too), Jobs, every PyTorchJob replica and pipeline runs, and
concurrent spawns and submits of one user that never end above it: the service asks the
hub's ledger for every submit, so both go through one lock. A cluster job spends its user's
GPU-hour budget, and past it is cancelled and the next submit refused. Servers that must answer the hub
run on the process node (GPU type ``local``); jobs and the other servers hold fake A100s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from gpuhub.jobs.k8s import manifests as m
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    KIND_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from harness.cluster import Kube
from harness.hub.process import API_TOKEN, Hub, wait_ready
from tests.support.hub.jobs_on_cluster import CLUSTER_POLICY, JobsOnCluster, jobs_on_cluster
from tests.support.jobs_service import NOTEBOOK_OK, write_notebook
from tests.support.kfp_standin import KFPStandIn

pytestmark = pytest.mark.e2e

QUOTA = {"default": 2, "groups": {"staff": 4}}


@pytest.fixture(scope="module")
def kfp() -> Iterator[KFPStandIn]:
    standin = KFPStandIn()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture(scope="module")
def jobs(
    module_kube: Kube, kfp: KFPStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JobsOnCluster]:
    config = {
        "policy": {**CLUSTER_POLICY, "default_limits": {"max_gpus": 16}},
        "gpu_quota": QUOTA,
        "kfp": {
            "endpoint": kfp.url,
            "ui_url": "",
            "namespace": "kubeflow",
            "service_account": "gpuhub-pipeline-steps",
        },
    }
    hub = """
        c.JupyterHub.allow_named_servers = True
        c.JupyterHub.named_server_limit_per_user = 30
        c.GPUSpawner.gpu_monitor_interval = 1
        c.Authenticator.admin_users = {"root"}
        # GPU-hour budgets (issue 32) for the group "tiny" only: seconds, spent by a job.
        c.GPUSpawner.gpu_hours = {"groups": {"tiny": {"hours": 0.0005, "per": "day"}}, "grace": 1}
        """
    with jobs_on_cluster(
        module_kube,
        tmp_path_factory.mktemp("ledger-kube"),
        users={
            "alice": ["staff"],
            "bob": [],
            "carol": [],
            "dan": [],
            # Hers alone: other tests' hubs run jobs as erin on this cluster, and this hub
            # sees every gpuhub pod, so a name they use would be charged here too.
            "tina": ["tiny"],
            "root": [],
        },
        service_config=config,
        ledger=True,
        hub_extra=hub,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def notebook_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_notebook(tmp_path_factory.mktemp("nb") / "train.ipynb", NOTEBOOK_OK).read_text()


def submit(
    service: str, user_token: str, notebook_text: str, key: str | None = None, **fields: Any
) -> requests.Response:
    body = {"notebook": "train.ipynb", "notebook_content": notebook_text, "gpu_type": "a100"}
    headers = {"Authorization": f"token {user_token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return requests.post(service + "jobs", headers=headers, json={**body, **fields}, timeout=60)


def cancel(service: str, user_token: str, job_id: str) -> None:
    answer = requests.delete(
        service + f"jobs/{job_id}", headers={"Authorization": f"token {user_token}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text


def spawn(
    hub: Hub, user: str, gpus: int, server: str = "", gpu_type: str = "a100"
) -> requests.Response:
    """A server on fake A100s (its pod runs, nothing answers), or of ``gpu_type``."""
    path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
    return hub.api("POST", path, data=json.dumps({"gpus": gpus, "gpu_type": gpu_type}))


def test_one_quota_for_servers_jobs_replicas_and_pipelines(
    jobs: JobsOnCluster, notebook_text: str
) -> None:
    hub, service, cluster = jobs.hub, jobs.url, jobs.kube
    cluster.require_local("the process node, where a server really starts")
    alice = jobs.token("alice")  # staff: quota 4
    # On the process node, so that the server really starts and answers the hub.
    assert spawn(hub, "alice", 1, gpu_type="local").status_code in (201, 202)
    wait_ready(hub, "alice")
    job = submit(service, alice, notebook_text, gpus=1, name="one")
    assert job.status_code == 201, job.text
    # A PyTorchJob holds a GPU in every replica: 2 workers x 1 GPU = 2; 1 + 1 + 2 = 4.
    torch = submit(service, alice, notebook_text, kind="pytorchjob", gpus=1, workers=2, name="t")
    assert torch.status_code == 201, torch.text
    # Full: a pipeline run, a named server and a job are refused alike, with the holdings.
    pipeline = submit(service, alice, notebook_text, kind="pipeline", gpus=1, name="p")
    assert pipeline.status_code == 403, pipeline.text
    message = pipeline.json()["message"]
    assert "4 of your quota of 4 GPUs" in message and "server 'default': 1" in message
    assert f"job {job.json()['id']!r}: 1" in message
    # The PyTorchJob is one job of 2 GPUs, however many pods (and a grant) it is seen as.
    torch_id = torch.json()["id"]
    cluster.wait_for(lambda: len(cluster.job_pods(torch_id, "PyTorchJob")) == 2)
    assert f"job {torch_id!r}: 2" in message and message.count(repr(torch_id)) == 1, message

    # The hub's pod watch sees the second replica a moment after the apiserver has it; until
    # then the job's grant counts it (2 GPUs either way, as the refusal above says).
    def torch_gpus() -> list[int]:
        held = jobs.holdings("alice")["holdings"]
        return [h["gpus"] for h in held if h["name"] == torch_id]

    cluster.wait_for(lambda: torch_gpus() == [2])
    holdings = jobs.holdings("alice")["holdings"]
    # Each named by its GPU type, though both types ask for nvidia.com/gpu.
    assert {(h["label"], h["gpu_type"]) for h in holdings} == {
        ("server 'default'", "Simulated GPU"),
        (f"job {job.json()['id']!r}", "NVIDIA A100 80GB"),
        (f"job {torch_id!r}", "NVIDIA A100 80GB"),
    }, holdings
    named = spawn(hub, "alice", 1, "second")
    assert named.status_code == 403 and "quota" in named.json()["message"], named.text
    assert "second" not in hub.user_model("alice")["servers"]
    # CPU-only never counts.
    assert submit(service, alice, notebook_text, gpus=0, name="cpu").status_code == 201

    # Cancel the PyTorchJob: once its pods are gone, its 2 GPUs are free for a pipeline run.
    cancelled = requests.delete(
        service + f"jobs/{torch_id}", headers={"Authorization": f"token {alice}"}, timeout=60
    )
    assert cancelled.status_code == 200
    cluster.wait_for(lambda: not cluster.list("Pod", labels={JOB_ID_LABEL: torch_id}))

    def accepted_run() -> requests.Response | None:
        # The hub's pod watch sees the pods go a moment after the apiserver does.
        answer = submit(service, alice, notebook_text, kind="pipeline", gpus=1)
        assert answer.status_code in (201, 403), answer.text
        return answer if answer.status_code == 201 else None

    cluster.wait_for(accepted_run, timeout=30, interval=0.5)
    # The run counts from its submit (its step's pod is not there yet): 1 + 1 + 1 = 3 of 4.
    over = spawn(hub, "alice", 2, "second")
    assert over.status_code == 403 and "3 of your quota of 4" in over.json()["message"]


def test_concurrent_spawns_and_submits_never_end_above_the_quota(
    jobs: JobsOnCluster, notebook_text: str
) -> None:
    hub, service, cluster = jobs.hub, jobs.url, jobs.kube
    bob = jobs.token("bob")  # no group: quota 2

    def one(i: int) -> int:
        if i % 2:
            return spawn(hub, "bob", 1, f"s{i}").status_code
        return submit(service, bob, notebook_text, gpus=1, name=f"race-{i}").status_code

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(one, range(20)))
    accepted = [c for c in codes if c in (201, 202)]
    assert 1 <= len(accepted) <= 2 and all(c in (201, 202, 403) for c in codes), codes

    # What the cluster shows bob holding, once everything accepted has its pod.
    def bobs_gpu_pods() -> list[dict[str, Any]]:
        pods = []
        for pod in cluster.list("Pod"):
            notes = pod["metadata"].get("annotations") or {}
            owner = notes.get("hub.jupyter.org/username") or notes.get(USERNAME_ANNOTATION)
            if owner == "bob" and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                pods.append(pod)
        return pods

    pods = cluster.wait_for(lambda: len(bobs_gpu_pods()) >= len(accepted) and bobs_gpu_pods())
    held = sum(
        int((p["spec"]["containers"][0]["resources"].get("limits") or {}).get("nvidia.com/gpu", 0))
        for p in pods
    )
    assert held <= 2, held


def test_job_ids_are_unique_across_kinds_and_users(jobs: JobsOnCluster, notebook_text: str) -> None:
    """A Job, a PyTorchJob and a TFJob of one name and one Idempotency-Key, and another
    user's job of that name and key, get four ids; the ledger counts each (quota 2)."""
    service, cluster = jobs.url, jobs.kube
    carol, dan = jobs.token("carol"), jobs.token("dan")
    job = submit(service, carol, notebook_text, key="same-key", gpus=1, name="same")
    assert job.status_code == 201, job.text
    torch = submit(
        service, carol, notebook_text, key="same-key", kind="pytorchjob", gpus=1, name="same"
    )
    assert torch.status_code == 201, torch.text
    ids = {job.json()["id"], torch.json()["id"]}
    assert len(ids) == 2
    # Both count: a TFJob of the same name and key is over carol's quota of 2.
    tf = submit(service, carol, notebook_text, key="same-key", kind="tfjob", gpus=1, name="same")
    assert tf.status_code == 403 and "2 of your quota of 2" in tf.json()["message"], tf.text
    # A retried submit is still the same job, never refused.
    again = submit(service, carol, notebook_text, key="same-key", gpus=1, name="same")
    assert again.status_code == 201 and again.json()["id"] == job.json()["id"]
    other = submit(service, dan, notebook_text, key="same-key", gpus=1, name="same")
    assert other.status_code == 201 and other.json()["id"] not in ids
    # Before and after the pods show, exactly 2 count against carol's quota, one per job.
    for _ in range(2):
        mine = jobs.holdings("carol")
        assert mine["held"] + mine["waiting"] == 2, mine
        assert sorted(h["name"] for h in mine["holdings"]) == sorted(ids)
        cluster.wait_for(lambda: all(cluster.list("Pod", labels={JOB_ID_LABEL: i}) for i in ids))
    for job_id in ids:
        cancel(service, carol, job_id)
    cancel(service, dan, other.json()["id"])


def decoy_job(job_id: str, owner: str, name: str, annotation: str | None = None) -> dict[str, Any]:
    """A suspended Job carrying ``job_id`` as its gpuhub id, but another owner's labels: what
    a collision of ids (or of label slugs) would look like to a selector on the id alone."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                USER_LABEL: m.user_label(owner),
                JOB_ID_LABEL: job_id,
                KIND_LABEL: "job",
            },
            "annotations": {USERNAME_ANNOTATION: annotation or owner},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                }
            },
        },
    }


def test_a_fleet_cancel_deletes_the_owners_job_only(
    jobs: JobsOnCluster, notebook_text: str
) -> None:
    hub, service, cluster = jobs.hub, jobs.url, jobs.kube
    dan = jobs.token("dan")
    job = submit(service, dan, notebook_text, gpus=1, name="mine")
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    # Objects with dan's job id that are not dan's: another user's, and one with dan's label
    # slug but another exact owner.
    cluster.create(decoy_job(job_id, "carol", "decoy-carol"))
    cluster.create(decoy_job(job_id, "dan", "decoy-slug", annotation="dan2"))
    root = hub.login("root")
    deadline = time.monotonic() + 60
    row = f'data-user="dan" data-kind="job" data-name="{job_id}"'
    while row not in (page := root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text):
        assert time.monotonic() < deadline, page[-3000:]
        time.sleep(0.5)
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/cancel",
        data={
            "target": f"dan/{job_id}",
            "reason": "node maintenance",
            "_xsrf": root.cookies.get("_xsrf", path="/hub/"),
        },
        timeout=60,
        allow_redirects=False,
    )
    assert done.status_code == 303, done.text[-2000:]
    cluster.wait_for(lambda: cluster.get("Job", job_id) is None, timeout=60)
    assert cluster.get("Job", "decoy-carol") is not None
    assert cluster.get("Job", "decoy-slug") is not None


def test_a_job_that_ran_and_ended_unseen_frees_its_grant(
    kube: Kube, notebook_text: str, tmp_path: Any
) -> None:
    """A job that runs and ends between two looks at the ledger settled its grant: once it
    succeeded, its GPUs are free for the next submit (before, the grant counted on until it
    expired, since the ledger compared grants only with the pods there now). A hub of its
    own, whose monitor looks every 30 s (JupyterHub's default for gpuhub), so nothing looks
    while the job runs."""
    kube.require_local("the process node, where a job really runs and ends")
    with jobs_on_cluster(
        kube,
        tmp_path,
        users={"erin": []},
        service_config={
            "policy": {**CLUSTER_POLICY, "default_limits": {"max_gpus": 16}},
            "gpu_quota": {"default": 2, "groups": {}},
        },
        ledger=True,
        hub_extra="c.GPUSpawner.gpu_monitor_interval = 30\n",
    ) as jobs:
        service = jobs.url
        erin = jobs.token("erin")  # quota 2
        first = submit(service, erin, notebook_text, gpus=2, gpu_type="local", name="quick")
        assert first.status_code == 201, first.text

        def ended() -> bool:
            job = jobs.call("GET", f"jobs/{first.json()['id']}", erin).json()
            assert job["status"] not in ("failed", "cancelled"), job
            return bool(job["status"] == "succeeded")

        kube.wait_for(ended, timeout=120, interval=0.5)
        again = submit(service, erin, notebook_text, gpus=2, gpu_type="local", name="again")
        assert again.status_code == 201, again.text
        cancel(service, erin, again.json()["id"])


def test_a_cluster_job_spends_the_budget_and_is_cancelled_past_it(
    jobs: JobsOnCluster, notebook_text: str
) -> None:
    """tina's group has 0.0005 GPU-hours (1.8 GPU-seconds) a day: her job's pod, bound to a
    fake A100, spends them; past the 1 s grace the hub cancels the job (its Job object goes),
    she reads why, and the next submit is refused with the budget's sentence. The holdings
    answer, the fleet page and /hub/metrics say the same."""
    hub, service, cluster = jobs.hub, jobs.url, jobs.kube
    tina = jobs.token("tina")
    job = submit(service, tina, notebook_text, gpus=1, name="spend")
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]

    def budget() -> dict[str, Any]:
        [found] = jobs.holdings("tina")["budgets"]
        return found

    cluster.wait_for(lambda: budget()["used_hours"] > 0, timeout=90, interval=0.5)
    cluster.wait_for(lambda: cluster.get("Job", job_id) is None, timeout=90, interval=0.5)
    spent = budget()
    assert spent["state"] == "over" and spent["scope"] == "user" and spent["name"] == "tina"
    notices = hub.api("GET", "/gpuhub/notices/tina").json()["notices"]
    [ended] = [n for n in notices if n["kind"] == "job"]
    assert ended["by"] == "budget" and "GPU-hours" in ended["text"], ended
    refused = submit(service, tina, notebook_text, gpus=1, name="again")
    assert refused.status_code == 403, refused.text
    assert (
        "GPU-hours the tiny group's budget for each member gives you" in refused.json()["message"]
    )
    assert submit(service, tina, notebook_text, gpus=0, name="cpu").status_code == 201
    # Nothing GPU runs now: once the last tick has seen that, every surface says the same.
    admin = {"Authorization": f"token {API_TOKEN}"}
    line = 'gpuhub_gpu_budget_used_seconds{name="tina",scope="user"} '

    def agree() -> bool:
        used = round(budget()["used_hours"] * 3600, 3)
        metrics = requests.get(f"{hub.url}/hub/metrics", headers=admin, timeout=30).text
        values = [float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)]
        return values == [pytest.approx(used, abs=0.002)]

    cluster.wait_for(agree, timeout=30, interval=1)
    page = hub.login("root").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    assert 'data-scope="user" data-name="tina"' in page
