"""End to end: GPUs claimed through DRA (admin guide, "GPUs through DRA") on the test cluster,
whose simulated NVIDIA DRA driver publishes ResourceSlices that the real kube-scheduler
allocates from and the real controller-manager releases (localk8s/dra.py).

A real JupyterHub with GPUSpawner spawns a server of a DRA type on the process node: its pod
claims its GPU from a ResourceClaimTemplate the hub made for it, the scheduler allocates one
of the node's DRA GPUs, and the server's kernel computes on that device, as the lab's metrics
see it; a second server waits in Kueue, which counts the first one's claim against its quota;
when a server stops, template and claim go; a type whose DeviceClass is missing is said and
refused. Each job kind the jobs service offers for DRA types gets its claims the same way: a
Job on the process node (a whole GPU), a PyTorchJob of MIG slices and a TFJob of memory shares
on kwok's DRA nodes; claims are released when the jobs end, and a failed submit leaves no
template. One hub and one backend for the module: cluster tests are few and share their setup.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import requests
from kubernetes_asyncio import config
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from gpuhub.core.policy import Policy
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.model import JobError
from harness.cluster import GPU_TOLERATION, KWOK_TOLERATION, PROCESS_NODE_SELECTOR, Kube
from harness.hub.kube import hub_config
from harness.hub.process import API_TOKEN, Hub, spawn_json, start_hub, stop, wait_ready
from tests.support.jobs_service import make_request, write_notebook
from tests.support.kueue import KUEUE
from tests.support.policies import CLUSTER_CONFIG

pytestmark = pytest.mark.e2e

RESOURCE = "resource.k8s.io/v1"
SIMULATED = "device.attributes['gpu.nvidia.com'].productName == 'gpuhub-simulated-GPU'"
H100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
MIG_1G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
DRA_TYPES: dict[str, Any] = {
    # The process node's GPUs claimed through DRA (gpu-4, gpu-5): pods there really run.
    "dra": {
        "display_name": "Simulated GPU (DRA)",
        "dra": {"device_class": "gpu.nvidia.com", "selectors": [SIMULATED]},
        "node_selector": PROCESS_NODE_SELECTOR,
        "max_gpus": 2,
    },
    # kwok's DRA nodes (pods run there with no process, until a test ends them): MIG
    # devices, 1g.10gb slices of A100s ...
    "dra-mig": {
        "display_name": "A100 MIG 1g.10gb (DRA)",
        "dra": {"device_class": "mig.nvidia.com", "selectors": [MIG_1G]},
        "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
    },
    # ... and H100s shareable by memory: a claim takes a share of one.
    "dra-h100-shared": {
        "display_name": "H100 share (DRA)",
        "dra": {"device_class": "gpu.nvidia.com", "selectors": [H100]},
        "sharing": {"memory": "85520809984", "min": "1Gi"},
        "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
    },
    # A DeviceClass no driver of this cluster defines.
    "dra-missing": {
        "display_name": "Gaudi (DRA)",
        "dra": {"device_class": "gaudi.example.com"},
    },
}
# The jobs service's policy: the test cluster's types and these.
POLICY = Policy.from_config(
    **{**CLUSTER_CONFIG, "gpu_types": {**CLUSTER_CONFIG["gpu_types"], **DRA_TYPES}}
)
# GPU servers wait in Kueue, whose ClusterQueue has one DRA GPU of quota (Kueue's
# deviceClassMappings on the local cluster: gpu.nvidia.com -> gpu.nvidia.com/gpu).
QUEUE = "dra-servers"
DRA_QUOTA = "gpu.nvidia.com/gpu"
HUB_EXTRA = (
    f"c.GPUSpawner.gpu_types = {{**c.GPUSpawner.gpu_types, **{DRA_TYPES!r}}}\n"
    f"c.GPUSpawner.kueue_queue_name = {QUEUE!r}\n"
    "c.GPUSpawner.gpu_queue_timeout = 600\n"
    # Templates no pod owns are swept at the hub's start however young (else: 10 minutes).
    "from gpuhub import GPUSpawner\n"
    "GPUSpawner.ORPHAN_AGE = 0.0\n"
)
# The kernel spins on its GPU (the simulated GPU's utilization is its processes' CPU) and says
# which device it was given.
SPIN = (
    "import os, threading, time\n"
    "def spin():\n"
    "    end = time.time() + 120\n"
    "    while time.time() < end:\n"
    "        pass\n"
    "threading.Thread(target=spin, daemon=True).start()\n"
    "print('visible', os.environ.get('CUDA_VISIBLE_DEVICES'))\n"
)


def dra_queue(kube: Kube) -> None:
    """A ClusterQueue with one DRA GPU (and CPU and memory to spare) for the module's
    namespace, and its LocalQueue; returns once Kueue says the LocalQueue is active."""
    stem = kube.namespace
    objects: list[dict[str, Any]] = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": f"{stem}-any"}},
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": f"{stem}-dra"},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": kube.namespace}
                },
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", DRA_QUOTA],
                        "flavors": [
                            {
                                "name": f"{stem}-any",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 16},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": DRA_QUOTA, "nominalQuota": 1},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE},
            "spec": {"clusterQueue": f"{stem}-dra"},
        },
    ]
    for obj in objects:
        kube.create(obj)

    def active() -> bool:
        queue = kube.get("LocalQueue", QUEUE, api_version=KUEUE) or {}
        conditions = (queue.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    kube.wait_for(active, timeout=30)


def left_templates(kube: Kube) -> None:
    """What a hub that died between a server's template and its pod leaves behind (one no
    pod owns), beside a template of gpuhub's labels that something else owns."""
    owner = kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keeper"}})
    labels = {"app.kubernetes.io/managed-by": "gpuhub", "component": "singleuser-server"}
    for name, owners in (
        ("jupyter-gone-gpus", []),
        (
            "jupyter-kept-gpus",
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "keeper",
                    "uid": owner["metadata"]["uid"],
                }
            ],
        ),
    ):
        meta = {"name": name, "labels": labels, "ownerReferences": owners}
        kube.create({**template_of(meta), "apiVersion": RESOURCE})


