"""The Kubernetes job backend (kinds job, pytorchjob, tfjob) against kubesim.

Manifests are checked against the official schemas (kubernetes_validate, strict) and the
Kubeflow CRDs' schemas (kubesim validates custom objects on create). The job pod's command
is run for real (papermill in a local process, see tests/support/jobs_service.py) and its output
given to kubesim as the container log, so the executed notebook and the failing cell come
back through the same path as on a cluster.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nbformat
import pytest
from kubernetes_asyncio import client, config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.model import JobError, JobNotFound
from tests.support.jobs_service import (
    NOTEBOOK_FAILS,
    NOTEBOOK_OK,
    container_of,
    make_request,
    run_job_pod,
    validate,
    write_notebook,
)
from tests.support.policies import design_policy

GPU_NAMES = {k: t.display_name for k, t in design_policy().gpu_types.items()}
SETTINGS = m.KubeJobSettings(namespace="default", job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0")


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    write_notebook(root / "exp" / "broken.ipynb", NOTEBOOK_FAILS)
    return root


@pytest.fixture
async def backend(kubesim):
    api = await config.new_client_from_config(config_file=str(kubesim.kubeconfig))
    backend = KubernetesBackend(api, SETTINGS, gpu_names=GPU_NAMES)
    try:
        yield backend
    finally:
        await backend.close()


async def wait_status(backend, owner, job_id, *statuses, timeout=45.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        record = await backend.get(owner, job_id)
        if record.status in statuses:
            return record
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{job_id} stayed {record.status}: {record.message}")
        await asyncio.sleep(0.05)


def submit_args(root, path="train.ipynb"):
    return {"notebook": (root / path).read_bytes()}


# -- manifests ----------------------------------------------------------------------------------
def test_gpu_job_manifest_follows_the_server_rules(root):
    request = make_request(root, gpus=2, gpu_type="a100", cpu=4, memory="32G")
    job = m.workload(request, "alice@example.org", "train-abc123", SETTINGS, key="k", created="now")
    configmap = m.input_configmap(
        request,
        "alice@example.org",
        "train-abc123",
        SETTINGS,
        (root / "train.ipynb").read_bytes(),
        "k",
    )
    validate(job)
    validate(configmap)
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
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert {"name": "gpuhub-dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False  # user code holds no credentials
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    labels = job["metadata"]["labels"]
    assert labels[m.LABEL_MANAGED_BY] == "gpuhub"
    assert labels[m.LABEL_JOB_ID] == "train-abc123"
    assert labels[m.LABEL_USER] != "alice@example.org"  # a label-safe slug ...
    assert job["metadata"]["annotations"][m.ANNOTATION_USERNAME] == "alice@example.org"  # exact
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPUHUB_GPUS"] == "2" and "NVIDIA_VISIBLE_DEVICES" not in env
    assert json.loads(configmap["data"]["notebook.ipynb"])["cells"]


def test_cpu_only_job_sees_no_gpu(root):
    request = make_request(root, gpus=0)
    job = m.workload(request, "alice", "train-abc123", SETTINGS, key="k", created="now")
    validate(job)
    pod = job["spec"]["template"]["spec"]
    container = container_of(job)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert not any(k.startswith("nvidia.com/") for k in container["resources"]["limits"])
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_shared_home_mounts_the_claim_and_writes_next_to_the_notebook(root):
    settings = m.KubeJobSettings(
        job_image="img:1", home_volume=m.HomeVolume("claim-{username}", "/home/jovyan", True)
    )
    request = make_request(root, notebook="exp/broken.ipynb")
    job = m.workload(request, "Alice.B", "broken-x1", settings, key="k", created="now")
    configmap = m.input_configmap(request, "Alice.B", "broken-x1", settings, None, "k")
    validate(job)
    validate(configmap)
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


def test_distributed_manifests(root):
    request = make_request(root, kind="pytorchjob", workers=3, gpus=4, gpu_type="a100")
    obj = m.workload(request, "alice", "train-x1", SETTINGS, key="k", created="now")
    specs = obj["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    assert obj["spec"]["nprocPerNode"] == "4"
    for replica in specs.values():
        pod = replica["template"]["spec"]
        assert pod["containers"][0]["name"] == "pytorch"
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod})
    tf = m.workload(
        make_request(root, kind="tfjob", workers=2, gpus=1, gpu_type="a100"),
        "alice",
        "train-x2",
        SETTINGS,
        key="k",
        created="now",
    )
    assert set(tf["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker"}
    assert (
        tf["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["name"]
        == "tensorflow"
    )
    long = make_request(root, kind="pytorchjob", name="a" * 52, workers=2)
    job_id = m.make_job_id(long.name, "alice", "k", "pytorchjob")
    assert len(f"{job_id}-worker-63") <= 63


# -- lifecycle in kubesim -------------------------------------------------------------------------
async def test_job_runs_and_returns_the_executed_notebook(kubesim, backend, root, tmp_path):
    request = make_request(root, gpus=1, gpu_type="a100", parameters={"epochs": 3})
    record = await backend.submit(request, "alice", key="first", **submit_args(root))
    assert record.status == "pending" and record.gpu == "1 x NVIDIA A100 80GB"
    job = kubesim.get("Job", record.id)
    configmap = kubesim.get("ConfigMap", m.configmap_name(record.id))
    # The ConfigMap is owned by the Job: deleting the Job removes it.
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    running = await wait_status(backend, "alice", record.id, "running")
    assert running.started is not None

    pod_log = run_job_pod(configmap, job, tmp_path / "pod")
    kubesim.finish_job(record.id, succeed=True, logs=pod_log)
    done = await wait_status(backend, "alice", record.id, "succeeded")
    assert done.finished is not None and done.error is None

    logs = await backend.logs("alice", record.id)
    assert "training for 3 epochs" in logs
    assert "gpuhub-result" not in logs and "H4sI" not in logs  # markers and payload hidden
    executed = nbformat.reads((await backend.output("alice", record.id)).decode(), as_version=4)
    outputs = [o.get("text", "") for c in executed.cells for o in c.get("outputs", [])]
    assert "result 6\n" in outputs
    assert [r.id for r in await backend.list("alice")] == [record.id]


async def test_failed_notebook_reports_the_failing_cell(kubesim, backend, root, tmp_path):
    request = make_request(root, notebook="exp/broken.ipynb")
    record = await backend.submit(request, "alice", **submit_args(root, "exp/broken.ipynb"))
    await wait_status(backend, "alice", record.id, "running")
    pod_log = run_job_pod(
        kubesim.get("ConfigMap", m.configmap_name(record.id)),
        kubesim.get("Job", record.id),
        tmp_path / "pod",
    )
    kubesim.finish_job(record.id, succeed=False, logs=pod_log)
    failed = await wait_status(backend, "alice", record.id, "failed")
    assert failed.error.startswith("The notebook failed in cell")
    assert "ValueError: loss is NaN" in failed.error
    assert failed.failed_cell is not None and failed.failed_cell.ename == "ValueError"
    assert "raise ValueError" in failed.failed_cell.source
    # The executed notebook (up to the failure) still comes back.
    assert b"loss is NaN" in await backend.output("alice", record.id)


async def test_job_killed_without_a_result_says_why(kubesim, backend, root):
    record = await backend.submit(make_request(root), "alice", **submit_args(root))
    await wait_status(backend, "alice", record.id, "running")
    kubesim.finish_job(record.id, exit_code=137, logs="Killed\n")
    failed = await wait_status(backend, "alice", record.id, "failed")
    assert failed.error.startswith("The job failed:") and failed.failed_cell is None
    with pytest.raises(JobError) as caught:
        await backend.output("alice", record.id)
    assert caught.value.status == 404


async def test_cancel_deletes_the_job_its_pods_and_its_input(kubesim, backend, root):
    record = await backend.submit(
        make_request(root, gpus=1, gpu_type="a100"), "alice", **submit_args(root)
    )
    await wait_status(backend, "alice", record.id, "running")
    assert kubesim.list("Pod", "default", labels={m.LABEL_JOB_ID: record.id})
    cancelled = await backend.cancel("alice", record.id)
    assert cancelled.status == "cancelled"
    kubesim.wait_for(
        lambda: (
            not kubesim.get("Job", record.id)
            and not kubesim.list("Pod", "default", labels={m.LABEL_JOB_ID: record.id})
            and not kubesim.get("ConfigMap", m.configmap_name(record.id))
        ),
        message="the job, its pods or its ConfigMap outlived the cancel",
    )
    assert (await backend.get("alice", record.id)).status == "cancelled"
    assert [r.status for r in await backend.list("alice")] == ["cancelled"]
    # Cancelling again is harmless; a finished job is returned unchanged.
    assert (await backend.cancel("alice", record.id)).status == "cancelled"


async def test_waiting_for_gpus_is_said_in_words(kubesim, backend, root):
    records = [
        await backend.submit(
            make_request(root, gpus=8, gpu_type="a100"), "alice", **submit_args(root)
        )
        for _ in range(3)
    ]
    pending = await backend.get("alice", records[2].id)
    for _ in range(300):
        pending = await backend.get("alice", records[2].id)
        if pending.message and "Insufficient" in pending.message:
            break
        await asyncio.sleep(0.05)
    assert pending.status == "pending"
    assert pending.message.startswith("Waiting for a free GPU (8 x NVIDIA A100 80GB): 0/4 nodes")
    assert "Insufficient nvidia.com/gpu" in pending.message


async def test_missing_home_claim_is_said_in_words(kubesim, root):
    """With a shared home the job mounts the user's claim; if it does not exist (the user never
    started a server, or the hub makes none) the scheduler cannot place the pod at all. The job
    must not claim to be waiting for a GPU."""
    shared = m.KubeJobSettings(
        namespace="default",
        job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0",
        home_volume=m.HomeVolume("claim-{username}", "/home/jovyan", True),
    )
    api = await config.new_client_from_config(config_file=str(kubesim.kubeconfig))
    backend = KubernetesBackend(api, shared, gpu_names=GPU_NAMES)
    try:
        request = make_request(root, gpus=1, gpu_type="a100")
        record = await backend.submit(request, "alice", **submit_args(root))
        for _ in range(300):
            pending = await backend.get("alice", record.id)
            if pending.message and "claim" in pending.message:
                break
            await asyncio.sleep(0.05)
        assert pending.status == "pending"
        assert pending.message.startswith(
            'Waiting for the volume it mounts: 0/4 nodes are available: persistentvolumeclaim "claim-alice" not found.'
        )
    finally:
        await backend.close()


# -- ownership, idempotency, rollback, quota --------------------------------------------------------
async def test_another_users_job_is_invisible(kubesim, backend, root):
    record = await backend.submit(make_request(root), "alice", **submit_args(root))
    for call in (backend.get, backend.logs, backend.cancel, backend.output):
        with pytest.raises(JobNotFound) as caught:
            await call("bob", record.id)
        assert caught.value.status == 404
    assert await backend.list("bob") == []
    assert kubesim.get("Job", record.id)["metadata"].get("deletionTimestamp") is None


async def test_retried_submit_makes_one_job(kubesim, backend, root):
    request = make_request(root)
    first = await backend.submit(request, "alice", key="retry-1", **submit_args(root))
    again = await backend.submit(request, "alice", key="retry-1", **submit_args(root))
    assert again.id == first.id
    assert len(kubesim.list("Job", "default")) == 1
    assert len(kubesim.list("ConfigMap", "default", labels={m.LABEL_JOB_ID: first.id})) == 1
    other = await backend.submit(request, "alice", key="retry-2", **submit_args(root))
    assert other.id != first.id
    # The same key from another user is another job.
    assert (await backend.submit(request, "bob", key="retry-1", **submit_args(root))).id != first.id


async def test_failed_create_leaves_no_configmap(kubesim, backend, root):
    kubesim.fail_requests(500, method="POST", path="/apis/batch/v1/namespaces/default/jobs")
    with pytest.raises(JobError) as caught:
        await backend.submit(make_request(root), "alice", **submit_args(root))
    assert caught.value.status == 503 and "nothing was left behind" in caught.value.message
    assert kubesim.list("ConfigMap", "default", labels={m.LABEL_MANAGED_BY: "gpuhub"}) == []
    assert kubesim.list("Job", "default") == []


async def test_failed_owner_reference_rolls_back_the_job(kubesim, backend, root):
    kubesim.fail_requests(503, method="PATCH", path="/api/v1/namespaces/default/configmaps/")
    with pytest.raises(JobError):
        await backend.submit(make_request(root), "alice", **submit_args(root))
    kubesim.wait_for(
        lambda: (
            not kubesim.list("Job", "default")
            and not kubesim.list("Pod", "default", labels={m.LABEL_MANAGED_BY: "gpuhub"})
            and not kubesim.list("ConfigMap", "default", labels={m.LABEL_MANAGED_BY: "gpuhub"})
        ),
        message="a failed submit left objects behind",
    )


def server_pod(user: str, gpus: int) -> dict[str, Any]:
    """A single-user server pod as KubeSpawner labels it."""
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
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }


async def test_quota_counts_servers_and_jobs_together(kubesim, backend, root):
    kubesim.create(server_pod("alice", 1), "default")
    assert await backend.gpus_in_use("alice") == 1
    assert await backend.gpus_in_use("bob") == 0
    two = make_request(root, gpus=2, gpu_type="a100")
    with pytest.raises(JobError) as caught:
        await backend.submit(two, "alice", quota=backend.own_quota(2), **submit_args(root))
    assert caught.value.status == 403
    assert caught.value.message == (
        "You hold 1 of your quota of 2 GPUs (server 'default': 1) and this job needs 2 more; "
        "stop a server or wait for a job to end."
    )
    assert kubesim.list("Job", "default") == []
    one = make_request(root, gpus=1, gpu_type="a100")
    record = await backend.submit(one, "alice", quota=backend.own_quota(2), **submit_args(root))
    assert await backend.gpus_in_use("alice") == 2
    with pytest.raises(JobError):
        await backend.submit(one, "alice", quota=backend.own_quota(2), **submit_args(root))
    with pytest.raises(JobError) as caught:
        await backend.submit(
            make_request(root, gpus=3, gpu_type="a100"),
            "bob",
            quota=backend.own_quota(2),
            **submit_args(root),
        )
    assert caught.value.status == 403
    assert caught.value.message == (
        "This job needs 3 GPUs, more than your quota of 2 GPUs at once (servers and jobs together)."
    )
    # A finished job frees its GPUs; CPU-only jobs never count.
    await wait_status(backend, "alice", record.id, "running")
    kubesim.finish_job(record.id, succeed=True)
    await wait_status(backend, "alice", record.id, "succeeded")
    assert await backend.gpus_in_use("alice") == 1
    await backend.submit(
        make_request(root, gpus=0), "alice", quota=backend.own_quota(1), **submit_args(root)
    )


async def test_pod_refused_by_the_namespace_quota_is_said_in_words(kubesim, backend, root):
    """The chart's ResourceQuota (resourceQuota.enabled) caps the namespace's GPUs for all users
    together: a Job is accepted, but Kubernetes refuses its pod (the Job controller records
    FailedCreate). The job must say so rather than wait for a pod that never comes."""
    kubesim.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpuhub-gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
        },
        "default",
    )
    four = make_request(root, gpus=4, gpu_type="a100")
    record = await backend.submit(four, "alice", quota=backend.own_quota(8), **submit_args(root))
    for _ in range(300):
        pending = await backend.get("alice", record.id)
        if pending.message and "quota" in pending.message:
            break
        await asyncio.sleep(0.05)
    assert pending.status == "pending"
    assert pending.message == (
        "Kubernetes refused to create the job's pod: exceeded quota: gpuhub-gpus, requested: "
        "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=2"
    )
    listed = next(r for r in await backend.list("alice") if r.id == record.id)
    assert listed.message == pending.message


async def test_training_job_refused_by_the_namespace_quota_is_said_in_words(kubesim, backend, root):
    """The training operator records FailedCreatePod when a replica's pod is refused; a
    PyTorchJob missing pods says so too (the master fits, the workers do not)."""
    kubesim.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpuhub-gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
        },
        "default",
    )
    request = make_request(root, kind="pytorchjob", workers=2, gpus=2, gpu_type="a100")
    record = await backend.submit(request, "alice", quota=backend.own_quota(8), **submit_args(root))
    for _ in range(300):
        pending = await backend.get("alice", record.id)
        if pending.message and "quota" in pending.message:
            break
        await asyncio.sleep(0.05)
    assert pending.status == "pending"
    assert pending.message.startswith(
        "Kubernetes refused to create the PyTorchJob's pods: exceeded quota: gpuhub-gpus, "
        "requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=2"
    )


async def test_concurrent_submits_cannot_both_squeeze_under_the_quota(kubesim, backend, root):
    one = make_request(root, gpus=1, gpu_type="a100")
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
async def test_pytorchjob_and_tfjob_are_accepted_by_their_crds(kubesim, backend, kube_api, root):
    pt = await backend.submit(
        make_request(root, kind="pytorchjob", workers=3, gpus=2, gpu_type="a100"),
        "alice",
        **submit_args(root),
    )
    stored = kubesim.get("PyTorchJob", pt.id)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert stored["spec"]["nprocPerNode"] == "2"
    assert pt.workers == 3 and pt.gpu == "3 workers, 2 x NVIDIA A100 80GB each"
    configmap = kubesim.get("ConfigMap", m.configmap_name(pt.id))
    assert configmap["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert (await backend.get("alice", pt.id)).status == "pending"

    custom = client.CustomObjectsApi(kube_api)
    status = {
        "conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "True"},
        ],
        "startTime": "2026-01-01T00:00:00Z",
    }
    await custom.patch_namespaced_custom_object_status(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        pt.id,
        {"status": status},
        _content_type="application/merge-patch+json",
    )
    assert (await backend.get("alice", pt.id)).status == "running"
    status["conditions"].append(
        {
            "type": "Failed",
            "status": "True",
            "reason": "PyTorchJobFailed",
            "message": "PyTorchJob train-x is failed because 1 Worker replica(s) failed.",
        }
    )
    await custom.patch_namespaced_custom_object_status(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        pt.id,
        {"status": status},
        _content_type="application/merge-patch+json",
    )
    failed = await backend.get("alice", pt.id)
    assert failed.status == "failed" and "1 Worker replica(s) failed" in failed.error

    tf = await backend.submit(
        make_request(root, kind="tfjob", workers=2, gpus=1, gpu_type="a100"),
        "alice",
        **submit_args(root),
    )
    assert set(kubesim.get("TFJob", tf.id)["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker"}
    assert {r.kind for r in await backend.list("alice")} == {"pytorchjob", "tfjob"}
    cancelled = await backend.cancel("alice", tf.id)
    assert cancelled.status == "cancelled"
    kubesim.wait_for(
        lambda: (
            not kubesim.get("TFJob", tf.id)
            and not kubesim.get("ConfigMap", m.configmap_name(tf.id))
        )
    )


async def test_missing_training_operator_is_said_plainly(kubesim, backend, root):
    for name in ("pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org"):
        kubesim.delete("CustomResourceDefinition", name, namespace=None)
    request = make_request(root, kind="pytorchjob", workers=2)
    with pytest.raises(JobError) as caught:
        await backend.check(request, "alice")
    assert caught.value.status == 422
    assert caught.value.message == (
        "This cluster cannot run a PyTorchJob: the Kubeflow training operator is not installed "
        "(no kubeflow.org/v1 PyTorchJob or TFJob resource); submit a training job (kind job) instead."
    )
    assert await backend.served_custom_kinds() == frozenset()
    assert await backend.list("alice") == []  # listing does not trip over the missing group


async def test_image_pull_failure_is_said_in_words(kubesim, backend, root):
    image = "registry.example.org/me/missing:1"
    kubesim.fail_image(image)
    record = await backend.submit(make_request(root, image=image), "alice", **submit_args(root))
    for _ in range(300):
        pending = await backend.get("alice", record.id)
        if pending.message and pending.message.startswith("Cannot pull"):
            break
        await asyncio.sleep(0.05)
    assert pending.status == "pending"
    assert pending.message.startswith(f"Cannot pull the image {image}")
