"""The Kubernetes job backend (kinds job, pytorchjob, tfjob) on the test cluster
(harness/cluster.py: a real kube-apiserver, scheduler, controllers and the Kubeflow
Training Operator with its webhook).

Manifests are checked against the official schemas (kubernetes_validate, strict) and created
with ``dryRun=All`` and strict field validation on the real apiserver, through the Training
Operator's validating webhook for PyTorchJobs and TFJobs. Jobs that must return their logs and
executed notebook run for real on the process node ``local-0`` (CPU-only, or the ``local``
GPU type): the job's own runner runs papermill there, and its log comes back through the
apiserver as on any cluster. GPU jobs whose placement or figures matter run on kwok's fake
A100 nodes and are ended with ``kube.finish_job``. Faults come from the fault proxy.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nbformat
import pytest
from kubernetes_asyncio import config

from gpuhub.core.policy import Policy
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.kinds import workload_kind
from gpuhub.jobs.kinds.phase import FINISHING
from gpuhub.jobs.model import JobError, JobNotFound
from gpuhub.k8s.labels import JOB_ID_LABEL, MANAGED_BY_LABEL, USER_LABEL, USERNAME_ANNOTATION
from harness.cluster import (
    A100_PRODUCT,
    GPU_TOLERATION,
    KWOK_TOLERATION,
    MISSING_IMAGE_SUFFIX,
    Kube,
)
from tests.support.jobs_service import (
    NOTEBOOK_FAILS,
    NOTEBOOK_OK,
    accepted,
    cluster_request,
    container_of,
    validate,
    write_notebook,
)
from tests.support.jobs_service import make_request as request_under
from tests.support.messages import problems
from tests.support.policies import DESIGN_CONFIG, cluster_policy
from tests.support.shared_gpus import GPU_TYPES as SHARED_TYPES
from tests.support.shared_gpus import HAMI_NODE, add_nodes

# A real kube-apiserver, controllers and operators (harness/cluster.py).
pytestmark = pytest.mark.e2e

GPU_NAMES = {k: t.display_name for k, t in cluster_policy().gpu_types.items()}
IMAGE = "ghcr.io/gpuhub/gpuhub-notebook:0.1.0"
# A notebook that SIGKILLs the runner driving it, as Linux's OOM killer would a job over its
# memory: the pod ends with 137 and no result line in its log.
NOTEBOOK_KILLED = ["import os, signal", "os.kill(os.getppid(), signal.SIGKILL)"]
make_request = cluster_request  # every request here is under the cluster's GPU types


@pytest.fixture
def settings(kube: Kube) -> m.KubeJobSettings:
    return m.KubeJobSettings(namespace=kube.namespace, job_image=IMAGE)


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    write_notebook(root / "exp" / "broken.ipynb", NOTEBOOK_FAILS)
    write_notebook(root / "killed.ipynb", NOTEBOOK_KILLED)
    return root


async def backend_for(kubeconfig, settings: m.KubeJobSettings) -> KubernetesBackend:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    return KubernetesBackend(api, settings, gpu_names=GPU_NAMES)


@pytest.fixture
async def backend(kube, settings):
    backend = await backend_for(kube.kubeconfig, settings)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def faulty_backend(kube_faults, settings):
    """The backend talking to the apiserver through the fault proxy."""
    backend = await backend_for(kube_faults.kubeconfig, settings)
    try:
        yield backend
    finally:
        await backend.close()


async def wait_status(backend, owner, job_id, *statuses, timeout=60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        record = await backend.get(owner, job_id)
        if record.status in statuses:
            return record
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{job_id} stayed {record.status}: {record.message}")
        await asyncio.sleep(0.1)


async def wait_message(backend, owner, job_id, words, timeout=60.0):
    """The job's record once its message says ``words``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        record = await backend.get(owner, job_id)
        if record.message and words in record.message:
            return record
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{job_id}: {record.status} {record.message!r}")
        await asyncio.sleep(0.1)


def submit_args(root, path="train.ipynb"):
    return {"notebook": (root / path).read_bytes()}


def on_kwok(root, gpus=1, **body):
    """A GPU job on kwok's fake A100 nodes: it runs (no process) until ``kube.finish_job``."""
    return make_request(root, gpus=gpus, gpu_type="a100", **body)


async def gpu_quota(kube: Kube, gpus: int) -> None:
    """The chart's ResourceQuota (resourceQuota.enabled) on the namespace's GPUs, once the
    quota controller has counted it (until then the apiserver refuses every pod with
    "status unknown for quota")."""
    await asyncio.to_thread(
        kube.create,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpuhub-gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}},
        },
    )
    await asyncio.to_thread(
        kube.wait_for,
        lambda: (kube.get("ResourceQuota", "gpuhub-gpus").get("status") or {}).get("hard"),
    )