def template_of(meta: dict[str, Any]) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


@pytest.fixture(scope="module")
def hub(module_kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    dra_queue(module_kube)
    left_templates(module_kube)
    running = start_hub(
        tmp_path_factory.mktemp("hub"),
        hub_config(module_kube.namespace, HUB_EXTRA),
        env={"KUBECONFIG": str(module_kube.kubeconfig)},
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def kube(module_kube: Kube) -> Kube:
    """This module's tests share the hub's namespace."""
    return module_kube


def claim_of(kube: Kube, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The ResourceClaim the controller-manager made from the pod's template, once named."""
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == "gpus" and status.get("resourceClaimName"):
            return kube.get("ResourceClaim", status["resourceClaimName"], api_version=RESOURCE)
    return None


def results(kube: Kube, pod_name: str) -> list[dict[str, Any]]:
    """The allocation results of the pod's claim; [] until it is allocated."""
    pod = kube.get("Pod", pod_name) or {}
    claim = claim_of(kube, pod) or {}
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def allocated(kube: Kube, pod_name: str) -> list[tuple[str, str]]:
    """(node pool, device) of each device the pod's claim was allocated; [] until then."""
    return [(r["pool"], r["device"]) for r in results(kube, pod_name)]


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def gated(pod: dict[str, Any] | None) -> bool:
    """Whether Kueue still holds the pod back (its admission gate)."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(g["name"] == "kueue.x-k8s.io/admission" for g in gates)


def progress_until(hub: Hub, user: str, words: str, timeout: float = 60) -> str:
    """The first message of the user's spawn progress that says ``words``."""
    deadline = time.monotonic() + timeout
    seen = []
    with hub.api("GET", f"/users/{user}/server/progress", stream=True) as response:
        assert response.status_code == 200, response.text
        for line in response.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                message = str(json.loads(line[5:]).get("message") or "")
                seen.append(message)
                if words in message:
                    return message
            assert time.monotonic() < deadline, seen
    raise AssertionError(f"the stream ended: {seen}")


def gpuhub_claims(kube: Kube) -> list[dict[str, Any]]:
    return kube.list("ResourceClaim", api_version=RESOURCE)


async def run_in_kernel(hub: Hub, user: str, code: str) -> str:
    """Start a kernel in the user's server (its REST API, as JupyterLab does) and run ``code``
    over the kernel's WebSocket; what it printed."""
    base = f"{hub.url}/user/{user}/api"
    headers = {"Authorization": f"token {API_TOKEN}"}
    # A server the hub just called ready may still be checking the token with the hub: ask
    # until it answers as the API does.
    deadline = time.monotonic() + 30
    while True:
        response = await asyncio.to_thread(
            lambda: requests.post(f"{base}/kernels", headers=headers, json={}, timeout=60)
        )
        if response.status_code == 201:
            break
        assert time.monotonic() < deadline, (response.status_code, response.text[:2000])
        await asyncio.sleep(0.5)
    kernel = response.json()
    ws = await websocket_connect(
        HTTPRequest(
            f"ws://127.0.0.1:{hub.port}/user/{user}/api/kernels/{kernel['id']}/channels",
            headers=headers,
        )
    )
    msg_id = uuid.uuid4().hex
    ws.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "session": uuid.uuid4().hex,
                    "username": user,
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "channel": "shell",
                "content": {"code": code, "silent": False, "store_history": False},
            }
        )
    )
    printed = ""
    while True:
        raw = await asyncio.wait_for(ws.read_message(), 60)
        assert raw is not None, "the kernel's WebSocket closed"
        message = json.loads(raw)
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = message["header"]["msg_type"]
        if kind == "stream":
            printed += message["content"]["text"]
        elif kind == "error":
            raise AssertionError("\n".join(message["content"]["traceback"]))
        elif kind == "execute_reply":
            ws.close()
            return printed


