"""TrainJobs (Kubeflow Trainer v2, kind ``trainjob``) end to end on the test cluster: a real
JupyterHub with gpuhub's ledger, the jobs service under the Helm chart's RBAC
(tests/support/hub/jobs_on_cluster.py), a real user Jupyter server in Kubernetes mode, and
the cluster's Trainer 2.3 with the ClusterTrainingRuntime ``torch-distributed``.

A TrainJob of GPU type ``local`` runs for real on the process node: its two nodes are local
processes that find each other by name (``PET_MASTER_ADDR``, through their hosts files), and
node 0's log brings the executed notebook back. The hub's ledger follows the nodes' pods to
their TrainJob through its JobSet, so the quota counts every node's GPUs once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.kinds.trainjob import NO_TOKEN_MOUNT
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    KIND_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from harness.cluster import Kube
from harness.jupyter.server import JupyterServer, jupyter_server
from tests.support.hub.jobs_on_cluster import CLUSTER_POLICY, JobsOnCluster, jobs_on_cluster
from tests.support.jobs_service import write_notebook

pytestmark = pytest.mark.e2e

TRAINER = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "torch-distributed"
# Each node says who it is and finds node 0 by name, then waits for the test's go.
NOTEBOOK = [
    "gate = ''",  # tagged "parameters"
    "import os, socket, time\n"
    "rank = os.environ['PET_NODE_RANK']\n"
    "master = os.environ['PET_MASTER_ADDR']\n"
    "print(f'node {rank} of {os.environ[\"PET_NNODES\"]} finds {master} at', "
    "socket.gethostbyname(master))",
    "while gate and not os.path.exists(gate):\n    time.sleep(0.1)\nprint('trained on node', rank)",
]


@pytest.fixture(scope="module")
def jobs(module_kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsOnCluster]:
    config = {
        "gpu_quota": {"default": 1, "groups": {"staff": 4}},
        "kinds": ["job", "trainjob"],
        "trainer": {"runtimes": [RUNTIME], "service_account": "gpuhub-jobs"},
    }
    with jobs_on_cluster(
        module_kube,
        tmp_path_factory.mktemp("trainjob"),
        users={"alice": ["staff"], "bob": []},
        service_config=config,
        ledger=True,
        chart_values={"jobs": {"kinds": ["job", "trainjob"]}},
    ) as running:
        yield running


@pytest.fixture
def server(jobs: JobsOnCluster, tmp_path: Path) -> Iterator[JupyterServer]:
    """alice's Jupyter server in Kubernetes mode, forwarding jobs to the service."""
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK)
    env = {
        "GPUHUB_JOBS_URL": f"{jobs.hub.url}/services/gpuhub/",
        "JUPYTERHUB_API_TOKEN": jobs.token("alice"),
        "JUPYTERHUB_USER": "alice",
        "GPUHUB_POLICY": json.dumps(CLUSTER_POLICY),
        "GPUHUB_GROUPS": json.dumps(["staff"]),
    }
    with jupyter_server(root, tmp_path / "jupyter", env=env) as running:
        yield running


def trainjob(jobs: JobsOnCluster, job_id: str) -> dict[str, Any] | None:
    return jobs.kube.get("TrainJob", job_id, api_version=TRAINER)