# -- manifests ----------------------------------------------------------------------------------
def test_gpu_job_manifest_follows_the_server_rules(root, kube, settings):
    request = make_request(root, gpus=2, gpu_type="a100", cpu=4, memory="32G")
    job = m.workload(request, "alice@example.org", "train-abc123", settings, key="k", created="now")
    configmap = m.input_configmap(
        request,
        "alice@example.org",
        "train-abc123",
        settings,
        (root / "train.ipynb").read_bytes(),
        "k",
    )
    validate(job)
    validate(configmap)
    accepted(kube, job)
    accepted(kube, configmap)
    pod = job["spec"]["template"]["spec"]
    container = container_of(job)
    resources = container["resources"]
    assert (
        resources["limits"]
        == resources["requests"]
        == {
            "cpu": "4",
            "memory": "32G",
            "nvidia.com/gpu": "2",
        }
    )
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": A100_PRODUCT}
    assert GPU_TOLERATION in pod["tolerations"]
    assert {"name": "gpuhub-dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False  # user code holds no credentials
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    labels = job["metadata"]["labels"]
    assert labels[MANAGED_BY_LABEL] == "gpuhub"
    assert labels[JOB_ID_LABEL] == "train-abc123"
    assert labels[USER_LABEL] != "alice@example.org"  # a label-safe slug ...
    assert job["metadata"]["annotations"][USERNAME_ANNOTATION] == "alice@example.org"  # exact
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPUHUB_GPUS"] == "2" and "NVIDIA_VISIBLE_DEVICES" not in env
    assert json.loads(configmap["data"]["notebook.ipynb"])["cells"]


def test_cpu_only_job_sees_no_gpu(root, kube, settings):
    request = make_request(root, gpus=0)
    job = m.workload(request, "alice", "train-abc123", settings, key="k", created="now")
    validate(job)
    accepted(kube, job)
    pod = job["spec"]["template"]["spec"]
    container = container_of(job)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert not any(k.startswith("nvidia.com/") for k in container["resources"]["limits"])
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_shared_home_mounts_the_claim_and_writes_next_to_the_notebook(root, kube):
    settings = m.KubeJobSettings(
        namespace=kube.namespace,
        job_image="img:1",
        home_volume=m.HomeVolume("claim-{username}", "/home/jovyan", True),
    )
    request = make_request(root, notebook="exp/broken.ipynb")
    job = m.workload(request, "Alice.B", "broken-x1", settings, key="k", created="now")
    configmap = m.input_configmap(request, "Alice.B", "broken-x1", settings, None, "k")
    validate(job)
    validate(configmap)
    accepted(kube, job)  # the claim need not exist to create the Job
    accepted(kube, configmap)
    pod = job["spec"]["template"]["spec"]
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == [settings.home_volume.claim_name("Alice.B")]
    env = {e["name"]: e["value"] for e in container_of(job)["env"]}
    assert env["GPUHUB_INPUT"] == "/home/jovyan/exp/broken.ipynb"
    assert env["GPUHUB_OUTPUT"] == "/home/jovyan/exp/gpuhub-runs/broken-x1/broken-x1.ipynb"
    assert env["GPUHUB_PRINT_OUTPUT"] == "0"
    assert "notebook.ipynb" not in configmap["data"]  # it is read from the volume


def test_claim_name_matches_kubespawner():
    from kubespawner.slugs import safe_slug

    home = m.HomeVolume()
    assert home.claim_name("alice") == "claim-alice"
    assert (
        home.claim_name("Alice@Example.org")
        == f"claim-{safe_slug('Alice@Example.org', max_length=48)}"
    )


def test_oversized_notebook_is_refused_before_anything_is_made(root):
    settings = m.KubeJobSettings(job_image="img:1", max_notebook_bytes=1000)
    request = make_request(root)
    with pytest.raises(JobError) as caught:
        m.input_configmap(request, "alice", "t-1", settings, b"x" * 2000, "k")
    assert caught.value.status == 413
    assert "over the" in caught.value.message and "train.ipynb" in caught.value.message


def test_distributed_manifests(root, kube, settings):
    request = make_request(root, kind="pytorchjob", workers=3, gpus=4, gpu_type="a100")
    obj = m.workload(request, "alice", "train-x1", settings, key="k", created="now")
    # The Training Operator's validating webhook and the CRD's schema, strictly.
    stored = accepted(kube, obj)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    specs = obj["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    assert obj["spec"]["nprocPerNode"] == "4"
    for replica in specs.values():
        pod = replica["template"]["spec"]
        assert pod["containers"][0]["name"] == "pytorch"
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        as_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod}
        validate(as_pod)
        accepted(kube, as_pod)
    tf = m.workload(
        make_request(root, kind="tfjob", workers=2, gpus=1, gpu_type="a100"),
        "alice",
        "train-x2",
        settings,
        key="k",
        created="now",
    )
    accepted(kube, tf)
    assert set(tf["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker"}
    assert (
        tf["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["name"]
        == "tensorflow"
    )
    long = make_request(root, kind="pytorchjob", name="a" * 52, workers=2)
    job_id = m.make_job_id(long.name, "alice", "k", "pytorchjob")
    assert len(f"{job_id}-worker-63") <= 63


# -- lifecycle on the cluster ---------------------------------------------------------------------
async def test_job_runs_and_returns_the_executed_notebook(kube, backend, settings, root):
    # A simulated GPU of the process node: the pod really runs, with its device.
    request = make_request(root, gpus=1, gpu_type="local", parameters={"epochs": 3})
    record = await backend.submit(request, "alice", key="first", **submit_args(root))
    assert record.status == "pending" and record.gpu == "1 x Simulated GPU"
    job = await asyncio.to_thread(kube.get, "Job", record.id)
    configmap = await asyncio.to_thread(kube.get, "ConfigMap", m.configmap_name(record.id))
    # The ConfigMap is owned by the Job: deleting the Job removes it.
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    running = await wait_status(backend, "alice", record.id, "running", "succeeded")
    assert running.started is not None
    [pod] = await asyncio.to_thread(kube.job_pods, record.id)
    assert pod["spec"]["nodeName"] == "local-0"

    done = await wait_status(backend, "alice", record.id, "succeeded", "failed")
    assert done.status == "succeeded", done.error
    assert done.finished is not None and done.error is None and done.started is not None

    logs = await backend.logs("alice", record.id)
    assert "training for 3 epochs" in logs
    assert "gpuhub-result" not in logs and "H4sI" not in logs  # markers and payload hidden
    output = await backend.output("alice", record.id)
    executed = nbformat.reads(output.decode(), as_version=4)
    outputs = [o.get("text", "") for c in executed.cells for o in c.get("outputs", [])]
    assert "result 6\n" in outputs
    assert [r.id for r in await backend.list("alice")] == [record.id]
    # The state is the cluster's: a restarted service answers for the job as before.
    restarted = await backend_for(kube.kubeconfig, settings)
    try:
        again = await restarted.get("alice", record.id)
        assert (again.status, again.started, again.finished) == (
            "succeeded",
            done.started,
            done.finished,
        )
        assert await restarted.output("alice", record.id) == output
    finally:
        await restarted.close()


async def test_a_finished_pod_is_not_a_job_waiting_again(kube, backend, root):
    """For a moment after its pod ends, a Job has no Complete or Failed condition yet (the Job
    controller batches pod updates): the job is finishing, not waiting for a pod."""
    record = await backend.submit(make_request(root), "alice", **submit_args(root))
    seen: list[tuple[str, str | None]] = []
    while not seen or seen[-1][0] not in ("succeeded", "failed"):
        got = await backend.get("alice", record.id)
        if not seen or seen[-1] != (got.status, got.message):
            seen.append((got.status, got.message))
        await asyncio.sleep(0.05)
    statuses = [status for status, _ in seen]
    assert statuses[-1] == "succeeded", seen
    # pending, then running (and finishing), then the end: never back to pending.
    assert statuses == sorted(statuses, key=["pending", "running", "succeeded"].index), seen
    assert all(message != FINISHING or status == "running" for status, message in seen)
    assert not problems(FINISHING)


def test_the_failing_pod_is_named_before_the_controllers_rule():
    """How a failure the runner could not report reads (killed, out of memory)."""

    def pod(code: int, reason: str, finished: str, **labels: str) -> dict[str, Any]:
        ended = {"exitCode": code, "reason": reason, "finishedAt": finished}
        return {
            "metadata": {"name": "p", "labels": labels},
            "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": ended}}]},
        }

    failed = {
        "type": "Failed",
        "status": "True",
        "message": "Job has reached the specified backoff limit",
    }
    job = {"metadata": {"name": "j"}, "status": {"conditions": [failed]}}
    job_phase = workload_kind("job").phase
    assert job_phase(job, [pod(137, "OOMKilled", "t1")], "CPU only").error == (
        "The job failed: its pod exited with code 137 (OOMKilled); Job has reached the "
        "specified backoff limit."
    )
    assert job_phase(job, [], "CPU only").error == (
        "The job failed: Job has reached the specified backoff limit."
    )
    replica = "training.kubeflow.org/replica-type"
    pods = [
        pod(
            0, "Completed", "t0", **{replica: "master", "training.kubeflow.org/replica-index": "0"}
        ),
        pod(2, "Error", "t2", **{replica: "worker", "training.kubeflow.org/replica-index": "0"}),
        pod(1, "Error", "t1", **{replica: "worker", "training.kubeflow.org/replica-index": "1"}),
    ]
    error = workload_kind("pytorchjob").phase(job, pods, "CPU only").error
    assert error.startswith("The PyTorchJob failed: worker 1 exited with code 1; Job has")
    assert not problems(error)


