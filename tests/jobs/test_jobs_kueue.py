"""Kubernetes jobs through Kueue (issue #15): with ``jobs.kueue.queueName`` set, Jobs,
PyTorchJobs and TFJobs carry Kueue's queue-name label and are created suspended; gpuhub
shows them ``queued`` with why in people's words (what of the queue's GPUs is in use, by how
many: its ClusterQueue; Kueue's own message only in the service's log) and their place in
line (Kueue's visibility API) until Kueue admits them, then as before. Against the test cluster's real Kueue 0.19
(harness/cluster.py), which gpuhub reads in ``kueue.x-k8s.io/v1beta2`` (v1beta1 where
only that is served); admitted jobs run on kwok's fake A100 nodes until ``kube.finish_job``
ends them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import config
from tornado.httpclient import AsyncHTTPClient

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.model import JobError, JobRecord
from gpuhub.k8s import kueue
from gpuhub.k8s.labels import KUEUE_JOB_UID_LABEL, QUEUE_NAME_LABEL
from harness.cluster import Kube
from tests.support.jobs_service import (
    NOTEBOOK_OK,
    accepted,
    cluster_request,
    validate,
    write_notebook,
)
from tests.support.kueue import KUEUE, Queues, kueue_queues
from tests.support.policies import cluster_policy

# A real kube-apiserver, controllers and operators (harness/cluster.py).
pytestmark = pytest.mark.e2e

GPU_NAMES = {k: t.display_name for k, t in cluster_policy().gpu_types.items()}
PLAIN = m.KubeJobSettings(namespace="default", job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0")
QUEUED = dataclasses.replace(PLAIN, kueue_queue="gpu-jobs")
make_request = cluster_request


def queues(kube: Kube, gpus: int) -> Queues:
    """The admin guide's queues: LocalQueue gpu-jobs, ``gpus`` A100s, CPU and memory plenty."""
    return kueue_queues(kube, gpus, local_queue="gpu-jobs", cpu=256, memory="2Ti")


def in_namespace(settings: m.KubeJobSettings, kube: Kube) -> m.KubeJobSettings:
    return dataclasses.replace(settings, namespace=kube.namespace)


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    return root


async def backend_for(kubeconfig: Any, settings: m.KubeJobSettings) -> KubernetesBackend:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    return KubernetesBackend(api, settings, gpu_names=GPU_NAMES)


@pytest.fixture
async def backend(kube):
    backend = await backend_for(kube.kubeconfig, in_namespace(QUEUED, kube))
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def faulty_backend(kube, kube_faults):
    """The queued backend talking to the apiserver through the fault proxy."""
    backend = await backend_for(kube_faults.kubeconfig, in_namespace(QUEUED, kube))
    try:
        yield backend
    finally:
        await backend.close()


def kueue_absent(kube_faults: Any) -> None:
    """The cluster's Kueue is shared by every test: the fault proxy answers as an apiserver
    without it does (404 for its API group)."""
    kube_faults.fail_requests(404, path=f"/apis/{kueue.GROUP}/", count=None)


async def wait_for(backend, owner, job_id, predicate, timeout=30.0) -> JobRecord:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        record = await backend.get(owner, job_id)
        if predicate(record):
            return record
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"{job_id}: {record.status} {record.queue_position} {record.message}"
            )
        await asyncio.sleep(0.05)


def submit(backend, root, owner="alice", gpus=4, **body):
    request = make_request(root, gpus=gpus, gpu_type="a100", **body)
    return backend.submit(request, owner, notebook=(root / "train.ipynb").read_bytes())


async def submit_in_order(kube, backend, root, owners, **body) -> list[JobRecord]:
    """Jobs that Kueue must line up in this order. Kueue orders a queue by its Workloads'
    creation time, which Kubernetes keeps to the second: Workloads made within one second
    have no order between them. So each job is submitted once the clock has passed the
    second in which the previous job's Workload was made."""
    records: list[JobRecord] = []
    for owner in owners:
        if records:
            await asyncio.to_thread(kube.wait_for, past_workload_second(kube, records[-1].id))
        records.append(await submit(backend, root, owner, **body))
    return records