def lab_gpus(hub: Hub, user: str) -> list[dict[str, Any]]:
    """The GPUs the user's server sees, with their utilization (the lab's metrics API)."""
    response = requests.get(
        f"{hub.url}/user/{user}/gpuhub/api/metrics",
        headers={"Authorization": f"token {API_TOKEN}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return list(response.json()["gpus"])


async def test_a_dra_server_computes_on_the_device_it_was_allocated(hub: Hub, kube: Kube) -> None:
    # A type whose DeviceClass the cluster lacks is shown unavailable, and refused in a
    # sentence before anything is made; the admin's log said it at start.
    session = hub.login("ada")
    page = await asyncio.to_thread(session.get, f"{hub.url}/hub/spawn", timeout=30)

    # The hub's first look at the cluster swept the template a dead hub left, only that one.
    def template(name: str) -> dict[str, Any] | None:
        return kube.get("ResourceClaimTemplate", name, api_version=RESOURCE)

    kube.wait_for(lambda: template("jupyter-gone-gpus") is None, timeout=30)
    assert template("jupyter-kept-gpus") is not None
    missing = 'this cluster has no DeviceClass "gaudi.example.com"'
    assert missing in page.text.replace("&#34;", '"').replace("&quot;", '"')
    refused = await asyncio.to_thread(
        spawn_json, hub, "ada", {"gpu_type": "dra-missing", "gpus": 1}
    )
    assert refused.status_code == 400 and missing in refused.json()["message"]
    assert "gpu_types['dra-missing'].dra.device_class is 'gaudi.example.com'" in hub.log()

    response = await asyncio.to_thread(spawn_json, hub, "ada", {"gpu_type": "dra", "gpus": 1})
    assert response.status_code in (201, 202), response.text
    await asyncio.to_thread(wait_ready, hub, "ada")
    pod = kube.get("Pod", "jupyter-ada")
    assert pod is not None and pod["spec"]["nodeName"] == "local-0"
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "notebook")
    assert not [k for k in container["resources"]["limits"] if k.startswith("nvidia.com/")]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    template = kube.get("ResourceClaimTemplate", "jupyter-ada-gpus", api_version=RESOURCE)
    assert template is not None
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "jupyter-ada-gpus"}
    ]
    # The pod owns its template: it goes with the pod, whatever happens to the hub.
    (owner,) = template["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
    [(pool, device)] = allocated(kube, "jupyter-ada")
    assert pool == "local-0" and re.fullmatch(r"gpu-[45]", device)
    index = int(device.removeprefix("gpu-"))

    printed = await run_in_kernel(hub, "ada", SPIN)
    assert printed.strip() == f"visible {index}"

    def busy() -> bool:
        gpus = lab_gpus(hub, "ada")
        return [g["index"] for g in gpus] == [index] and (gpus[0]["utilization"] or 0) > 0

    kube.wait_for(busy, timeout=30, interval=0.5)

    # Kueue counts ada's claim against the queue's one DRA GPU: bob's server waits in line,
    # and his spawn page says his place, as for any GPU server.
    assert (kube.get("Pod", "jupyter-ada") or {})["metadata"]["labels"][QUEUE_LABEL] == QUEUE
    assert hub.api("POST", "/users/bob").status_code == 201
    response = await asyncio.to_thread(spawn_json, hub, "bob", {"gpu_type": "dra", "gpus": 1})
    assert response.status_code == 202, response.text
    kube.wait_for(lambda: gated(kube.get("Pod", "jupyter-bob")), timeout=30)
    said = await asyncio.to_thread(progress_until, hub, "bob", "you are 1st in line")
    assert said.startswith(f'Waiting in queue "{QUEUE}" for 1 Simulated GPU (DRA) GPU'), said
    assert allocated(kube, "jupyter-bob") == []

    # Stopped: the template is deleted, the pod's claim released and deleted, and Kueue
    # lets bob in: his server starts on a device of its own claim.
    claim = claim_of(kube, kube.get("Pod", "jupyter-ada") or {})
    assert claim is not None
    await asyncio.to_thread(stop, hub, "ada")
    kube.wait_for(
        lambda: (
            kube.get("ResourceClaimTemplate", "jupyter-ada-gpus", api_version=RESOURCE) is None
            and kube.get("ResourceClaim", claim["metadata"]["name"], api_version=RESOURCE) is None
        ),
        timeout=60,
    )
    await asyncio.to_thread(wait_ready, hub, "bob")
    [(pool, _)] = allocated(kube, "jupyter-bob")
    assert pool == "local-0"
    await asyncio.to_thread(stop, hub, "bob")
    kube.wait_for(lambda: not gpuhub_claims(kube), timeout=60)

    # A pod Kubernetes refuses (a namespace quota of no pods) leaves no template behind.
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}},
    }
    kube.create(quota)
    kube.wait_for(lambda: (kube.get("ResourceQuota", "no-pods") or {}).get("status"), timeout=30)
    try:
        response = await asyncio.to_thread(spawn_json, hub, "ada", {"gpu_type": "dra", "gpus": 1})
        assert response.status_code == 403, response.text
        assert "Kubernetes refused the server's pod: exceeded quota: no-pods" in response.text
        assert kube.get("ResourceClaimTemplate", "jupyter-ada-gpus", api_version=RESOURCE) is None
    finally:
        kube.delete("ResourceQuota", "no-pods")