async def test_failed_notebook_reports_the_failing_cell(backend, root):
    request = make_request(root, notebook="exp/broken.ipynb")
    record = await backend.submit(request, "alice", **submit_args(root, "exp/broken.ipynb"))
    failed = await wait_status(backend, "alice", record.id, "failed", "succeeded")
    assert failed.status == "failed"
    assert failed.error.startswith("The notebook failed in cell")
    assert "ValueError: loss is NaN" in failed.error
    assert failed.failed_cell is not None and failed.failed_cell.ename == "ValueError"
    assert "raise ValueError" in failed.failed_cell.source
    # The executed notebook (up to the failure) still comes back.
    assert b"loss is NaN" in await backend.output("alice", record.id)


async def test_job_killed_without_a_result_says_why(kube, backend, root):
    record = await backend.submit(
        make_request(root, notebook="killed.ipynb"), "alice", **submit_args(root, "killed.ipynb")
    )
    failed = await wait_status(backend, "alice", record.id, "failed", "succeeded")
    [pod] = await asyncio.to_thread(kube.job_pods, record.id)
    [state] = [c["state"] for c in pod["status"]["containerStatuses"]]
    assert state["terminated"]["exitCode"] == 137  # SIGKILL, as from the OOM killer
    assert failed.status == "failed" and failed.failed_cell is None
    # The Job controller says only that the backoff limit was reached; gpuhub says how.
    assert failed.error.startswith("The job failed: its pod exited with code 137; ")
    assert not problems(failed.error)
    with pytest.raises(JobError) as caught:
        await backend.output("alice", record.id)
    assert caught.value.status == 404


