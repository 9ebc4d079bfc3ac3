"""The ``gpuhub`` hub service end to end: a real JupyterHub (and proxy), the service as its own
process (``python -m gpuhub.service --config``) under the Helm chart's ServiceAccount and Role,
the test cluster (harness/cluster.py), and a real user Jupyter server whose jobs API
forwards to the service (Kubernetes mode). tests/support/hub/jobs_on_cluster.py starts them.

Users call with tokens the hub issued them (scope ``access:services!service=gpuhub``); the
service reads their groups from the hub, so limits and quotas follow hub group membership.
GPU jobs of type ``a100`` land on kwok's fake A100 nodes (running, no process); CPU-only jobs
and jobs of type ``local`` run for real on the process node, so their log and executed
notebook come back from a real pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from gpuhub.jobs.kinds.pipeline import PIPELINE
from gpuhub.jobs.pipeline import NOT_CONFIGURED
from gpuhub.k8s.labels import JOB_ID_LABEL, USER_LABEL, USERNAME_ANNOTATION
from harness.cluster import Kube
from harness.jupyter.server import jupyter_server
from tests.support.hub.jobs_on_cluster import CLUSTER_POLICY, JobsOnCluster, jobs_on_cluster
from tests.support.jobs_service import NOTEBOOK_OK, write_notebook

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def jobs(module_kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsOnCluster]:
    config = {
        "gpu_quota": {"default": 1, "groups": {"staff": 4}},
        "home_volume": {
            "claim_name_template": "claim-{username}",
            "mount_path": "/home/jovyan",
            "shared": False,
        },
        "kfp": {"endpoint": "", "ui_url": "", "namespace": "kubeflow"},
        "max_notebook_bytes": 1048576,
    }
    with jobs_on_cluster(
        module_kube,
        tmp_path_factory.mktemp("jobs-service"),
        users={"alice": ["staff"], "bob": [], "carol": []},
        service_config=config,
        faults=True,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(jobs: JobsOnCluster) -> dict[str, str]:
    return {name: jobs.token(name) for name in ("alice", "bob", "carol")}


@pytest.fixture(scope="module")
def notebook_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = write_notebook(tmp_path_factory.mktemp("nb") / "train.ipynb", NOTEBOOK_OK)
    return path.read_text()


def body(notebook_text: str, **extra: Any) -> dict[str, Any]:
    return {"notebook": "train.ipynb", "notebook_content": notebook_text, **extra}


# -- authentication -------------------------------------------------------------------------------
def test_requests_without_a_valid_user_token_are_refused(jobs, tokens):
    for token in (None, "not-a-token"):
        response = jobs.call("GET", "jobs", token)
        assert response.status_code == 403
        assert response.json()["field"] == "auth"
        assert "JupyterHub token" in response.json()["message"]
    # A token of the user without the service's access scope.
    narrow = jobs.token("alice", ["read:users:name!user"])
    assert jobs.call("GET", "jobs", narrow).status_code == 403
    # The hub's own admin service is not a user: it has no jobs.
    from harness.hub.process import API_TOKEN

    refused = jobs.call("GET", "jobs", API_TOKEN)
    assert refused.status_code == 403
    assert jobs.call("GET", "jobs", tokens["alice"]).status_code == 200
    assert requests.get(jobs.url + "health", timeout=10).json() == {"ok": True}


# -- jobs --------------------------------------------------------------------------------------------
def test_own_jobs_only_and_idempotent_submit(jobs, tokens, notebook_text):
    alice, bob = tokens["alice"], tokens["bob"]
    key = {"Idempotency-Key": "submit-once-1"}
    # On a fake A100 (kwok): it runs until cancelled.
    own = body(notebook_text, name="own", gpus=1, gpu_type="a100")
    first = jobs.call("POST", "jobs", alice, json=own, headers=key)
    assert first.status_code == 201, first.text
    job_id = first.json()["id"]
    assert first.headers["Location"].endswith(f"/services/gpuhub/jobs/{job_id}")
    again = jobs.call("POST", "jobs", alice, json=own, headers=key)
    assert again.status_code == 201 and again.json()["id"] == job_id
    assert len(jobs.kube.list("Job", labels={JOB_ID_LABEL: job_id})) == 1
    job = jobs.kube.get("Job", job_id)
    assert job["metadata"]["annotations"][USERNAME_ANNOTATION] == "alice"

    assert [j["id"] for j in jobs.call("GET", "jobs", alice).json()["jobs"]].count(job_id) == 1
    assert job_id not in [j["id"] for j in jobs.call("GET", "jobs", bob).json()["jobs"]]
    for method, path in (
        ("GET", f"jobs/{job_id}"),
        ("GET", f"jobs/{job_id}/logs"),
        ("GET", f"jobs/{job_id}/output"),
        ("DELETE", f"jobs/{job_id}"),
    ):
        refused = jobs.call(method, path, bob)
        assert refused.status_code == 404, (method, path, refused.text)
        assert refused.json()["message"] == f'There is no job "{job_id}" among your jobs.'
    assert jobs.kube.get("Job", job_id)["metadata"].get("deletionTimestamp") is None

    status = jobs.call("GET", f"jobs/{job_id}", alice).json()
    assert status["owner"] == "alice" and status["status"] in ("pending", "running")
    cancelled = jobs.call("DELETE", f"jobs/{job_id}", alice)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    jobs.kube.wait_for(lambda: jobs.kube.get("Job", job_id) is None)


def test_hub_groups_decide_limits_and_quota(jobs, tokens, notebook_text):
    # bob is in no group: default limits (1 GPU) and the default quota (1).
    four = body(notebook_text, gpus=4, gpu_type="a100", name="four")
    refused = jobs.call("POST", "jobs", tokens["bob"], json=four)
    assert refused.status_code == 400 and refused.json()["field"] == "gpus"
    # alice is staff (hub group): 8 GPUs allowed by the policy, 4 by the quota.
    ok = jobs.call("POST", "jobs", tokens["alice"], json=four)
    assert ok.status_code == 201, ok.text
    more = jobs.call(
        "POST", "jobs", tokens["alice"], json=body(notebook_text, gpus=1, gpu_type="a100")
    )
    # This hub has no gpuhub ledger endpoints: the service counts by itself (the fallback).
    assert more.status_code == 403
    assert more.json()["message"] == (
        f"You hold 4 of your quota of 4 GPUs (job {ok.json()['id']!r}: 4) and this job needs "
        "1 more; stop a server or wait for a job to end."
    )
    assert jobs.call("DELETE", f"jobs/{ok.json()['id']}", tokens["alice"]).status_code == 200
    jobs.kube.wait_for(lambda: jobs.kube.get("Job", ok.json()["id"]) is None)  # its GPUs are back


def test_bad_requests_are_one_sentence_and_make_nothing(jobs, tokens, notebook_text):
    before = len(jobs.kube.list("ConfigMap"))
    cases = [
        (b"{not json", 400, "The request body is not valid JSON."),
        (
            json.dumps(body(notebook_text, notebook="../x.ipynb")),
            400,
            "outside your home directory",
        ),
        (json.dumps({"notebook": "train.ipynb"}), 400, "notebook_content is missing"),
        (json.dumps(body("{}")), 400, "is not a valid notebook file"),
        (
            json.dumps(body(notebook_text, kind="cronjob")),
            400,
            'is not one gpuhub knows; the kinds offered are "job"',
        ),
        (json.dumps(body(notebook_text, name="Bad_Name")), 400, "lower-case letters"),
        (json.dumps(body(notebook_text, parameters=[1])), 400, "Parameters must be a mapping"),
        (json.dumps(body(notebook_text, gpus=1, gpu_type="h100")), 400, 'GPU type "h100"'),
        (json.dumps(body(notebook_text, kind="pipeline")), 422, NOT_CONFIGURED),
    ]
    for data, status, sentence in cases:
        response = jobs.call("POST", "jobs", tokens["carol"], data=data)
        assert response.status_code == status, (data[:80], response.text)
        assert sentence in response.json()["message"]
    bad_key = jobs.call(
        "POST",
        "jobs",
        tokens["carol"],
        json=body(notebook_text),
        headers={"Idempotency-Key": "a b"},
    )
    assert bad_key.status_code == 400
    assert len(jobs.kube.list("ConfigMap")) == before
    assert jobs.kube.list("Job", labels={USER_LABEL: "carol"}) == []


def test_kinds_and_pipeline_yaml(jobs, tokens, notebook_text):
    kinds = {k["kind"]: k for k in jobs.call("GET", "jobs/kinds", tokens["carol"]).json()["kinds"]}
    assert kinds["job"]["available"] and kinds["pytorchjob"]["available"]
    assert not kinds["pipeline"]["available"] and kinds["pipeline"]["reason"] == NOT_CONFIGURED
    response = jobs.call("POST", "jobs/pipeline.yaml", tokens["carol"], json=body(notebook_text))
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/yaml")
    assert response.text.startswith("# PIPELINE DEFINITION")


# -- the user's server forwards ----------------------------------------------------------------------
def test_user_server_forwards_to_the_service(jobs, tokens, tmp_path):
    jobs.kube.require_local("the process node, where the job's pod really runs")
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    env = {
        # Through the hub's proxy, as a browser-side URL would; the chart uses the Service URL.
        "GPUHUB_JOBS_URL": f"{jobs.hub.url}/services/gpuhub/",
        "JUPYTERHUB_API_TOKEN": tokens["alice"],
        "JUPYTERHUB_USER": "alice",
        "GPUHUB_POLICY": json.dumps(CLUSTER_POLICY),
        "GPUHUB_GROUPS": json.dumps(["staff"]),
    }
    with jupyter_server(root, tmp_path / "jupyter", env=env) as server:
        options = server.api("GET", "gpuhub/api/jobs/options").json()
        assert options["kubernetes"] is True
        kinds = {k["kind"]: k for k in options["kinds"]}
        assert kinds["job"]["available"] and kinds["tfjob"]["available"]
        assert kinds["pipeline"] == {
            "kind": "pipeline",
            "label": "pipeline step",
            "distributed": False,
            "takes_runtime": False,
            "runs_in": "Kubeflow Pipelines",
            "no_claims": "Kubeflow Pipelines has no field for a step's DRA resource claims",
            "description": PIPELINE.description,
            "run_page": "KFP run page",
            "available": False,
            "reason": NOT_CONFIGURED,
            "here": False,
        }
        # On the process node's simulated GPU: the job's pod really runs the notebook.
        created = server.api(
            "POST",
            "gpuhub/api/jobs",
            json={
                "notebook": "train.ipynb",
                "gpus": 1,
                "gpu_type": "local",
                "parameters": {"epochs": 5},
            },
        )
        assert created.status_code == 201, created.text + server.log()
        job_id = created.json()["id"]
        job = jobs.kube.get("Job", job_id)
        assert job["metadata"]["annotations"][USERNAME_ANNOTATION] == "alice"

        def succeeded() -> dict[str, Any] | None:
            answer = server.api("GET", f"gpuhub/api/jobs/{job_id}")
            assert answer.status_code == 200, answer.text
            record = answer.json()
            assert record["status"] in ("pending", "running", "succeeded"), record
            return record if record["status"] == "succeeded" else None

        done = jobs.kube.wait_for(succeeded, timeout=120, interval=0.5)
        # The executed notebook came back through the API into the user's files.
        assert done["output"] == f"gpuhub-runs/{job_id}/{job_id}.ipynb"  # named after the run
        executed = json.loads((root / done["output"]).read_text())
        assert any(
            "result 10\n" in o.get("text", "")
            for c in executed["cells"]
            for o in c.get("outputs", [])
        )
        opened = server.api("GET", f"api/contents/{done['output']}")
        assert opened.status_code == 200
        logs = server.api("GET", f"gpuhub/api/jobs/{job_id}/logs").json()["logs"]
        assert "training for 5 epochs" in logs

        # The service's refusals pass through unchanged.
        quota = server.api(
            "POST",
            "gpuhub/api/jobs",
            json={"notebook": "train.ipynb", "gpus": 8, "gpu_type": "a100"},
        )
        # (403: over the quota even with nothing running; 429 when running work holds GPUs)
        assert quota.status_code == 403
        assert quota.json()["message"] == (
            "This job needs 8 GPUs, more than your quota of 4 GPUs at once (servers and jobs "
            "together)."
        )
        missing = server.api("GET", "gpuhub/api/jobs/no-such-job-1")
        assert missing.status_code == 404
        assert missing.json()["message"] == 'There is no job "no-such-job-1" among your jobs.'
        pipeline = server.api(
            "POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb", "kind": "pipeline"}
        )
        assert pipeline.status_code == 422 and pipeline.json()["message"] == NOT_CONFIGURED
        compiled = server.api(
            "POST",
            "gpuhub/api/jobs/pipeline.yaml",
            json={"notebook": "train.ipynb", "gpus": 1, "gpu_type": "a100"},
        )
        assert compiled.status_code == 200 and "nvidia.com/gpu" in compiled.text
        listed = server.api("GET", "gpuhub/api/jobs").json()["jobs"]
        assert job_id in [j["id"] for j in listed]

        # The cluster fails the first create: the service rolls back and answers 503, the
        # forwarder retries once with the same Idempotency-Key, and there is one job.
        jobs.faults.fail_requests(
            500, method="POST", path=f"/apis/batch/v1/namespaces/{jobs.kube.namespace}/jobs"
        )
        retried = server.api(
            "POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb", "name": "retried"}
        )
        assert retried.status_code == 201, retried.text
        made = [j for j in jobs.kube.list("Job") if j["metadata"]["name"].startswith("retried-")]
        assert [j["metadata"]["name"] for j in made] == [retried.json()["id"]]
        assert len(jobs.kube.list("ConfigMap", labels={JOB_ID_LABEL: retried.json()["id"]})) == 1
