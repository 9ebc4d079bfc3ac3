"""One shape of job id on every backend, and one clock for a job's run time: the local backend
with real papermill and kernels, and the Kubernetes backend's ids, on the test cluster where
another job already has the id a submit would take."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from kubernetes_asyncio import config

from gpuhub.core.policy import Policy
from gpuhub.jobs import JobNotFound, JobRequest
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.kinds import kind_for
from gpuhub.jobs.local import LocalBackend
from gpuhub.jobs.model import check_job_id
from gpuhub.k8s.labels import (
    IDEMPOTENCY_KEY_ANNOTATION,
    JOB_ID_LABEL,
    KIND_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from harness.cluster import Kube
from tests.support.jobs_service import NOTEBOOK_OK, cluster_request
from tests.support.jupyter.notebooks import write_notebook

POLICY = Policy.from_config(
    gpu_types={"a100": {"display_name": "NVIDIA A100", "max_gpus": 4}},
    default_limits={"max_gpus": 4},
)
ONE_SHAPE = re.compile(r"(?P<name>[a-z0-9-]+)-[0-9a-f]{6}")
# What gpuhub 0.1's Kubernetes backend named jobs: still on clusters, still to be found.
OLD_CLUSTER_ID = "train-ezs6vh3msvy4ddzv"
JOB_IMAGE = "ghcr.io/gpuhub/gpuhub-notebook:0.1.0"


def test_cluster_job_ids_have_the_local_shape() -> None:
    first = m.make_job_id("long-one", "alice", "key-1", "job")
    assert ONE_SHAPE.fullmatch(first) and first.startswith("long-one-"), first
    # The same submit (owner, kind, key) names the same object: a retry is idempotent.
    assert m.make_job_id("long-one", "alice", "key-1", "job") == first
    # Another owner, kind or key, or the next seed when an id is taken: another id.
    others = {
        m.make_job_id("long-one", "bob", "key-1", "job"),
        m.make_job_id("long-one", "alice", "key-1", "pytorchjob"),
        m.make_job_id("long-one", "alice", "key-2", "job"),
        m.make_job_id("long-one", "alice", "key-1", "job", attempt=1),
    }
    assert first not in others and len(others) == 4
    assert all(ONE_SHAPE.fullmatch(i) for i in others), others
    # Distributed kinds keep room for their replicas' names (63 characters at most).
    long = m.make_job_id("a" * 52, "alice", "k", "pytorchjob")
    assert ONE_SHAPE.fullmatch(long) and len(f"{long}-worker-63") <= 63
    assert kind_for("pytorchjob").distributed


def test_old_ids_are_still_accepted() -> None:
    assert check_job_id(OLD_CLUSTER_ID) == OLD_CLUSTER_ID
    assert check_job_id("long-one-5ff007") == "long-one-5ff007"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    # Long enough to be seen running by several polls, short enough for a test.
    write_notebook(root / "long-one.ipynb", "import time\ntime.sleep(3)")
    return root


async def test_local_ids_and_a_run_time_that_never_goes_back(root: Path) -> None:
    backend = LocalBackend(root, owner="ada", gpu_ids=[])
    request = JobRequest.parse(
        {"notebook": "long-one.ipynb", "gpus": 0, "name": "long-one"},
        policy=POLICY,
        root_dir=root,
    )
    record = await backend.submit(request, "ada")
    assert ONE_SHAPE.fullmatch(record.id) and record.id.startswith("long-one-"), record.id
    # An id of the other shape is looked up, not refused as malformed: 404, "no such job".
    with pytest.raises(JobNotFound) as missing:
        await backend.get("ada", OLD_CLUSTER_ID)
    assert missing.value.status == 404

    # Follow it as the jobs panel and %jobs do: the run time each answer gives.
    seen: list[tuple[str, float]] = []
    deadline = time.monotonic() + 120
    while True:
        answer = (await backend.get("ada", record.id)).to_json()
        if answer["elapsed"] is not None:
            seen.append((answer["status"], answer["elapsed"]))
        if answer["status"] in ("succeeded", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.02)
    assert answer["status"] == "succeeded", answer
    assert any(status == "running" for status, _ in seen), seen
    # Never back: each answer's run time is at least the one before, the last included.
    times = [elapsed for _, elapsed in seen]
    assert times == sorted(times), seen
    # Once finished: finished - started, both as the server recorded them.
    done = await backend.get("ada", record.id)
    assert done.started and done.finished
    assert answer["elapsed"] == round((done.finished - done.started).total_seconds(), 1)


def squatter(job_id: str, owner: str) -> dict[str, object]:
    """Another user's Job that already has ``job_id`` (suspended: it never runs)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_id,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                USER_LABEL: m.user_label(owner),
                JOB_ID_LABEL: job_id,
                KIND_LABEL: "job",
            },
            "annotations": {USERNAME_ANNOTATION: owner, IDEMPOTENCY_KEY_ANNOTATION: "theirs"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }


@pytest.mark.e2e
async def test_a_cluster_job_never_takes_an_id_another_job_has(kube: Kube, tmp_path: Path) -> None:
    """Six hex digits may meet another job's id: the submit takes its next one, and a retry
    of it (the same Idempotency-Key) finds the same job again."""
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", *NOTEBOOK_OK)
    request = cluster_request(root, gpus=0)
    first, second = (m.make_job_id(request.name, "alice", "key-1", "job", n) for n in (0, 1))
    await asyncio.to_thread(kube.create, squatter(first, "bob"))
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    settings = m.KubeJobSettings(namespace=kube.namespace, job_image=JOB_IMAGE)
    backend = KubernetesBackend(api, settings)
    try:
        notebook = (root / "train.ipynb").read_bytes()
        record = await backend.submit(request, "alice", key="key-1", notebook=notebook)
        assert record.id == second and ONE_SHAPE.fullmatch(record.id), record.id
        again = await backend.submit(request, "alice", key="key-1", notebook=notebook)
        assert again.id == second
        bobs = await asyncio.to_thread(kube.get, "Job", first)
        assert bobs["metadata"]["annotations"][USERNAME_ANNOTATION] == "bob"  # untouched
        await backend.cancel("alice", second)
    finally:
        await backend.close()