async def test_cancel_deletes_the_job_its_pods_and_its_input(kube, backend, root):
    record = await backend.submit(on_kwok(root), "alice", **submit_args(root))
    await wait_status(backend, "alice", record.id, "running")
    assert await asyncio.to_thread(kube.list, "Pod", labels={JOB_ID_LABEL: record.id})
    cancelled = await backend.cancel("alice", record.id)
    assert cancelled.status == "cancelled"
    await asyncio.to_thread(
        kube.wait_for,
        lambda: (
            not kube.get("Job", record.id)
            and not kube.list("Pod", labels={JOB_ID_LABEL: record.id})
            and not kube.get("ConfigMap", m.configmap_name(record.id))
        ),
        60,
    )
    assert (await backend.get("alice", record.id)).status == "cancelled"
    assert [r.status for r in await backend.list("alice")] == ["cancelled"]
    # Cancelling again is harmless; a finished job is returned unchanged.
    assert (await backend.cancel("alice", record.id)).status == "cancelled"


async def test_cancel_stops_a_job_that_really_runs(kube, backend, root):
    """Cancel reaches the process: the pod's runner gets its stop signal and the pod goes."""
    write_notebook(
        root / "slow.ipynb", ["import time", "print('working', flush=True)", "time.sleep(600)"]
    )
    record = await backend.submit(
        make_request(root, notebook="slow.ipynb"), "alice", **submit_args(root, "slow.ipynb")
    )
    await wait_status(backend, "alice", record.id, "running")
    deadline = asyncio.get_running_loop().time() + 60
    while "working" not in await backend.logs("alice", record.id):
        assert asyncio.get_running_loop().time() < deadline, "the notebook never ran"
        await asyncio.sleep(0.2)
    assert (await backend.cancel("alice", record.id)).status == "cancelled"
    # The node agent removes the pod once its processes have ended, as a kubelet does.
    await asyncio.to_thread(
        kube.wait_for,
        lambda: not kube.get("Job", record.id) and not kube.job_pods(record.id),
        60,
    )


