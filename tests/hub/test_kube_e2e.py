"""End to end: a real JupyterHub with GPUSpawner on the test cluster (a real kube-apiserver,
scheduler and controllers; harness/cluster.py), spawning through the form and the REST API.

Servers of the ``local`` GPU type (and CPU-only ones) land on the process node ``local-0``,
which runs ``jupyterhub-singleuser`` as a local process on the pod's own loopback IP, so the
hub really connects to the server it spawned. Servers of the ``a100`` types land on kwok's
fake A100 nodes: their pods run without a process, for figures, placement and refusals. The
module's hub talks to the apiserver through the fault proxy (harness/kube_faults.py),
which counts requests and injects faults when a test asks.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.cluster import (
    GPU_TOLERATION,
    KWOK_TOLERATION,
    MISSING_IMAGE_SUFFIX,
    PROCESS_NODE_SELECTOR,
    Kube,
)
from harness.hub.kube import hub_config
from harness.hub.process import Hub, free_port, running_hub, spawn_json, start_hub
from harness.kube_faults import FaultProxy, proxy_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def proxy(module_kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    """The fault proxy, and KUBECONFIG pointing at it for the hubs this module starts."""
    running = proxy_for(module_kube.kubeconfig, tmp_path_factory.mktemp("proxy"))
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(running.kubeconfig)  # read by the hub child processes
    try:
        yield running
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        running.stop()


@pytest.fixture(scope="module")
def hub(
    module_kube: Kube, proxy: FaultProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    # One image no node can pull (kwok's gpuhub-pod-image-missing stage).
    missing = (
        'c.GPUSpawner.images["missing"] = {"display_name": "Unpullable image", '
        f'"image": "registry.example.org/none/notebook{MISSING_IMAGE_SUFFIX}"}}\n'
    )
    running = start_hub(tmp_path_factory.mktemp("hub"), hub_config(module_kube.namespace, missing))
    try:
        yield running
    finally:
        running.stop()
        for line in running.log().splitlines():
            if "Traceback" in line:
                print(running.log())  # shown by pytest when a test failed
                break


@pytest.fixture
def kube(module_kube: Kube) -> Kube:
    """This module's tests share the hub's namespace."""
    return module_kube


def pod_of(kube: Kube, user: str) -> dict[str, Any] | None:
    """The user's pod as the apiserver returns it, or None."""
    return kube.get("Pod", f"jupyter-{user}")


def wait_pod_gone(kube: Kube, user: str) -> None:
    kube.wait_for(lambda: pod_of(kube, user) is None, timeout=60)


def gpu_pod(
    name: str, gpus: int, *, node: str | None = None, local: bool = False
) -> dict[str, Any]:
    """A pod holding ``gpus`` GPUs: on the process node (a real ``sleep``), or on a kwok node."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "train",
                "image": "busybox:1.36",
                "command": ["sleep", "3600"],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if local:
        spec["nodeSelector"] = PROCESS_NODE_SELECTOR
    else:
        spec["tolerations"] = [GPU_TOLERATION, KWOK_TOLERATION]
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def running(kube: Kube, *names: str) -> bool:
    return all(
        (kube.get("Pod", n) or {}).get("status", {}).get("phase") == "Running" for n in names
    )


def server_answers(hub: Hub, user: str) -> dict[str, Any]:
    from harness.hub.process import API_TOKEN

    response = requests.get(
        f"{hub.url}/user/{user}/api/status",
        headers={"Authorization": f"token {API_TOKEN}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.json()


def progress_messages(hub: Hub, user: str, until: str, timeout: float = 60) -> list[str]:
    """Read the hub's progress event stream until a message matching ``until`` arrives."""
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    with hub.api("GET", f"/users/{user}/server/progress", stream=True) as response:
        assert response.status_code == 200, response.text
        for line in response.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                event = json.loads(line[5:])
                messages.append(event.get("message", ""))
                if (
                    re.search(until, event.get("message", ""))
                    or event.get("failed")
                    or event.get("ready")
                ):
                    return messages
            if time.monotonic() > deadline:
                break
    return messages


