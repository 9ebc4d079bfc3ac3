"""End to end: a real JupyterHub with GPUSpawner on a cluster (kubesim, or the real one that
``GPUHUB_TEST_KUBECONFIG`` names), spawning through the form and the REST API.

kubesim's kubelet runs each ``jupyterhub-singleuser`` container as a local process on the pod's
own loopback IP, so the hub really connects to the server it spawned.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.kubesim import KubeSimThread
from tests.kubesim.pytest_plugin import A100_PRODUCT, DEFAULT_NODES
from tests.support.hub.process import Hub, free_port, spawn_json, start_hub

pytestmark = pytest.mark.e2e

REAL_CLUSTER = os.environ.get("GPUHUB_TEST_KUBECONFIG")
NAMESPACE = os.environ.get("GPUHUB_TEST_NAMESPACE", "default")
# kubesim runs servers as this process's user; real images run them as jovyan.
ALLOW_ROOT = (
    os.environ.get("GPUHUB_TEST_ALLOW_ROOT", "1" if os.getuid() == 0 and not REAL_CLUSTER else "0")
    == "1"
)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def hub_config(extra: str = "") -> str:
    """GPUSpawner's admin config for these tests (docs/architecture.md's example, scaled down)."""
    gpu_types = {
        "a100": {
            "display_name": "NVIDIA A100 80GB",
            "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": A100_PRODUCT},
            "tolerations": [GPU_TOLERATION],
            # More than any node has, so that the cluster's own limit shows.
            "max_gpus": 16,
        },
        "a100-1g": {
            "display_name": "A100 MIG 1g.10gb slice",
            "resource_name": "nvidia.com/mig-1g.10gb",
            "tolerations": [GPU_TOLERATION],
            "max_gpus": 1,
        },
    }
    return textwrap.dedent(
        f"""
            c.JupyterHub.spawner_class = "gpuhub.GPUSpawner"
            c.JupyterHub.cleanup_servers = False
            c.GPUSpawner.namespace = {NAMESPACE!r}
            c.GPUSpawner.images = {{
                "pytorch": {{"display_name": "PyTorch 2 + CUDA 12", "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"}},
                "cpu": {{"display_name": "SciPy (CPU)", "image": "quay.io/jupyter/scipy-notebook:2025-10-20"}},
            }}
            c.GPUSpawner.gpu_types = {gpu_types!r}
            c.GPUSpawner.cpu_range = {{"min": 0.5, "max": 32, "default": 1}}
            c.GPUSpawner.memory_range = {{"min": "512M", "max": "256G", "default": "1G"}}
            c.GPUSpawner.default_limits = {{"max_gpus": 16}}
            # The image's entrypoint would run this; kubesim's kubelet runs it locally.
            c.GPUSpawner.cmd = ["jupyterhub-singleuser"]
            # kubesim runs it as this test's user; images run it as jovyan, never as root.
            c.GPUSpawner.args = ["--allow-root"] if {ALLOW_ROOT!r} else []
            c.GPUSpawner.start_timeout = 60
            c.GPUSpawner.http_timeout = 60
            c.GPUSpawner.k8s_api_request_retry_timeout = 20
            c.GPUSpawner.poll_interval = 2  # notice dead servers quickly
            """
    ) + textwrap.dedent(extra)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, KubeSimThread | None]]:
    """The cluster, and KUBECONFIG pointing at it for the hubs this module starts."""
    previous = os.environ.get("KUBECONFIG")
    sim = None
    if REAL_CLUSTER:
        path = Path(REAL_CLUSTER)
    else:
        path = tmp_path_factory.mktemp("kubesim") / "kubeconfig"
        sim = KubeSimThread(DEFAULT_NODES, kubeconfig=path)
        sim.run_locally({"jupyterhub-singleuser"})
    os.environ["KUBECONFIG"] = str(path)  # read by the hub child processes
    try:
        yield path, sim
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        if sim is not None:
            sim.stop()


@pytest.fixture(scope="module")
def hub(
    cluster: tuple[Path, KubeSimThread | None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    running = start_hub(tmp_path_factory.mktemp("hub"), hub_config())
    try:
        yield running
    finally:
        running.stop()
        for line in running.log().splitlines():
            if "Traceback" in line:
                print(running.log())  # shown by pytest when a test failed
                break


def sim_of(cluster: tuple[Path, KubeSimThread | None]) -> KubeSimThread:
    sim = cluster[1]
    if sim is None:
        pytest.skip("needs kubesim's controls; GPUHUB_TEST_KUBECONFIG points at a real cluster")
    return sim


def pod_of(
    cluster: tuple[Path, KubeSimThread | None] | KubeSimThread, user: str
) -> dict[str, Any] | None:
    """The user's pod as the apiserver returns it (camelCase dict), or None."""
    if isinstance(cluster, KubeSimThread):
        return cluster.get("Pod", f"jupyter-{user}", NAMESPACE)
    kubeconfig, sim = cluster
    if sim is not None:
        return sim.get("Pod", f"jupyter-{user}", NAMESPACE)
    import kubernetes

    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    try:
        pod = kubernetes.client.CoreV1Api(api_client).read_namespaced_pod(
            f"jupyter-{user}", NAMESPACE
        )
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    finally:
        api_client.close()
    return api_client.sanitize_for_serialization(pod)