def past_workload_second(kube: Kube, job_id: str) -> Any:
    def passed() -> bool:
        uid = kube.get("Job", job_id)["metadata"]["uid"]
        made = kube.list("Workload", labels={KUEUE_JOB_UID_LABEL: uid}, api_version=KUEUE)
        if not made:
            return False
        second = datetime.fromisoformat(made[0]["metadata"]["creationTimestamp"])
        return datetime.now(UTC) >= second + timedelta(seconds=1)

    return passed


# -- manifests ----------------------------------------------------------------------------------
def test_queued_manifests_carry_the_label_and_are_suspended(root, kube):
    request = make_request(root, gpus=2, gpu_type="a100")
    job = m.workload(request, "alice", "train-abc123", QUEUED, key="k", created="now")
    validate(job)
    # Kueue's webhooks (and the Training Operator's) take them as they are: still suspended.
    assert accepted(kube, job)["spec"]["suspend"] is True
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpu-jobs"
    assert job["spec"]["suspend"] is True
    # The label is the workload's: Kueue reads it there; the pods keep gpuhub's labels only.
    assert QUEUE_NAME_LABEL not in job["spec"]["template"]["metadata"]["labels"]
    for kind in ("pytorchjob", "tfjob"):
        request = make_request(root, kind=kind, workers=2, gpus=1, gpu_type="a100")
        obj = m.workload(request, "alice", "ddp-abc123", QUEUED, key="k", created="now")
        assert obj["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpu-jobs"
        assert obj["spec"]["runPolicy"]["suspend"] is True
        assert accepted(kube, obj)["spec"]["runPolicy"]["suspend"] is True


def test_without_a_queue_nothing_changes(root):
    request = make_request(root, gpus=2, gpu_type="a100")
    job = m.workload(request, "alice", "train-abc123", PLAIN, key="k", created="now")
    assert QUEUE_NAME_LABEL not in job["metadata"]["labels"]
    assert "suspend" not in job["spec"]
    request = make_request(root, kind="pytorchjob", workers=2, gpus=1, gpu_type="a100")
    obj = m.workload(request, "alice", "ddp-abc123", PLAIN, key="k", created="now")
    assert "suspend" not in obj["spec"]["runPolicy"]


# -- on the cluster -------------------------------------------------------------------------------
async def test_jobs_wait_in_line_and_are_admitted_in_order(kube, backend, root, caplog):
    caplog.set_level(logging.INFO, logger="gpuhub.jobs.k8s.queue")
    names = await asyncio.to_thread(queues, kube, 8)
    first, second, third, fourth = await submit_in_order(
        kube, backend, root, ["alice", "alice", "alice", "bob"]
    )
    job = await asyncio.to_thread(kube.get, "Job", first.id)
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpu-jobs"
    # The first two fit the ClusterQueue's 8 A100s: admitted, resumed, then running.
    for record in (first, second):
        await wait_for(backend, "alice", record.id, lambda r: r.status == "running")
    # The third is first in line, and says why in people's words: what of the queue's GPUs
    # is in use, by how many (its ClusterQueue's figures, read afresh every 2 s); bob's is
    # behind it, in the same words.
    said = (
        'Waiting in queue "gpu-jobs" for 4 NVIDIA A100 80GB GPUs: 8 of 8 NVIDIA A100 80GB GPUs '
        "in use by 2 jobs and servers."
    )
    queued = await wait_for(
        backend, "alice", third.id, lambda r: r.queue_position == 1 and r.message == said
    )
    assert queued.to_json()["status"] == "queued" and queued.to_json()["queue_position"] == 1
    bobs = await wait_for(backend, "bob", fourth.id, lambda r: r.queue_position == 2)
    assert bobs.status == "queued" and bobs.message == said
    # Kueue's own words are the admin's, in the service's log.
    await asyncio.to_thread(kube.wait_for, lambda: "insufficient unused quota" in caplog.text)
    assert f"in flavor {names.a100_flavor}, 4 more needed" in caplog.text
    listed = {r.id: r for r in await backend.list("alice")}
    assert listed[third.id].queue_position == 1 and listed[first.id].queue_position is None
    # A queued job holds its place against the quota (it has no pods yet).
    assert await backend.gpus_in_use("alice") == 12
    # GPUs come free: the next in line is admitted, then pending or running as usual.
    await asyncio.to_thread(kube.finish_job, first.id)
    await wait_for(backend, "alice", first.id, lambda r: r.status == "succeeded")
    running = await wait_for(backend, "alice", third.id, lambda r: r.status == "running")
    assert running.queue_position is None and running.to_json()["queue_position"] is None
    bobs = await wait_for(backend, "bob", fourth.id, lambda r: r.queue_position == 1)
    assert bobs.status == "queued"


async def test_cancel_while_queued_removes_job_and_workload(kube, backend, root):
    await asyncio.to_thread(queues, kube, 4)
    holder, waiting, behind = await submit_in_order(kube, backend, root, ["alice", "alice", "bob"])
    await wait_for(backend, "alice", holder.id, lambda r: r.status == "running")
    await wait_for(backend, "alice", waiting.id, lambda r: r.queue_position == 1)
    uid = (await asyncio.to_thread(kube.get, "Job", waiting.id))["metadata"]["uid"]

    def workloads() -> list[dict[str, Any]]:
        return kube.list("Workload", labels={KUEUE_JOB_UID_LABEL: uid}, api_version=KUEUE)

    assert await asyncio.to_thread(workloads)
    cancelled = await backend.cancel("alice", waiting.id)
    assert cancelled.status == "cancelled"
    await asyncio.to_thread(
        kube.wait_for,
        lambda: (
            kube.get("Job", waiting.id) is None
            and not workloads()
            and kube.get("ConfigMap", m.configmap_name(waiting.id)) is None
        ),
        60,
    )
    # Bob moves up; once the holder is done, he is admitted.
    await wait_for(backend, "bob", behind.id, lambda r: r.queue_position == 1)
    await asyncio.to_thread(kube.finish_job, holder.id)
    await wait_for(backend, "bob", behind.id, lambda r: r.status in ("pending", "running"))


async def test_position_unknown_without_the_visibility_api(kube, kube_faults, faulty_backend, root):
    names = await asyncio.to_thread(queues, kube, 4)
    # A Kueue without its visibility server (or an account not allowed to ask it): 404.
    kube_faults.fail_requests(404, path=f"/apis/{kueue.VISIBILITY_GROUP}/", count=None)
    await submit(faulty_backend, root)
    waiting = await submit(faulty_backend, root)
    queued = await wait_for(
        faulty_backend,
        "alice",
        waiting.id,
        lambda r: r.status == "queued" and "4 of 4" in (r.message or ""),
    )
    assert "4 of 4 NVIDIA A100 80GB GPUs in use by 1 job or server" in queued.message
    assert names.a100_flavor not in queued.message  # Kueue's names are the admin's
    assert queued.queue_position is None
    assert queued.to_json()["queue_position"] is None


async def test_without_the_queues_figures_kueues_reason_is_said_in_words(
    kube, kube_faults, faulty_backend, root
):
    """An account that may not read the ClusterQueue (or its LocalQueue) still reads why in
    words: what Kueue said the job lacks, structurally, never Kueue's sentence."""
    await asyncio.to_thread(queues, kube, 4)
    kube_faults.fail_requests(403, path="/clusterqueues/", count=None)
    await submit(faulty_backend, root)
    waiting = await submit(faulty_backend, root)
    queued = await wait_for(
        faulty_backend,
        "alice",
        waiting.id,
        lambda r: r.status == "queued" and "must come free" in (r.message or ""),
    )
    assert queued.message == (
        'Waiting in queue "gpu-jobs" for 4 NVIDIA A100 80GB GPUs: 4 NVIDIA A100 80GB GPUs more '
        "must come free first."
    )


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
async def test_kueue_is_read_in_v1beta2_or_else_v1beta1(
    kube, kube_faults, faulty_backend, root, version
):
    """The cluster's Kueue 0.19 serves both versions: gpuhub reads v1beta2 (Workloads and the
    visibility API's line). Where the cluster serves only v1beta1 (the proxy answers 404 for
    v1beta2, as an older Kueue does), it reads v1beta1 and shows the same."""
    names = await asyncio.to_thread(queues, kube, 4)
    if version == "v1beta1":
        for group in (kueue.GROUP, kueue.VISIBILITY_GROUP):
            kube_faults.fail_requests(404, path=f"/apis/{group}/v1beta2", count=None)
    holder = await submit(faulty_backend, root)
    waiting = await submit(faulty_backend, root)
    await wait_for(faulty_backend, "alice", holder.id, lambda r: r.status == "running")
    queued = await wait_for(
        faulty_backend,
        "alice",
        waiting.id,
        lambda r: r.status == "queued" and r.queue_position == 1 and "4 of 4" in (r.message or ""),
    )
    assert "4 of 4 NVIDIA A100 80GB GPUs in use by 1 job or server" in (queued.message or "")
    assert names.a100_flavor not in (queued.message or "")
    other = "v1beta1" if version == "v1beta2" else "v1beta2"
    for group in (kueue.GROUP, kueue.VISIBILITY_GROUP):
        # Discovery asks for the preferred version first; the objects are read in one only.
        reads = [
            p for p in kube_faults.paths if p.startswith(f"/apis/{group}/") and "/namespaces/" in p
        ]
        assert reads and all(p.startswith(f"/apis/{group}/{version}/") for p in reads), reads
        assert not [p for p in reads if f"/{other}/" in p]


async def test_pytorchjob_waits_in_line_too(kube, backend, root):
    await asyncio.to_thread(queues, kube, 2)
    holder = await submit(backend, root, gpus=2)
    request = make_request(root, kind="pytorchjob", workers=2, gpus=1, gpu_type="a100")
    ddp = await backend.submit(request, "alice", notebook=(root / "train.ipynb").read_bytes())
    queued = await wait_for(
        backend,
        "alice",
        ddp.id,
        lambda r: r.queue_position == 1 and "2 of 2" in (r.message or ""),
    )
    assert queued.status == "queued"
    # All its workers' GPUs, in one sentence (Kueue speaks of one pod set per replica type).
    assert queued.message == (
        f'Waiting in queue "gpu-jobs" for {queued.workers} NVIDIA A100 80GB GPUs: 2 of 2 '
        "NVIDIA A100 80GB GPUs in use by 1 job or server."
    )
    await wait_for(backend, "alice", holder.id, lambda r: r.status == "running")
    await asyncio.to_thread(kube.finish_job, holder.id)
    await wait_for(backend, "alice", ddp.id, lambda r: r.status in ("pending", "running"))


async def test_a_queue_without_kueue_on_the_cluster_is_refused(
    kube, kube_faults, faulty_backend, root
):
    kueue_absent(kube_faults)
    with pytest.raises(JobError) as refused:
        await faulty_backend.check(make_request(root, gpus=1, gpu_type="a100"), "alice")
    assert refused.value.status == 422
    assert "does not run Kueue" in refused.value.message
    assert await asyncio.to_thread(kube.list, "Job") == []


async def test_without_a_queue_jobs_run_as_before(kube, root):
    # Kueue is there, but gpuhub is not told to use it.
    await asyncio.to_thread(kueue_queues, kube, 1, local_queue="gpu-jobs", cpu=256, memory="2Ti")
    plain = await backend_for(kube.kubeconfig, in_namespace(PLAIN, kube))
    try:
        record = await plain.submit(
            make_request(root, gpus=2, gpu_type="a100"),
            "alice",
            notebook=(root / "train.ipynb").read_bytes(),
        )
        assert record.status == "pending"
        await wait_for(plain, "alice", record.id, lambda r: r.status == "running")
        job = await asyncio.to_thread(kube.get, "Job", record.id)
        assert not job["spec"].get("suspend")
        assert await asyncio.to_thread(kube.list, "Workload", api_version=KUEUE) == []
    finally:
        await plain.close()


# -- the jobs service's REST surface -------------------------------------------------------------
class _HubAuth:
    """Stands in for HubAuth: every token is alice's (the service's handlers are real)."""

    access_scopes = frozenset({"access:services!service=gpuhub"})
    api_url = "http://127.0.0.1:9/hub/api"
    api_token = ""

    def get_token(self, handler: Any, in_cookie: bool = True) -> str | None:
        return handler.request.headers.get("Authorization")

    async def get_user(self, handler: Any, sync: bool = True) -> dict[str, Any]:
        return {"kind": "user", "name": "alice", "groups": ["staff"], "scopes": []}

    def check_scopes(self, required: Any, model: Any) -> set[str]:
        return set(required)


async def test_service_rest_answers_queued_with_position(kube, backend, root):
    from gpuhub.core.holdings import GPUQuota
    from gpuhub.jobs.pipeline import KFPBackend, KFPSettings
    from gpuhub.service.app import Jobs, make_app
    from gpuhub.service.config import ServiceConfig

    await asyncio.to_thread(queues, kube, 4)
    await submit(backend, root)
    waiting = await submit(backend, root)
    await wait_for(
        backend,
        "alice",
        waiting.id,
        lambda r: r.queue_position == 1 and "4 of 4" in (r.message or ""),
    )
    settings = in_namespace(QUEUED, kube)
    service_config = ServiceConfig(
        cluster_policy(), GPUQuota.from_config({}), settings, KFPSettings()
    )
    jobs = Jobs(service_config, backend, KFPBackend(backend.api, settings, KFPSettings()))
    app = make_app(jobs, _HubAuth(), "/services/gpuhub/")  # type: ignore[arg-type]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = app.listen(port, address="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{port}/services/gpuhub/jobs/{waiting.id}"
        response = await AsyncHTTPClient().fetch(url, headers={"Authorization": "token t"})
        job = json.loads(response.body)
        assert job["status"] == "queued" and job["queue_position"] == 1
        assert job["message"] == (
            'Waiting in queue "gpu-jobs" for 4 NVIDIA A100 80GB GPUs: 4 of 4 NVIDIA A100 80GB '
            "GPUs in use by 1 job or server."
        )
        listed = await AsyncHTTPClient().fetch(
            url.rsplit("/", 1)[0], headers={"Authorization": "token t"}
        )
        statuses = {
            j["id"]: (j["status"], j["queue_position"]) for j in json.loads(listed.body)["jobs"]
        }
        assert statuses[waiting.id] == ("queued", 1)
    finally:
        server.stop()


def test_service_config_reads_the_queue():
    from gpuhub.service.config import ServiceConfig, ServiceConfigError

    base = {"job_image": "img:1"}
    assert ServiceConfig.from_dict(base).jobs.kueue_queue == ""
    assert ServiceConfig.from_dict({**base, "kueue": {"queue_name": ""}}).jobs.kueue_queue == ""
    loaded = ServiceConfig.from_dict({**base, "kueue": {"queue_name": "gpu-jobs"}})
    assert loaded.jobs.kueue_queue == "gpu-jobs"
    for bad, words in (
        ({"queue_name": "GPU jobs"}, "must name a LocalQueue"),
        ({"queue": "x"}, "kueue.queue is not a kueue setting"),
        ({"queue_name": 3}, "kueue.queue_name must be a string"),
    ):
        with pytest.raises(ServiceConfigError, match=words):
            ServiceConfig.from_dict({**base, "kueue": bad})


# -- how it is said ----------------------------------------------------------------------------
def test_ordinals_have_one_home():
    from gpuhub.core.words import ordinal

    said = [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)]
    assert said == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th",
        "21st", "22nd", "23rd", "101st", "111th", "112th",
    ]  # fmt: skip
    import gpuhub.hub.local_gpu_spawner

    assert not hasattr(gpuhub.hub.local_gpu_spawner, "_ordinal")