async def test_waiting_for_gpus_is_said_in_words(kube, backend, root):
    records = [
        await backend.submit(on_kwok(root, gpus=8), "alice", **submit_args(root)) for _ in range(3)
    ]
    nodes = len(await asyncio.to_thread(kube.list, "Node"))

    async def two_run_one_waits():
        got = [await backend.get("alice", r.id) for r in records]
        waiting = [r for r in got if r.message and "Insufficient" in r.message]
        if sorted(r.status for r in got) == ["pending", "running", "running"] and waiting:
            return waiting[0]
        return None

    deadline = asyncio.get_running_loop().time() + 60
    while (pending := await two_run_one_waits()) is None:
        assert asyncio.get_running_loop().time() < deadline, "no job said it waits for GPUs"
        await asyncio.sleep(0.1)
    # The two A100 nodes hold two; the third waits, with the scheduler's reason in words.
    assert pending.message.startswith(
        f"Waiting for a free GPU (8 x NVIDIA A100 80GB): 0/{nodes} nodes are available"
    )
    assert "Insufficient nvidia.com/gpu" in pending.message


async def test_missing_home_claim_is_said_in_words(kube, root):
    """With a shared home the job mounts the user's claim; if it does not exist (the user never
    started a server, or the hub makes none) the scheduler cannot place the pod at all. The job
    must not claim to be waiting for a GPU."""
    shared = m.KubeJobSettings(
        namespace=kube.namespace,
        job_image=IMAGE,
        home_volume=m.HomeVolume("claim-{username}", "/home/jovyan", True),
    )
    backend = await backend_for(kube.kubeconfig, shared)
    try:
        record = await backend.submit(on_kwok(root), "alice", **submit_args(root))
        pending = await wait_message(backend, "alice", record.id, "claim")
        nodes = len(await asyncio.to_thread(kube.list, "Node"))
        assert pending.status == "pending"
        assert pending.message.startswith(
            f"Waiting for the volume it mounts: 0/{nodes} nodes are available: "
            'persistentvolumeclaim "claim-alice" not found.'
        )
    finally:
        await backend.close()


# -- ownership, idempotency, rollback, quota --------------------------------------------------------
async def test_another_users_job_is_invisible(kube, backend, root):
    record = await backend.submit(on_kwok(root), "alice", **submit_args(root))
    for call in (backend.get, backend.logs, backend.cancel, backend.output):
        with pytest.raises(JobNotFound) as caught:
            await call("bob", record.id)
        assert caught.value.status == 404
    assert await backend.list("bob") == []
    job = await asyncio.to_thread(kube.get, "Job", record.id)
    assert job["metadata"].get("deletionTimestamp") is None


async def test_retried_submit_makes_one_job(kube, backend, root):
    # GPU jobs on kwok's nodes: they wait there, where CPU-only ones would run papermill.
    request = on_kwok(root)
    first = await backend.submit(request, "alice", key="retry-1", **submit_args(root))
    again = await backend.submit(request, "alice", key="retry-1", **submit_args(root))
    assert again.id == first.id
    assert len(await asyncio.to_thread(kube.list, "Job")) == 1
    configmaps = await asyncio.to_thread(kube.list, "ConfigMap", labels={JOB_ID_LABEL: first.id})
    assert len(configmaps) == 1
    other = await backend.submit(request, "alice", key="retry-2", **submit_args(root))
    assert other.id != first.id
    # The same key from another user is another job.
    assert (await backend.submit(request, "bob", key="retry-1", **submit_args(root))).id != first.id


async def test_failed_create_leaves_no_configmap(kube, kube_faults, faulty_backend, root):
    kube_faults.fail_requests(
        500, method="POST", path=f"/apis/batch/v1/namespaces/{kube.namespace}/jobs"
    )
    with pytest.raises(JobError) as caught:
        await faulty_backend.submit(make_request(root), "alice", **submit_args(root))
    assert caught.value.status == 503 and "nothing was left behind" in caught.value.message
    managed = {MANAGED_BY_LABEL: "gpuhub"}
    assert await asyncio.to_thread(kube.list, "ConfigMap", labels=managed) == []
    assert await asyncio.to_thread(kube.list, "Job") == []


async def test_failed_owner_reference_rolls_back_the_job(kube, kube_faults, faulty_backend, root):
    kube_faults.fail_requests(
        503, method="PATCH", path=f"/api/v1/namespaces/{kube.namespace}/configmaps/"
    )
    with pytest.raises(JobError):
        await faulty_backend.submit(make_request(root), "alice", **submit_args(root))
    managed = {MANAGED_BY_LABEL: "gpuhub"}
    await asyncio.to_thread(
        kube.wait_for,
        lambda: (
            not kube.list("Job")
            and not kube.list("Pod", labels=managed)
            and not kube.list("ConfigMap", labels=managed)
        ),
        60,
    )