def wait_pod_gone(cluster: tuple[Path, KubeSimThread | None] | KubeSimThread, user: str) -> None:
    deadline = time.monotonic() + 60
    while pod_of(cluster, user) is not None:
        assert time.monotonic() < deadline, f"pod of {user} still there"
        time.sleep(0.1)


def server_answers(hub: Hub, user: str) -> dict[str, Any]:
    from tests.support.hub.process import API_TOKEN

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
def test_form_shows_live_capacity_and_spawns(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    """Runs on a real cluster too (GPUHUB_TEST_KUBECONFIG): then figures are not checked."""
    sim = cluster[1]
    session = hub.login("ada")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200
    if sim is not None:
        assert "16 of 16 free now; at most 8 together on one node" in page.text
        assert "7 of 7 free now; at most 7 together on one node" in page.text
    else:
        assert re.search(r"\d+ of \d+ free now", page.text)
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    response = session.post(
        f"{hub.url}/hub/spawn",
        data={
            "image": "pytorch",
            "cpu": "1",
            "memory": "1G",
            "gpu_type": "a100",
            "gpus": "2",
            "_xsrf": xsrf,
        },
        timeout=30,
    )
    assert response.status_code == 200, response.text
    hub.wait_for_server("ada", timeout=300 if sim is None else 60)
    pod = pod_of(cluster, "ada")
    assert pod is not None and pod["status"]["phase"] == "Running"
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "notebook")
    assert container["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == A100_PRODUCT
    assert GPU_TOLERATION in pod["spec"]["tolerations"]
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "gpuhub-dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "gpuhub-dshm", "mountPath": "/dev/shm"} in [
        {k: m[k] for k in ("name", "mountPath")} for m in container["volumeMounts"]
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUHUB_GPUS"] == "2"
    assert "started" in server_answers(hub, "ada")
    if sim is not None:
        # Another user's form now counts ada's two GPUs as taken.
        other = hub.login("hopper")
        sim.wait_for(
            lambda: (
                "14 of 16 free now; at most 8 together on one node"
                in other.get(f"{hub.url}/hub/spawn", timeout=30).text
            ),
            timeout=10,
        )
    hub.stop_server("ada")
    wait_pod_gone(cluster, "ada")
    if sim is not None:
        page = session.get(f"{hub.url}/hub/spawn", timeout=30)
        assert "16 of 16 free now" in page.text


def test_form_counts_gpus_in_use(hub: Hub, cluster: tuple[Path, KubeSimThread | None]) -> None:
    sim = sim_of(cluster)
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "training-run"},
            "spec": {
                "restartPolicy": "Never",
                "tolerations": [GPU_TOLERATION],
                "nodeSelector": {"kubernetes.io/hostname": "a100-1"},
                "containers": [
                    {
                        "name": "train",
                        "image": "busybox:1.36",
                        "resources": {"limits": {"nvidia.com/gpu": "5"}},
                    }
                ],
            },
        },
        NAMESPACE,
    )
    sim.wait_for(
        lambda: (
            (sim.get("Pod", "training-run", NAMESPACE) or {}).get("status", {}).get("phase")
            == "Running"
        )
    )
    session = hub.login("grace")

    def figures() -> bool:
        text = session.get(f"{hub.url}/hub/spawn", timeout=30).text
        return "11 of 16 free now; at most 8 together on one node" in text

    sim.wait_for(figures, timeout=10)
    sim.finish_pod("training-run", NAMESPACE)
    sim.wait_for(
        lambda: "16 of 16 free now" in session.get(f"{hub.url}/hub/spawn", timeout=30).text,
        timeout=10,
    )
    sim.delete("Pod", "training-run", NAMESPACE)