def test_magics_say_queued_with_the_place_in_line(capsys):
    from gpuhub_lab.jobs_magics import JobMagics, JobTable, status_words

    queued = {
        "id": "train-abc",
        "kind": "job",
        "status": "queued",
        "queue_position": 3,
        "gpu": "4 x NVIDIA A100 80GB",
        "message": 'Waiting in queue "gpu-jobs" for 4 NVIDIA A100 80GB GPUs: 8 of 8 NVIDIA A100 80GB GPUs in use by 2 jobs and servers.',
        "created": "2026-11-22T20:00:00Z",
    }
    assert status_words(queued) == "queued, 3rd in line"
    assert status_words({**queued, "queue_position": None}) == "queued"
    assert status_words({**queued, "queue_position": True}) == "queued"
    assert status_words({**queued, "status": "pending", "queue_position": 3}) == "pending"
    assert "queued, 3rd in line" in repr(JobTable([queued]))
    JobMagics._report(queued)
    out = capsys.readouterr().out
    assert out.startswith('train-abc queued, 3rd in line (Waiting in queue "gpu-jobs" for 4')


def test_record_json_contract_round_trips_through_the_forwarder():
    """The user's server rebuilds the service's records (JobRecord.from_json) and answers
    with to_json: queue_position survives, is null unless queued, and a record from a
    service that predates it reads as unknown."""
    from datetime import UTC, datetime

    record = JobRecord(
        id="train-abc",
        name="train",
        kind="job",
        backend="kubernetes",
        status="queued",
        owner="alice",
        notebook="train.ipynb",
        created=datetime(2026, 11, 22, tzinfo=UTC),
        message='Waiting in queue "gpu-jobs" for 4 NVIDIA A100 80GB GPUs: 8 of 8 NVIDIA A100 80GB GPUs in use by 2 jobs and servers.',
        queue_position=2,
    )
    data = record.to_json()
    assert (data["status"], data["queue_position"]) == ("queued", 2)
    assert JobRecord.from_json(data).to_json() == data
    running = JobRecord.from_json({**data, "status": "running"}).to_json()
    assert running["queue_position"] is None
    older = {k: v for k, v in data.items() if k != "queue_position"}
    assert JobRecord.from_json(older).queue_position is None