# -- the form --------------------------------------------------------------------------------
def test_form_shows_live_capacity_and_spawns(hub: Hub, kube: Kube) -> None:
    session = hub.login("ada")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200
    assert "16 of 16 free now; at most 8 together on one node" in page.text
    assert "7 of 7 free now" in page.text
    assert "4 of 4 free now" in page.text
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    response = session.post(
        f"{hub.url}/hub/spawn",
        data={
            "image": "pytorch",
            "cpu": "1",
            "memory": "1G",
            "gpu_type": "local",
            "gpus": "2",
            "_xsrf": xsrf,
        },
        timeout=30,
    )
    assert response.status_code == 200, response.text
    hub.wait_for_server("ada", timeout=90)
    pod = pod_of(kube, "ada")
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == "local-0"
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "notebook")
    assert container["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert pod["spec"]["nodeSelector"] == PROCESS_NODE_SELECTOR
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "gpuhub-dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "gpuhub-dshm", "mountPath": "/dev/shm"} in [
        {k: m[k] for k in ("name", "mountPath")} for m in container["volumeMounts"]
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUHUB_GPUS"] == "2"
    assert "started" in server_answers(hub, "ada")
    # Another user's form now counts ada's two GPUs as taken.
    other = hub.login("hopper")
    kube.wait_for(
        lambda: "2 of 4 free now" in other.get(f"{hub.url}/hub/spawn", timeout=30).text,
        timeout=10,
    )
    hub.stop_server("ada")
    wait_pod_gone(kube, "ada")
    kube.wait_for(
        lambda: "4 of 4 free now" in session.get(f"{hub.url}/hub/spawn", timeout=30).text,
        timeout=10,
    )


def test_form_counts_gpus_in_use(hub: Hub, kube: Kube) -> None:
    kube.create(gpu_pod("training-run", 5, node="a100-1"))
    kube.wait_for(lambda: running(kube, "training-run"))
    session = hub.login("grace")

    def figures() -> bool:
        text = session.get(f"{hub.url}/hub/spawn", timeout=30).text
        return "11 of 16 free now; at most 8 together on one node" in text

    kube.wait_for(figures, timeout=10)
    kube.finish_pods([kube.get("Pod", "training-run")])
    kube.wait_for(
        lambda: "16 of 16 free now" in session.get(f"{hub.url}/hub/spawn", timeout=30).text,
        timeout=10,
    )
    kube.delete("Pod", "training-run", gracePeriodSeconds=0)


# -- the REST API ------------------------------------------------------------------------------
def test_rest_spawn_mig_slice_then_stop_deletes_pod(hub: Hub, kube: Kube) -> None:
    """A MIG slice goes to the MIG node with the slice as its limit (kwok's node: the pod runs
    without a process, so the server is stopped while it starts)."""
    hub.api("POST", "/users/alan")
    response = spawn_json(
        hub, "alan", {"image": "cpu", "gpu_type": "a100-1g", "gpus": 1, "cpu": 1, "memory": "1G"}
    )
    assert response.status_code == 202, response.text
    pod = kube.wait_for(
        lambda: (p := pod_of(kube, "alan")) and p["status"].get("phase") == "Running" and p
    )
    assert pod["spec"]["nodeName"] == "a100-mig-0"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    hub.stop_server("alan")
    wait_pod_gone(kube, "alan")


def test_never_fits_is_refused_and_nothing_is_created(
    hub: Hub, kube: Kube, proxy: FaultProxy
) -> None:
    hub.api("POST", "/users/edsger")
    before = proxy.requests
    response = spawn_json(hub, "edsger", {"gpu_type": "a100", "gpus": 12})
    assert response.status_code == 400
    assert response.json()["message"] == (
        "No node in this cluster has 12 NVIDIA A100 80GB GPUs (the most on one node is 8); ask for 8 or fewer."
    )
    assert pod_of(kube, "edsger") is None
    assert not hub.user_model("edsger")["servers"]
    # The refusal came from the watch cache: no pod was created, and no LIST was needed.
    assert proxy.requests - before < 5
    session = hub.login("edsger")
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    page = session.post(
        f"{hub.url}/hub/spawn",
        data={"gpu_type": "a100", "gpus": "9", "cpu": "1", "memory": "1G", "_xsrf": xsrf},
        timeout=30,
    )
    assert "No node in this cluster has 9 NVIDIA A100 80GB GPUs" in page.text
    assert pod_of(kube, "edsger") is None


def test_progress_waits_for_gpus_in_words_then_starts(hub: Hub, kube: Kube) -> None:
    """Three of the process node's four GPUs are taken by a real process; a server that asks
    for two waits in words, and starts once they come back."""
    kube.create(gpu_pod("filler", 3, local=True))
    kube.wait_for(lambda: running(kube, "filler"))
    hub.api("POST", "/users/barbara")
    response = spawn_json(
        hub,
        "barbara",
        {"image": "pytorch", "gpu_type": "local", "gpus": 2, "cpu": 1, "memory": "1G"},
    )
    assert response.status_code == 202, response.text
    waiting = progress_messages(hub, "barbara", r"Waiting for 2 free")
    assert "Waiting for 2 free Simulated GPUs (1 free now)" in waiting, waiting
    kube.delete("Pod", "filler", gracePeriodSeconds=0)
    messages = progress_messages(hub, "barbara", r"^Server started")
    assert "2 Simulated GPUs reserved on node local-0" in messages, messages
    # The process node runs programs from this machine: the image is always "there".
    assert "Image PyTorch 2 + CUDA 12 is already on the node" in messages, messages
    hub.wait_for_server("barbara", timeout=90)
    hub.stop_server("barbara")
    wait_pod_gone(kube, "barbara")


def test_image_that_cannot_be_pulled_fails_the_spawn_in_words(hub: Hub, kube: Kube) -> None:
    """kwok's gpuhub-pod-image-missing stage: the node cannot pull the image, and the user
    reads that, in words, before the start times out."""
    hub.api("POST", "/users/ida")
    said = (
        "Could not pull image Unpullable image: it does not exist or this cluster may not read it."
    )
    response = spawn_json(hub, "ida", {"image": "missing", "gpu_type": "a100", "gpus": 1})
    # Failing within JupyterHub's slow_spawn_timeout, the POST itself carries the reason;
    # a slower failure reaches the progress stream instead.
    if response.status_code == 503:
        assert response.json()["message"] == said
    else:
        assert response.status_code == 202, response.text
        assert f"Spawn failed: {said}" in progress_messages(hub, "ida", r"Could not pull"), said
    hub.wait_for_server("ida", ready=False, timeout=60)
    wait_pod_gone(kube, "ida")


def test_unschedulable_fails_fast_with_the_reason(hub: Hub, kube: Kube, proxy: FaultProxy) -> None:
    """The hub's view of the nodes lags (its node watch is held back) while both A100 nodes
    are cordoned: the pod is created, the real scheduler's FailedScheduling says why, and the
    spawn fails fast with that reason in words."""
    proxy.freeze_watches("/api/v1/nodes")
    for node in ("a100-0", "a100-1"):
        kube.patch("Node", node, {"spec": {"unschedulable": True}})
    try:
        hub.api("POST", "/users/john")
        started = time.monotonic()
        response = spawn_json(hub, "john", {"gpu_type": "a100", "gpus": 1})
        # Failing within JupyterHub's slow_spawn_timeout, the POST itself carries the reason.
        assert response.status_code == 503, response.text
        message = response.json()["message"]
        assert time.monotonic() - started < 20  # not start_timeout (60 s)
        assert message.startswith("No node in the cluster can run this server: "), message
        assert "2 nodes cordoned for maintenance" in message
        hub.wait_for_server("john", ready=False, timeout=30)
        wait_pod_gone(kube, "john")
    finally:
        for node in ("a100-0", "a100-1"):
            kube.patch("Node", node, {"spec": {"unschedulable": None}})
        proxy.thaw_watches()
        # The next test's hub must see the nodes usable again, not just the apiserver.
        form = hub.login("john")
        kube.wait_for(
            lambda: "of 16 free now" in form.get(f"{hub.url}/hub/spawn", timeout=30).text,
            timeout=30,
        )


def test_namespace_quota_refusal_is_said_plainly(hub: Hub, kube: Kube) -> None:
    """The chart's ResourceQuota caps the namespace's GPUs for all users together; when
    admission refuses the server's pod (403 exceeded quota) the user reads why in one sentence."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpuhub-gpus"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "0"}},
    }
    kube.create(quota)
    kube.wait_for(
        lambda: (kube.get("ResourceQuota", "gpuhub-gpus") or {}).get("status", {}).get("hard")
    )
    try:
        hub.api("POST", "/users/grace")
        response = spawn_json(hub, "grace", {"gpu_type": "a100", "gpus": 1})
        assert response.status_code == 403, response.text
        assert response.json()["message"] == (
            "Kubernetes refused the server's pod: exceeded quota: gpuhub-gpus, requested: "
            "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=0, limited: "
            "requests.nvidia.com/gpu=0"
        )
        assert pod_of(kube, "grace") is None
        hub.wait_for_server("grace", ready=False, timeout=30)
    finally:
        kube.delete("ResourceQuota", "gpuhub-gpus")


# -- resilience ---------------------------------------------------------------------------------
def test_spawn_survives_500s_and_dropped_watches(hub: Hub, kube: Kube, proxy: FaultProxy) -> None:
    hub.api("POST", "/users/radia")
    proxy.fail_requests(500, count=2, method="POST", path="/pods")

    def while_pending() -> None:
        # Once the pod exists, while its server starts: cut every watch, forget the watch
        # history (so reflectors must list again) and fail those lists a few times.
        kube.wait_for(lambda: pod_of(kube, "radia"), timeout=30, interval=0.02)
        proxy.fail_requests(
            500,
            count=3,
            method="GET",
            path=f"/api/v1/namespaces/{kube.namespace}/pods",
            watch=False,
        )
        proxy.compact()
        proxy.drop_watches(abort=True)

    faults = threading.Thread(target=while_pending)
    faults.start()
    assert spawn_json(hub, "radia", {"image": "cpu"}).status_code in (201, 202)
    faults.join()
    hub.wait_for_server("radia", timeout=90)
    assert "started" in server_answers(hub, "radia")
    # A dead server is noticed: the pod goes away behind the hub's back.
    kube.delete("Pod", "jupyter-radia", gracePeriodSeconds=0)
    kube.wait_for(lambda: not hub.user_model("radia")["servers"], timeout=60)
    assert pod_of(kube, "radia") is None


def test_hub_restart_finds_running_servers(kube: Kube, proxy: FaultProxy, tmp_path: Path) -> None:
    port, hub_port = free_port(), free_port()
    config = hub_config(kube.namespace, f"c.JupyterHub.hub_port = {hub_port}\n")
    first = start_hub(tmp_path, config, port=port)
    try:
        first.api("POST", "/users/katherine")
        assert spawn_json(first, "katherine", {"image": "cpu"}).status_code in (201, 202)
        first.wait_for_server("katherine", timeout=90)
    finally:
        first.stop()
    assert (pod_of(kube, "katherine") or {}).get("status", {}).get("phase") == "Running"
    second = start_hub(tmp_path, config, port=port)
    try:
        model = second.wait_for_server("katherine", timeout=30)
        assert model["servers"][""]["ready"]
        assert "started" in server_answers(second, "katherine")
        second.stop_server("katherine")
        wait_pod_gone(kube, "katherine")
    finally:
        second.stop()


def test_form_while_the_hub_still_reads_the_cluster_says_so(
    proxy: FaultProxy, kube: Kube, tmp_path: Path
) -> None:
    """Just after a hub starts on a big cluster, the first read of pods takes a while: the
    form says the figures are still loading (not that the cluster did not answer), and shows
    them once they are in; a GPU spawn under a quota meanwhile waits for the ledger and
    starts, instead of being told to try again."""
    # The first read of pods, a streaming list (a watch) or a paged LIST alike.
    proxy.slow_requests(15, method="GET", path="/api/v1/pods", count=1)
    extra = 'c.GPUSpawner.capacity_wait = 1\nc.GPUSpawner.gpu_quota = {"default": 2}\n'
    config = hub_config(kube.namespace, extra)
    try:
        with running_hub(tmp_path / "hub", config) as hub:
            session = hub.login("ada")
            page = session.get(f"{hub.url}/hub/spawn", timeout=30)
            assert page.status_code == 200
            assert "Live GPU availability is still loading" in page.text, page.text
            assert "did not answer" not in page.text
            options = {"image": "pytorch", "gpu_type": "local", "gpus": 1, "cpu": 1}
            response = spawn_json(hub, "ada", {**options, "memory": "1G"})
            assert response.status_code in (201, 202), response.text
            hub.wait_for_server("ada", timeout=90)
            other = hub.login("hopper")  # ada's own form now goes to her server
            kube.wait_for(
                lambda: "free now" in other.get(f"{hub.url}/hub/spawn", timeout=30).text,
                timeout=60,
            )
            hub.stop_server("ada")
            wait_pod_gone(kube, "ada")
    finally:
        proxy.clear_faults()


def test_form_without_a_reachable_cluster_says_so(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from localk8s.kubeapi import kubeconfig

    dead = tmp_path / "kubeconfig"
    dead.write_text(kubeconfig(f"http://127.0.0.1:{free_port()}", tmp_path / "none", token="x"))
    monkeypatch.setenv("KUBECONFIG", str(dead))
    config = hub_config(kube.namespace, "c.GPUSpawner.capacity_wait = 1\n")
    with running_hub(tmp_path / "hub", config) as hub:
        session = hub.login("ada")
        page = session.get(f"{hub.url}/hub/spawn", timeout=30)
        assert page.status_code == 200
        assert (
            "Live GPU availability cannot be shown right now (the cluster did not answer)."
            in page.text
        )
        assert not re.search(r"\d+ of \d+ free now", page.text)
        assert 'value="a100"' in page.text  # the choices are still there