# -- the REST API ------------------------------------------------------------------------------
def test_rest_spawn_mig_slice_then_stop_deletes_pod(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    sim = sim_of(cluster)
    hub.api("POST", "/users/alan")
    response = spawn_json(
        hub, "alan", {"image": "cpu", "gpu_type": "a100-1g", "gpus": 1, "cpu": 1, "memory": "1G"}
    )
    assert response.status_code in (201, 202), response.text
    hub.wait_for_server("alan", timeout=90)
    pod = pod_of(sim, "alan")
    assert pod is not None and pod["spec"]["nodeName"] == "a100-mig-0"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert "started" in server_answers(hub, "alan")
    hub.stop_server("alan")
    wait_pod_gone(sim, "alan")


def test_never_fits_is_refused_and_nothing_is_created(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    sim = sim_of(cluster)
    hub.api("POST", "/users/edsger")
    before = sim.requests
    response = spawn_json(hub, "edsger", {"gpu_type": "a100", "gpus": 12})
    assert response.status_code == 400
    assert response.json()["message"] == (
        "No node in this cluster has 12 NVIDIA A100 80GB GPUs (the most on one node is 8); ask for 8 or fewer."
    )
    assert pod_of(sim, "edsger") is None
    assert not hub.user_model("edsger")["servers"]
    # The refusal came from the watch cache: no pod was created, and no LIST was needed.
    assert sim.requests - before < 5
    session = hub.login("edsger")
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    page = session.post(
        f"{hub.url}/hub/spawn",
        data={"gpu_type": "a100", "gpus": "9", "cpu": "1", "memory": "1G", "_xsrf": xsrf},
        timeout=30,
    )
    assert "No node in this cluster has 9 NVIDIA A100 80GB GPUs" in page.text
    assert pod_of(sim, "edsger") is None


def test_progress_waits_for_gpus_in_words_then_starts(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    sim = sim_of(cluster)
    fillers = []
    for node in ("a100-0", "a100-1"):
        name = f"filler-{node}"
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox:1.36",
                            "resources": {"limits": {"nvidia.com/gpu": "7"}},
                        }
                    ],
                },
            },
            NAMESPACE,
        )
        fillers.append(name)
    sim.wait_for(
        lambda: all(
            (sim.get("Pod", n, NAMESPACE) or {}).get("status", {}).get("phase") == "Running"
            for n in fillers
        )
    )
    sim.set_pull_seconds("quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20", 0.5)
    sim.forget_images()
    hub.api("POST", "/users/barbara")
    response = spawn_json(
        hub,
        "barbara",
        {"image": "pytorch", "gpu_type": "a100", "gpus": 2, "cpu": 1, "memory": "1G"},
    )
    assert response.status_code == 202, response.text
    waiting = progress_messages(hub, "barbara", r"Waiting for 2 free")
    assert (
        "Waiting for 2 free NVIDIA A100 80GB GPUs on one node (2 free now, at most 1 on one node)"
        in waiting
    )
    sim.finish_pod(fillers[0], NAMESPACE)
    messages = progress_messages(hub, "barbara", r"^Server started")
    assert any(m == "2 NVIDIA A100 80GB GPUs reserved on node a100-0" for m in messages), messages
    assert (
        "Pulling image PyTorch 2 + CUDA 12 (this can take a few minutes the first time)" in messages
    )
    hub.wait_for_server("barbara", timeout=90)
    hub.stop_server("barbara")
    wait_pod_gone(sim, "barbara")
    for name in fillers:
        sim.delete("Pod", name, NAMESPACE, gracePeriodSeconds=0)