async def test_queue_messages_read_right(kube_faults, faulty_backend):
    """The sentences a queued job can carry, swept like every other message
    (tests/hub/test_message_sweep.py): in people's words, never Kueue's."""
    from gpuhub.jobs.k8s.status import queue_phase
    from gpuhub.k8s.kueue import QueueUse
    from tests.support.messages import problems

    def workload(**conditions: tuple[str, str, str]) -> dict:
        return {
            "status": {
                "conditions": [
                    {"type": t, "status": s, "reason": r, "message": msg}
                    for t, (s, r, msg) in conditions.items()
                ]
            }
        }

    gpu = "nvidia.com/gpu"
    full = QueueUse("team", {("a100", gpu): 8.0}, {("a100", gpu): 8.0}, 2)
    job = {"gpus": 4, "gpu_name": "NVIDIA A100 80GB", "resource": gpu, "use": full}
    lacks = (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 1 more needed",
    )
    never = (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor a100, request > maximum capacity (16 > 8)",
    )
    preempted = ("True", "Preempted", "Preempted to accommodate a workload (UID: 1) due to ...")
    assert queue_phase("gpu-jobs", workload(QuotaReserved=lacks), **job).message == (
        'Waiting in queue "gpu-jobs" for 4 NVIDIA A100 80GB GPUs: 8 of 8 NVIDIA A100 80GB GPUs '
        "in use by 2 jobs and servers."
    )
    assert queue_phase("gpu-jobs", workload(Evicted=preempted), **job).message == (
        'Kueue gave its GPUs to a job or server that comes first. Waiting in queue "gpu-jobs" '
        "for 4 NVIDIA A100 80GB GPUs: 8 of 8 NVIDIA A100 80GB GPUs in use by 2 jobs and servers."
    )
    assert "cannot start" in queue_phase("gpu-jobs", workload(QuotaReserved=never), **job).message
    said = [
        queue_phase("gpu-jobs", None).message,
        queue_phase("gpu-jobs", workload()).message,
        queue_phase("gpu-jobs", workload(), **job).message,
        queue_phase(
            "gpu-jobs", workload(Admitted=("True", "Admitted", "The workload is admitted"))
        ).message,
        queue_phase("gpu-jobs", workload(QuotaReserved=lacks)).message,
        queue_phase("gpu-jobs", workload(QuotaReserved=lacks), **job).message,
        queue_phase("gpu-jobs", workload(QuotaReserved=never), **job).message,
        queue_phase(
            "gpu-jobs",
            workload(QuotaReserved=("False", "Inadmissible", "LocalQueue gpu-jobs doesn't exist")),
        ).message,
        queue_phase("gpu-jobs", workload(Evicted=preempted), **job).message,
        queue_phase(
            "gpu-jobs", workload(Evicted=("True", "PodsReadyTimeout", "Exceeded the timeout"))
        ).message,
    ]
    kueue_absent(kube_faults)
    said.append(await faulty_backend.queue_problem())
    for message in said:
        assert message and not problems(message), (message, problems(message))
        assert not any(raw in message for raw in ("pod set", "flavor", "insufficient")), message