# -- every job kind ---------------------------------------------------------------------------


@pytest.fixture
async def backend(kube: Kube) -> AsyncIterator[KubernetesBackend]:
    settings = m.KubeJobSettings(namespace=kube.namespace, job_image="img:1")
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    policy = POLICY
    names = {k: t.display_name for k, t in policy.gpu_types.items()}
    running = KubernetesBackend(api, settings, gpu_names=names)
    try:
        yield running
    finally:
        await running.close()


async def wait_status(backend: KubernetesBackend, job_id: str, *statuses: str) -> Any:
    for _ in range(600):
        record = await backend.get("alice", job_id)
        if record.status in statuses:
            return record
        await asyncio.sleep(0.1)
    raise AssertionError(f"{job_id} stayed {record.status}: {record.message}")


async def test_each_job_kind_claims_its_gpus_and_releases_them(
    kube: Kube, backend: KubernetesBackend, tmp_path: Path
) -> None:
    write_notebook(
        tmp_path / "train.ipynb",
        ["import os", "print('visible', os.environ['CUDA_VISIBLE_DEVICES'])"],
    )
    policy = POLICY
    notebook = (tmp_path / "train.ipynb").read_bytes()

    def request(**body: Any) -> Any:
        return make_request(tmp_path, policy=policy, groups=("staff",), **body)

    kept = kube.list("ResourceClaimTemplate", api_version=RESOURCE)  # the hub test's
    # A type whose DeviceClass the cluster lacks is refused before anything is made.
    with pytest.raises(JobError) as refused:
        await backend.check(request(gpu_type="dra-missing", gpus=1), "alice")
    assert refused.value.field == "gpu_type"
    assert 'this cluster has no DeviceClass "gaudi.example.com"' in refused.value.message
    await backend.check(request(gpu_type="dra", gpus=1), "alice")  # the class is there

    # A submit Kubernetes refuses half-way (a quota of no Jobs) leaves no template behind.
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-jobs"},
        "spec": {"hard": {"count/jobs.batch": "0"}},
    }
    kube.create(quota)
    kube.wait_for(lambda: (kube.get("ResourceQuota", "no-jobs") or {}).get("status"), timeout=30)
    with pytest.raises(JobError):
        await backend.submit(request(gpu_type="dra", gpus=1), "alice", notebook=notebook)
    assert kube.list("ResourceClaimTemplate", api_version=RESOURCE) == kept
    assert not kube.list("ConfigMap", labels={"gpuhub.io/user": "alice"})
    kube.delete("ResourceQuota", "no-jobs")
    kube.wait_for(lambda: kube.get("ResourceQuota", "no-jobs") is None, timeout=30)

    # A Job on the process node: its pod runs the notebook on the device it was allocated.
    job = await backend.submit(request(gpu_type="dra", gpus=1), "alice", notebook=notebook)
    assert kube.get("ResourceClaimTemplate", f"{job.id}-gpus", api_version=RESOURCE)
    done = await wait_status(backend, job.id, "succeeded", "failed")
    assert done.status == "succeeded", done.error
    output = nbformat.reads((await backend.output("alice", job.id)).decode(), as_version=4)
    printed = "".join(o.get("text", "") for c in output.cells for o in c.get("outputs", []))
    assert re.fullmatch(r"visible [45]\n", printed), printed

    # A PyTorchJob of MIG slices on kwok's MIG node: every replica's pod gets its own claim,
    # each allocated a 1g.10gb slice of its own by the scheduler.
    pytorch = await backend.submit(
        request(kind="pytorchjob", workers=2, gpu_type="dra-mig", gpus=1),
        "alice",
        notebook=notebook,
    )
    assert pytorch.gpu == "2 workers, 1 x A100 MIG 1g.10gb (DRA) each"
    await wait_status(backend, pytorch.id, "running")
    pods = kube.job_pods(pytorch.id, "PyTorchJob")
    devices = [d for p in pods for d in allocated(kube, p["metadata"]["name"])]
    assert len(pods) == 2 and len(set(devices)) == 2
    assert {pool for pool, _ in devices} == {"dra-mig-0"}
    assert all(re.fullmatch(r"gpu-\d+-mig-1g10gb-\d+-\d+", d) for _, d in devices), devices
    # A TFJob of shares on kwok's H100 node: each replica's claim consumes 20 GiB of one
    # H100's memory (consumable capacity), shares of one device told apart by their shareID.
    tf = await backend.submit(
        request(kind="tfjob", workers=2, gpu_type="dra-h100-shared", gpu_memory="20Gi"),
        "alice",
        notebook=notebook,
    )
    await wait_status(backend, tf.id, "running")
    shares = [
        r for p in kube.job_pods(tf.id, "TFJob") for r in results(kube, p["metadata"]["name"])
    ]
    assert len(shares) == 2
    for share in shares:
        assert share["pool"] == "dra-h100-0" and share["shareID"]
        assert share["consumedCapacity"] == {"memory": "20Gi"}
    distributed = [(pytorch, "PyTorchJob"), (tf, "TFJob")]
    for record, resource in distributed:
        kube.finish_job(record.id, resource)
        await wait_status(backend, record.id, "succeeded")
    # Ended pods release their claims, and the controller-manager deletes them; each job owns
    # its template, so it goes with the job.
    kube.wait_for(lambda: not gpuhub_claims(kube), timeout=60)
    for record, resource in distributed:
        made = kube.get(resource, record.id) or {}
        template = kube.get("ResourceClaimTemplate", f"{record.id}-gpus", api_version=RESOURCE)
        assert template is not None
        (owner,) = template["metadata"]["ownerReferences"]
        assert owner["uid"] == made["metadata"]["uid"]