def test_unschedulable_fails_fast_with_the_reason(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    sim = sim_of(cluster)
    for node in ("a100-0", "a100-1"):
        sim.call(
            lambda node=node: sim.sim.store.mutate(
                sim.sim.store.by_kind("Node"),
                "",
                node,
                lambda o: o["spec"].update(unschedulable=True),
            )
        )
    try:
        hub.api("POST", "/users/john")
        started = time.monotonic()
        response = spawn_json(hub, "john", {"gpu_type": "a100", "gpus": 1})
        # Failing within JupyterHub's slow_spawn_timeout, the POST itself carries the reason.
        assert response.status_code == 503, response.text
        message = response.json()["message"]
        assert time.monotonic() - started < 20  # not start_timeout (60 s)
        assert message.startswith("No node in the cluster can run this server: ")
        assert "2 nodes cordoned for maintenance" in message
        hub.wait_for_server("john", ready=False, timeout=30)
        wait_pod_gone(sim, "john")
    finally:
        for node in ("a100-0", "a100-1"):
            sim.call(
                lambda node=node: sim.sim.store.mutate(
                    sim.sim.store.by_kind("Node"),
                    "",
                    node,
                    lambda o: o["spec"].pop("unschedulable", None),
                )
            )


def test_namespace_quota_refusal_is_said_plainly(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    """The chart's ResourceQuota caps the namespace's GPUs for all users together; when
    admission refuses the server's pod (403 exceeded quota) the user reads why in one sentence."""
    sim = sim_of(cluster)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpuhub-gpus"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "0"}},
    }
    sim.create(quota, NAMESPACE)
    try:
        hub.api("POST", "/users/grace")
        response = spawn_json(hub, "grace", {"gpu_type": "a100", "gpus": 1})
        assert response.status_code == 403, response.text
        assert response.json()["message"] == (
            "Kubernetes refused the server's pod: exceeded quota: gpuhub-gpus, requested: "
            "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=0, limited: "
            "requests.nvidia.com/gpu=0"
        )
        assert pod_of(sim, "grace") is None
        hub.wait_for_server("grace", ready=False, timeout=30)
    finally:
        sim.delete("ResourceQuota", "gpuhub-gpus", NAMESPACE)


# -- resilience ---------------------------------------------------------------------------------
def test_spawn_survives_500s_and_dropped_watches(
    hub: Hub, cluster: tuple[Path, KubeSimThread | None]
) -> None:
    sim = sim_of(cluster)
    hub.api("POST", "/users/radia")
    sim.fail_requests(500, count=2, method="POST", path="/pods")
    sim.forget_images()
    sim.set_pull_seconds("quay.io/jupyter/scipy-notebook:2025-10-20", 3.0)

    def while_pending() -> None:
        # Once the pod exists, and while its image is pulled: cut every watch, forget the
        # watch history (so reflectors must list again) and fail those lists a few times.
        sim.wait_for(lambda: pod_of(sim, "radia"), timeout=30)
        sim.fail_requests(
            500, count=3, method="GET", path=f"/api/v1/namespaces/{NAMESPACE}/pods", watch=False
        )
        sim.compact()
        sim.drop_watches(abort=True)

    faults = threading.Thread(target=while_pending)
    faults.start()
    assert spawn_json(hub, "radia", {"image": "cpu"}).status_code in (201, 202)
    faults.join()
    hub.wait_for_server("radia", timeout=90)
    assert "started" in server_answers(hub, "radia")
    # A dead server is noticed: the pod goes away behind the hub's back.
    sim.delete("Pod", "jupyter-radia", NAMESPACE, gracePeriodSeconds=0)
    sim.wait_for(
        lambda: not hub.user_model("radia")["servers"],
        timeout=60,
        message="hub still thinks radia's server runs",
    )
    assert pod_of(sim, "radia") is None


def test_hub_restart_finds_running_servers(
    cluster: tuple[Path, KubeSimThread | None], tmp_path: Path
) -> None:
    sim = sim_of(cluster)
    port, hub_port = free_port(), free_port()
    config = hub_config(f"c.JupyterHub.hub_port = {hub_port}\n")
    first = start_hub(tmp_path, config, port=port)
    try:
        first.api("POST", "/users/katherine")
        assert spawn_json(first, "katherine", {"image": "cpu"}).status_code in (201, 202)
        first.wait_for_server("katherine", timeout=90)
    finally:
        first.stop()
    assert (pod_of(sim, "katherine") or {}).get("status", {}).get("phase") == "Running"
    second = start_hub(tmp_path, config, port=port)
    try:
        model = second.wait_for_server("katherine", timeout=30)
        assert model["servers"][""]["ready"]
        assert "started" in server_answers(second, "katherine")
        second.stop_server("katherine")
        wait_pod_gone(sim, "katherine")
    finally:
        second.stop()


def test_form_without_a_reachable_cluster_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.kubesim import kubeconfig_text

    dead = tmp_path / "kubeconfig"
    dead.write_text(kubeconfig_text(f"http://127.0.0.1:{free_port()}"))
    monkeypatch.setenv("KUBECONFIG", str(dead))
    hub = start_hub(tmp_path / "hub", hub_config("c.GPUSpawner.capacity_wait = 1\n"))
    try:
        session = hub.login("ada")
        page = session.get(f"{hub.url}/hub/spawn", timeout=30)
        assert page.status_code == 200
        assert (
            "Live GPU availability cannot be shown right now (the cluster did not answer)."
            in page.text
        )
        assert not re.search(r"\d+ of \d+ free now", page.text)
        assert 'value="a100"' in page.text  # the choices are still there
    finally:
        hub.stop()