def server_pod(user: str, gpus: int) -> dict[str, Any]:
    """A single-user server pod as KubeSpawner labels it, on kwok's A100 nodes."""
    from kubespawner.slugs import is_valid_label, safe_slug

    resources = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1G"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"jupyter-{safe_slug(user)}",
            "labels": {
                "component": "singleuser-server",
                "hub.jupyter.org/username": safe_slug(user, is_valid=is_valid_label),
            },
            "annotations": {"hub.jupyter.org/username": user},
        },
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": "img:1",
                    "resources": {"limits": resources, "requests": resources},
                }
            ],
            "nodeSelector": {"nvidia.com/gpu.product": A100_PRODUCT},
            "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
        },
    }


async def test_quota_counts_servers_and_jobs_together(kube, backend, root):
    await asyncio.to_thread(kube.create, server_pod("alice", 1))
    assert await backend.gpus_in_use("alice") == 1
    assert await backend.gpus_in_use("bob") == 0
    two = on_kwok(root, gpus=2)
    with pytest.raises(JobError) as caught:
        await backend.submit(two, "alice", quota=backend.own_quota(2), **submit_args(root))
    assert caught.value.status == 403
    assert caught.value.message == (
        "You hold 1 of your quota of 2 GPUs (server 'default': 1) and this job needs 2 more; "
        "stop a server or wait for a job to end."
    )
    assert await asyncio.to_thread(kube.list, "Job") == []
    one = on_kwok(root, gpus=1)
    record = await backend.submit(one, "alice", quota=backend.own_quota(2), **submit_args(root))
    assert await backend.gpus_in_use("alice") == 2
    with pytest.raises(JobError):
        await backend.submit(one, "alice", quota=backend.own_quota(2), **submit_args(root))
    with pytest.raises(JobError) as caught:
        await backend.submit(
            on_kwok(root, gpus=3), "bob", quota=backend.own_quota(2), **submit_args(root)
        )
    assert caught.value.status == 403
    assert caught.value.message == (
        "This job needs 3 GPUs, more than your quota of 2 GPUs at once (servers and jobs together)."
    )
    # A finished job frees its GPUs; CPU-only jobs never count.
    await wait_status(backend, "alice", record.id, "running")
    await asyncio.to_thread(kube.finish_job, record.id, succeed=True)
    await wait_status(backend, "alice", record.id, "succeeded")
    assert await backend.gpus_in_use("alice") == 1
    await backend.submit(
        make_request(root, gpus=0), "alice", quota=backend.own_quota(1), **submit_args(root)
    )


async def test_pod_refused_by_the_namespace_quota_is_said_in_words(kube, backend, root):
    """The chart's ResourceQuota (resourceQuota.enabled) caps the namespace's GPUs for all users
    together: a Job is accepted, but Kubernetes refuses its pod (the Job controller records
    FailedCreate). The job must say so rather than wait for a pod that never comes."""
    await gpu_quota(kube, 2)
    four = on_kwok(root, gpus=4)
    record = await backend.submit(four, "alice", quota=backend.own_quota(8), **submit_args(root))
    pending = await wait_message(backend, "alice", record.id, "quota")
    assert pending.status == "pending"
    assert pending.message == (
        "Kubernetes refused to create the job's pod: exceeded quota: gpuhub-gpus, requested: "
        "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=2"
    )
    listed = next(r for r in await backend.list("alice") if r.id == record.id)
    assert listed.message == pending.message


async def test_training_job_refused_by_the_namespace_quota_is_said_in_words(kube, backend, root):
    """The training operator records FailedCreatePod when a replica's pod is refused; a
    PyTorchJob missing pods says so too (the master fits, the workers do not)."""
    await gpu_quota(kube, 2)
    request = on_kwok(root, gpus=2, kind="pytorchjob", workers=2)
    record = await backend.submit(request, "alice", quota=backend.own_quota(8), **submit_args(root))
    pending = await wait_message(backend, "alice", record.id, "quota")
    assert pending.status == "pending"
    assert pending.message.startswith(
        "Kubernetes refused to create the PyTorchJob's pods: exceeded quota: gpuhub-gpus, "
        "requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=2"
    )


