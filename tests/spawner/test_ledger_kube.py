"""The GPU ledger on Kubernetes: a real JupyterHub with GPUSpawner and gpuhub's hub endpoints,
the jobs service as its own process, kubesim as the cluster and the KFP stand-in.

One quota across servers (named too), Jobs, every PyTorchJob replica and pipeline runs, and
concurrent spawns and submits of one user that never end above it: the service asks the
hub's ledger for every submit, so both go through one lock.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from gpuhub.jobs.k8s import manifests as m
from tests.kubesim import KubeSimThread
from tests.kubesim.pytest_plugin import hub_cluster
from tests.support.hub.kube import hub_config
from tests.support.hub.process import Hub, free_port, start_hub
from tests.support.jobs_service import NOTEBOOK_OK, jobs_service, write_notebook
from tests.support.kfp_standin import KFPStandIn
from tests.support.policies import DESIGN_CONFIG

pytestmark = pytest.mark.e2e

SERVICE_TOKEN = "gpuhub-ledger-service-token-0123456789"
USER_SCOPES = ["access:services!service=gpuhub", "read:users:groups!user"]
QUOTA = {"default": 2, "groups": {"staff": 4}}
USERS = ("alice", "bob", "carol", "dan")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimThread]:
    with hub_cluster(tmp_path_factory.mktemp("kubesim") / "kubeconfig") as sim:
        yield sim


@pytest.fixture(scope="module")
def kfp() -> Iterator[KFPStandIn]:
    standin = KFPStandIn()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture(scope="module")
def service_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def hub(
    cluster: KubeSimThread, service_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    extra = textwrap.dedent(
        f"""
        from gpuhub.hub_api import configure_hub
        configure_hub(c)
        c.JupyterHub.allow_named_servers = True
        c.JupyterHub.named_server_limit_per_user = 30
        c.GPUSpawner.gpu_quota = {QUOTA!r}
        c.GPUSpawner.gpu_monitor_interval = 1
        c.JupyterHub.load_groups = {{"staff": {{"users": ["alice"]}}}}
        c.Authenticator.allowed_users = {{"alice", "bob", "carol", "dan", "root"}}
        c.Authenticator.admin_users = {{"root"}}
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
    running = start_hub(tmp_path_factory.mktemp("ledger-kube-hub"), hub_config(extra))
    try:
        for name in USERS:
            running.api("POST", f"/users/{name}")
        yield running
    finally:
        for name in USERS:
            for server in running.api("GET", f"/users/{name}").json().get("servers", {}):
                running.api(
                    "DELETE",
                    f"/users/{name}/servers/{server}" if server else f"/users/{name}/server",
                )
        running.stop()


@pytest.fixture(scope="module")
def service(
    hub: Hub,
    cluster: KubeSimThread,
    kfp: KFPStandIn,
    service_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("ledger-service")
    config = {
        "namespace": "default",
        "policy": {**DESIGN_CONFIG, "default_limits": {"max_gpus": 16}},
        "gpu_quota": QUOTA,
        "job_image": "ghcr.io/gpuhub/gpuhub-notebook:0.1.0",
        "kfp": {"endpoint": kfp.url, "ui_url": "", "namespace": "kubeflow"},
    }
    with jobs_service(
        workdir,
        config,
        hub_api_url=hub.api_url,
        token=SERVICE_TOKEN,
        port=service_port,
        kubeconfig=cluster.kubeconfig,
    ) as running:
        yield running.url


@pytest.fixture(scope="module")
def notebook_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_notebook(tmp_path_factory.mktemp("nb") / "train.ipynb", NOTEBOOK_OK).read_text()


def token(hub: Hub, name: str) -> str:
    answer = hub.api("POST", f"/users/{name}/tokens", json={"scopes": USER_SCOPES})
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]