def test_a_trainjob_runs_on_two_nodes_and_counts_once(jobs, server, tmp_path):
    jobs.kube.require_local("the process node, where the TrainJob's nodes really run")
    options = server.api("GET", "gpuhub/api/jobs/options").json()
    # The admin offers jobs and TrainJobs only; TrainJobs through the offered runtime.
    assert [k["kind"] for k in options["kinds"]] == ["job", "trainjob"]
    assert all(k["available"] for k in options["kinds"]), options["kinds"]
    assert options["runtimes"] == [RUNTIME] and options["default_runtime"] == RUNTIME

    gate = tmp_path / "go"
    created = server.api(
        "POST",
        "gpuhub/api/jobs",
        json={
            "notebook": "train.ipynb",
            "kind": "trainjob",
            "workers": 2,
            "gpus": 1,
            "gpu_type": "local",
            "parameters": {"gate": str(gate)},
        },
    )
    assert created.status_code == 201, created.text + server.log()
    job_id = created.json()["id"]
    record = created.json()["job"]
    assert record["kind"] == "trainjob" and record["runtime"] == RUNTIME
    assert record["gpu"] == "2 workers, 1 x Simulated GPU each"

    # What gpuhub wrote: numNodes = workers, resourcesPerNode = what was asked, the runtime.
    obj = trainjob(jobs, job_id)
    assert obj is not None
    spec = obj["spec"]
    assert spec["runtimeRef"] == {
        "name": RUNTIME,
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    assert spec["trainer"]["numNodes"] == 2
    assert spec["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    assert obj["metadata"]["annotations"][USERNAME_ANNOTATION] == "alice"
    assert obj["metadata"]["labels"][KIND_LABEL] == "trainjob"

    def running_nodes() -> list[dict[str, Any]] | None:
        pods = jobs.kube.list("Pod", labels={JOB_ID_LABEL: job_id})
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return pods if len(running) == 2 else None

    pods = jobs.kube.wait_for(running_nodes, timeout=120, interval=0.5)
    for pod in pods:
        # Fenced and counted like every job pod: gpuhub's labels and owner, no token.
        labels = pod["metadata"]["labels"]
        assert labels[MANAGED_BY_LABEL] == MANAGED_BY
        assert labels[USER_LABEL] == "alice"
        assert pod["metadata"]["annotations"][USERNAME_ANNOTATION] == "alice"
        assert pod["spec"]["serviceAccountName"] == "gpuhub-jobs"
        assert pod["spec"]["nodeName"] == "local-0"
        # No ServiceAccount token where the notebook runs, whatever the account says.
        assert not [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api")]
        (node,) = pod["spec"]["containers"]
        assert NO_TOKEN_MOUNT in node["volumeMounts"]
    # Trainer made the JobSet from gpuhub's patch: its nodes' template has it too.
    jobset = jobs.kube.get("JobSet", job_id, api_version="jobset.x-k8s.io/v1alpha2")
    assert jobset is not None
    [nodes] = jobset["spec"]["replicatedJobs"]
    template = nodes["template"]["spec"]["template"]["spec"]
    assert NO_TOKEN_MOUNT in template["containers"][0]["volumeMounts"]
    # The two nodes may reach each other, nothing else more; the policy goes with the job.
    policy = jobs.kube.get("NetworkPolicy", f"{job_id}-replicas")
    assert policy is not None
    assert policy["spec"]["podSelector"]["matchLabels"][JOB_ID_LABEL] == job_id
    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", obj["metadata"]["uid"])

    # The hub's ledger: 2 GPUs, one job (its grant settled by the pods, through the JobSet).
    def counted_once() -> dict[str, Any] | None:
        held = jobs.holdings("alice")
        mine = [h for h in held["holdings"] if h["name"] == job_id]
        return held if held["held"] == 2 and len(mine) == 1 else None

    jobs.kube.wait_for(counted_once, timeout=60, interval=0.5)
    status = server.api("GET", f"gpuhub/api/jobs/{job_id}").json()
    assert status["status"] == "running", status
    # Over the quota (4) with this job's 2 GPUs held: refused, naming what she holds.
    more = server.api(
        "POST",
        "gpuhub/api/jobs",
        json={"notebook": "train.ipynb", "kind": "trainjob", "workers": 2, "gpus": 2,
              "gpu_type": "local"},
    )  # fmt: skip
    assert more.status_code == 403, more.text
    assert f"job {job_id!r}: 2" in more.json()["message"]

    gate.touch()

    def succeeded() -> dict[str, Any] | None:
        answer = server.api("GET", f"gpuhub/api/jobs/{job_id}").json()
        assert answer["status"] in ("running", "succeeded"), answer
        return answer if answer["status"] == "succeeded" else None

    done = jobs.kube.wait_for(succeeded, timeout=60, interval=0.5)
    # Node 0's executed notebook came back into alice's files; the log is node 0's.
    executed = json.loads((Path(server.root) / done["output"]).read_text())
    outputs = "".join(
        "".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])
    )
    assert "node 0 of 2 finds" in outputs and "trained on node 0" in outputs
    logs = server.api("GET", f"gpuhub/api/jobs/{job_id}/logs").json()["logs"]
    assert "trained on node 0" in logs and "trained on node 1" not in logs
    jobs.kube.wait_for(lambda: jobs.held("alice") == 0, timeout=60, interval=0.5)


def test_cancel_deletes_the_trainjob_and_what_it_owns(jobs, server):
    jobs.kube.require_local("the process node, where the TrainJob's nodes really run")
    created = server.api(
        "POST",
        "gpuhub/api/jobs",
        json={"notebook": "train.ipynb", "kind": "trainjob", "workers": 2, "gpus": 0,
              "parameters": {"gate": "/nonexistent/never"}},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    jobs.kube.wait_for(
        lambda: len(jobs.kube.list("Pod", labels={JOB_ID_LABEL: job_id})) == 2, timeout=120
    )
    jobset = jobs.kube.get("JobSet", job_id, api_version="jobset.x-k8s.io/v1alpha2")
    assert jobset is not None
    cancelled = server.api("DELETE", f"gpuhub/api/jobs/{job_id}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"

    def gone() -> bool:
        return (
            trainjob(jobs, job_id) is None
            and jobs.kube.get("JobSet", job_id, api_version="jobset.x-k8s.io/v1alpha2") is None
            and not jobs.kube.list("Pod", labels={JOB_ID_LABEL: job_id})
            and jobs.kube.get("ConfigMap", m.configmap_name(job_id)) is None
        )

    jobs.kube.wait_for(gone, timeout=90, interval=0.5)


def test_only_the_offered_kinds_and_runtimes_are_accepted(jobs, server):
    before = jobs.kube.list("TrainJob", api_version=TRAINER)
    refused = server.api(
        "POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb", "kind": "tfjob"}
    )
    assert refused.status_code == 400
    assert refused.json() | {"errors": None} == {
        "field": "kind",
        "message": 'Job kind "tfjob" is not offered here; the kinds offered are "job" '
        '(training job), "trainjob" (TrainJob).',
        "errors": None,
    }
    runtime = server.api(
        "POST",
        "gpuhub/api/jobs",
        json={"notebook": "train.ipynb", "kind": "trainjob", "runtime": "deepspeed"},
    )
    assert runtime.status_code == 400
    assert runtime.json()["field"] == "runtime"
    assert runtime.json()["message"] == (
        'Runtime "deepspeed" is not offered here; the runtimes offered are "torch-distributed".'
    )
    # The service itself holds the line for any other caller of its API.
    token = jobs.token("bob")
    direct = jobs.call(
        "POST", "jobs", token, json={"notebook": "x.ipynb", "notebook_content": "{}",
                                     "kind": "pytorchjob"},
    )  # fmt: skip
    assert direct.status_code == 400 and direct.json()["field"] == "kind"
    assert '"job" (training job), "trainjob" (TrainJob)' in direct.json()["message"]
    kinds = jobs.call("GET", "jobs/kinds", token).json()
    assert [k["kind"] for k in kinds["kinds"]] == ["job", "trainjob"]
    assert kinds["runtimes"] == [RUNTIME]
    assert jobs.kube.list("TrainJob", api_version=TRAINER) == before  # nothing half-made


# -- status from the TrainJob's conditions (no cluster needed) -----------------------------------
def _trainjob(conditions=(), trainer_status=None, suspend=False) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if trainer_status is not None:
        status["trainerStatus"] = trainer_status
    return {
        "kind": "TrainJob",
        "metadata": {"name": "train-x"},
        "spec": {"suspend": suspend},
        "status": status,
    }


def _node(index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "startedAt": "2026-01-01T00:00:00Z"}}
    return {
        "metadata": {
            "name": f"train-x-node-0-{index}",
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {"nodeName": "gpu-1"},
        "status": {"phase": phase, "containerStatuses": [{"name": "node", "state": state}]},
    }


def test_trainjob_status_follows_its_conditions_and_trainers_progress():
    from gpuhub.jobs.kinds import workload_kind

    train_job_phase = workload_kind("trainjob").phase

    gpu = "2 workers, 1 x NVIDIA A100 80GB each"
    running = train_job_phase(_trainjob(), [_node(0, "Running"), _node(1, "Running")], gpu)
    assert (running.status, running.message) == ("running", "Running.")
    assert running.started == "2026-01-01T00:00:00Z"
    progress = {"progressPercentage": 40, "estimatedRemainingSeconds": 170}
    reported = train_job_phase(_trainjob(trainer_status=progress), [_node(0, "Running")], gpu)
    assert reported.message == "Running: 40% done, about 3 minutes left."
    done = {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z"}
    complete = train_job_phase(_trainjob([done]), [_node(0, "Succeeded", 0)], gpu)
    assert (complete.status, complete.finished) == ("succeeded", "2026-01-01T00:05:00Z")
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": "jobset failed",
        "lastTransitionTime": "2026-01-01T00:05:00Z",
    }
    phase = train_job_phase(_trainjob([failed]), [_node(0, "Running"), _node(1, "Failed", 3)], gpu)
    assert phase.status == "failed"
    assert phase.error is not None and phase.error.startswith("The TrainJob failed: ")
    assert "node 1 exited with code 3" in phase.error
    held = train_job_phase(_trainjob(suspend=True), [], gpu)
    assert held.status == "pending" and "Suspended" in (held.message or "")