async def test_concurrent_submits_cannot_both_squeeze_under_the_quota(backend, root):
    one = on_kwok(root)
    results = await asyncio.gather(
        *(
            backend.submit(one, "alice", quota=backend.own_quota(1), **submit_args(root))
            for _ in range(3)
        ),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, JobError) for r in results if isinstance(r, Exception))


# -- Kubeflow training operator kinds ----------------------------------------------------------------
async def test_pytorchjob_and_tfjob_run_under_the_training_operator(kube, backend, root):
    pt = await backend.submit(
        on_kwok(root, gpus=2, kind="pytorchjob", workers=3), "alice", **submit_args(root)
    )
    assert pt.status == "pending"
    assert pt.workers == 3 and pt.gpu == "3 workers, 2 x NVIDIA A100 80GB each"
    stored = await asyncio.to_thread(kube.get, "PyTorchJob", pt.id)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert stored["spec"]["nprocPerNode"] == "2"
    configmap = await asyncio.to_thread(kube.get, "ConfigMap", m.configmap_name(pt.id))
    assert configmap["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"

    # The operator makes a master and two workers; once they run, so does the job.
    running = await wait_status(backend, "alice", pt.id, "running")
    assert running.started is not None
    pods = await asyncio.to_thread(kube.job_pods, pt.id, "PyTorchJob")
    roles = sorted(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods)
    assert roles == ["master", "worker", "worker"]
    # A worker fails: with no restarts (backoffLimit 0), the operator fails the job.
    worker = next(
        p for p in pods if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"
    )
    await asyncio.to_thread(kube.finish_pods, [worker], 1)
    failed = await wait_status(backend, "alice", pt.id, "failed")
    # The operator's condition names the backoff limit only, not the replica that failed;
    # gpuhub says which replica failed.
    index = worker["metadata"]["labels"]["training.kubeflow.org/replica-index"]
    assert failed.error.startswith(f"The PyTorchJob failed: worker {index} exited with code 1; ")
    assert "backoff limit" in failed.error and not problems(failed.error)

    tf = await backend.submit(on_kwok(root, kind="tfjob", workers=2), "alice", **submit_args(root))
    stored = await asyncio.to_thread(kube.get, "TFJob", tf.id)
    assert set(stored["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker"}
    assert {r.kind for r in await backend.list("alice")} == {"pytorchjob", "tfjob"}
    await wait_status(backend, "alice", tf.id, "running")
    cancelled = await backend.cancel("alice", tf.id)
    assert cancelled.status == "cancelled"
    await asyncio.to_thread(
        kube.wait_for,
        lambda: (
            not kube.get("TFJob", tf.id)
            and not kube.get("ConfigMap", m.configmap_name(tf.id))
            and not kube.job_pods(tf.id, "TFJob")
        ),
        60,
    )


async def test_pytorchjob_succeeds_when_its_master_does(kube, backend, root):
    """The master's result is the job's: its pods end, the operator says Succeeded."""
    pt = await backend.submit(
        on_kwok(root, kind="pytorchjob", workers=2), "alice", **submit_args(root)
    )
    await wait_status(backend, "alice", pt.id, "running")
    await asyncio.to_thread(kube.finish_job, pt.id, "PyTorchJob", True)
    done = await wait_status(backend, "alice", pt.id, "succeeded", "failed")
    assert done.status == "succeeded" and done.finished is not None


async def test_missing_training_operator_is_said_plainly(kube_faults, faulty_backend, root):
    # The cluster's operator is shared by every test: the proxy answers for a cluster
    # without it, whose apiserver serves no kubeflow.org/v1 (404).
    kube_faults.fail_requests(404, path="/apis/kubeflow.org/v1", count=None)
    request = make_request(root, kind="pytorchjob", workers=2)
    with pytest.raises(JobError) as caught:
        await faulty_backend.check(request, "alice")
    assert caught.value.status == 422
    assert caught.value.message == (
        "This cluster cannot run a PyTorchJob: the Kubeflow training operator is not installed "
        "(no kubeflow.org/v1 PyTorchJob or TFJob resource); submit a training job (kind job) instead."
    )
    # Kubeflow Trainer (trainer.kubeflow.org) is still there: TrainJobs run.
    assert await faulty_backend.served_custom_kinds() == frozenset({"trainjob"})
    assert await faulty_backend.list("alice") == []  # listing does not trip over the missing group


async def test_missing_trainer_or_runtime_is_said_plainly(kube_faults, faulty_backend, root):
    from gpuhub.jobs.model import Runtimes

    def trainjob(runtime: str) -> Any:
        offered = Runtimes((runtime,), runtime)
        return make_request(root, kind="trainjob", workers=2, runtimes=offered)

    # An offered runtime the cluster lacks: refused, naming it.
    with pytest.raises(JobError) as caught:
        await faulty_backend.check(trainjob("deepspeed-distributed"), "alice")
    assert (caught.value.field, caught.value.status) == ("runtime", 422)
    assert caught.value.message == (
        'The training runtime "deepspeed-distributed" is offered here but this cluster has no '
        "ClusterTrainingRuntime of that name; ask your admin to install it or to stop offering it."
    )
    await faulty_backend.check(trainjob("torch-distributed"), "alice")  # the cluster has it
    # A cluster without Trainer (no trainer.kubeflow.org/v1alpha1): refused, saying so.
    kube_faults.fail_requests(404, path="/apis/trainer.kubeflow.org/", count=None)
    faulty_backend._discovered = None  # discovery is cached a minute
    with pytest.raises(JobError) as caught:
        await faulty_backend.check(trainjob("torch-distributed"), "alice")
    assert caught.value.status == 422
    assert caught.value.message == (
        "This cluster cannot run a TrainJob: Kubeflow Trainer is not installed (no "
        "trainer.kubeflow.org/v1alpha1 TrainJob resource); ask your admin."
    )
    assert "trainjob" not in await faulty_backend.served_custom_kinds()
    assert await faulty_backend.list("alice") == []


async def test_image_pull_failure_is_said_in_words(kube, backend, root):
    # kwok's nodes never pull an image tagged :missing (localk8s/nodes.py).
    image = f"registry.example.org/me/notebook{MISSING_IMAGE_SUFFIX}"
    record = await backend.submit(on_kwok(root, image=image), "alice", **submit_args(root))
    pending = await wait_message(backend, "alice", record.id, "Cannot pull")
    assert pending.status == "pending"
    assert pending.message.startswith(f"Cannot pull the image {image}")


# -- shares of a GPU (issue 24) --------------------------------------------------------------------
# Every kind's manifest gives each pod one device plus the share's memory and cores (HAMi) or
# whole replicas (time-slicing), accepted by the apiserver and the Training Operator's webhook;
# a Job the backend creates is scheduled onto a kwok node advertising HAMi's resources.
SHARED_POLICY = Policy.from_config(
    **{
        **DESIGN_CONFIG,
        "gpu_types": SHARED_TYPES,
        "group_limits": {},
        "default_limits": {"max_gpus": 2},
    }
)


def pods_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    specs = obj["spec"].get("pytorchReplicaSpecs") or obj["spec"]["tfReplicaSpecs"]
    return [replica["template"]["spec"] for replica in specs.values()]


@pytest.mark.parametrize("kind", ["job", "pytorchjob", "tfjob"])
def test_every_kind_gives_each_pod_the_share(root, kube: Kube, settings, kind: str) -> None:
    workers = {} if kind == "job" else {"workers": 2}
    request = request_under(
        root, policy=SHARED_POLICY, kind=kind, gpu_type="t4-shared", gpu_memory="4Gi", **workers
    )
    obj = m.workload(request, "alice", "share-x1", settings, key="k", created="now")
    stored = accepted(kube, obj)  # the apiserver (and the operator's webhook), strictly
    for pod in pods_of(stored):
        main = pod["containers"][0]
        limits = main["resources"]["limits"]
        assert {k: limits[k] for k in limits if k.startswith("nvidia.com/")} == {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": "4096",
            "nvidia.com/gpucores": "25",
        }
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["GPUHUB_GPU_SHARE"] == "1/4"
    sliced = request_under(
        root, policy=SHARED_POLICY, kind=kind, gpu_type="a10-ts", gpus=2, **workers
    )
    obj = m.workload(sliced, "alice", "share-x2", settings, key="k", created="now")
    for pod in pods_of(accepted(kube, obj)):
        limits = pod["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu.shared"] == "2" and "nvidia.com/gpu" not in limits


async def test_a_shared_job_is_scheduled_onto_a_hami_node(kube: Kube, backend, root) -> None:
    await asyncio.to_thread(add_nodes, kube)
    request = request_under(root, policy=SHARED_POLICY, gpu_type="t4-shared", gpu_memory="8Gi")
    record = await backend.submit(request, "alice", notebook=(root / "train.ipynb").read_bytes())
    assert record.gpu_memory == "8Gi"  # the record says the share, as it was asked

    def placed() -> dict[str, Any] | None:
        pods = kube.job_pods(record.id)
        return pods[0] if pods and pods[0]["spec"].get("nodeName") == HAMI_NODE else None

    pod = await asyncio.to_thread(kube.wait_for, placed, 60)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "8192"