def submit(
    service: str, user_token: str, notebook_text: str, key: str | None = None, **fields: Any
) -> requests.Response:
    body = {"notebook": "train.ipynb", "notebook_content": notebook_text, "gpu_type": "a100"}
    headers = {"Authorization": f"token {user_token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return requests.post(service + "jobs", headers=headers, json={**body, **fields}, timeout=60)


def held(hub: Hub, user: str) -> dict[str, Any]:
    answer = requests.get(
        f"{hub.api_url}/gpuhub/holdings/{user}",
        headers={"Authorization": f"token {SERVICE_TOKEN}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def cancel(service: str, user_token: str, job_id: str) -> None:
    answer = requests.delete(
        service + f"jobs/{job_id}", headers={"Authorization": f"token {user_token}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text


def spawn(hub: Hub, user: str, gpus: int, server: str = "") -> requests.Response:
    path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
    return hub.api("POST", path, data=json.dumps({"gpus": gpus, "gpu_type": "a100"}))


def wait_ready(hub: Hub, user: str, server: str = "") -> None:
    deadline = time.monotonic() + 90
    while not (hub.user_model(user)["servers"].get(server) or {}).get("ready"):
        assert time.monotonic() < deadline, f"{user}/{server} did not start:\n{hub.log()[-3000:]}"
        time.sleep(0.3)


def test_one_quota_for_servers_jobs_replicas_and_pipelines(
    hub: Hub, service: str, cluster: KubeSimThread, notebook_text: str
) -> None:
    alice = token(hub, "alice")  # staff: quota 4
    assert spawn(hub, "alice", 1).status_code in (201, 202)
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
    named = spawn(hub, "alice", 1, "second")
    assert named.status_code == 403 and "quota" in named.json()["message"], named.text
    assert "second" not in hub.user_model("alice")["servers"]
    # CPU-only never counts.
    assert submit(service, alice, notebook_text, gpus=0, name="cpu").status_code == 201

    # Cancel the PyTorchJob: once its pods are gone, its 2 GPUs are free for a pipeline run.
    torch_id = torch.json()["id"]
    cancelled = requests.delete(
        service + f"jobs/{torch_id}", headers={"Authorization": f"token {alice}"}, timeout=60
    )
    assert cancelled.status_code == 200
    cluster.wait_for(lambda: not cluster.list("Pod", "default", labels={m.LABEL_JOB_ID: torch_id}))
    deadline = time.monotonic() + 30
    while (
        pipeline := submit(service, alice, notebook_text, kind="pipeline", gpus=1)
    ).status_code == 403:
        assert time.monotonic() < deadline, pipeline.text
        time.sleep(0.5)
    assert pipeline.status_code == 201, pipeline.text
    # The run counts from its submit (its step's pod is not there yet): 1 + 1 + 1 = 3 of 4.
    over = spawn(hub, "alice", 2, "second")
    assert over.status_code == 403 and "3 of your quota of 4" in over.json()["message"]


def test_concurrent_spawns_and_submits_never_end_above_the_quota(
    hub: Hub, service: str, cluster: KubeSimThread, notebook_text: str
) -> None:
    bob = token(hub, "bob")  # no group: quota 2

    def one(i: int) -> int:
        if i % 2:
            return spawn(hub, "bob", 1, f"s{i}").status_code
        return submit(service, bob, notebook_text, gpus=1, name=f"race-{i}").status_code

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(one, range(20)))
    accepted = [c for c in codes if c in (201, 202)]
    assert 1 <= len(accepted) <= 2 and all(c in (201, 202, 403) for c in codes), codes
    # What the cluster shows bob holding, once everything accepted has its pods.
    time.sleep(3)
    held = 0
    for pod in cluster.list("Pod", "default"):
        meta = pod["metadata"]
        owner = (meta.get("annotations") or {}).get("hub.jupyter.org/username") or (
            meta.get("annotations") or {}
        ).get(m.ANNOTATION_USERNAME)
        if owner == "bob" and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
            held += int(limits.get("nvidia.com/gpu", 0))
    assert held <= 2, held


def test_job_ids_are_unique_across_kinds_and_users(
    hub: Hub, service: str, cluster: KubeSimThread, notebook_text: str
) -> None:
    """A Job, a PyTorchJob and a TFJob of one name and one Idempotency-Key, and another
    user's job of that name and key, get four ids; the ledger counts each (quota 2)."""
    carol, dan = token(hub, "carol"), token(hub, "dan")
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
    # Before and after the pods show, carol holds exactly 2, one per job.
    for _ in range(2):
        mine = held(hub, "carol")
        assert mine["held"] == 2, mine
        assert sorted(h["name"] for h in mine["holdings"]) == sorted(ids)
        cluster.wait_for(
            lambda: all(cluster.list("Pod", "default", labels={m.LABEL_JOB_ID: i}) for i in ids)
        )
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
            "namespace": "default",
            "labels": {
                m.LABEL_MANAGED_BY: m.MANAGED_BY,
                m.LABEL_USER: m.user_label(owner),
                m.LABEL_JOB_ID: job_id,
                m.LABEL_KIND: "job",
            },
            "annotations": {m.ANNOTATION_USERNAME: annotation or owner},
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
    hub: Hub, service: str, cluster: KubeSimThread, notebook_text: str
) -> None:
    dan = token(hub, "dan")
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
    for name in ("decoy-carol", "decoy-slug"):
        cluster.delete("Job", name)
