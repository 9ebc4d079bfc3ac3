"""GPU reclaim on Kubernetes: a real JupyterHub with GPUSpawner on kubesim, the hub's
utilization from a real Prometheus that scrapes a stand-in dcgm-exporter serving per-pod
samples (DCGM_FI_DEV_GPU_UTIL with namespace/pod labels), as the GPU Operator sets it up.
An idle server is warned and stopped (its pod goes), a busy one is kept; an admin cancels a
job from the fleet page (its Job goes, foreground)."""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from tests.kubesim import KubeSimThread
from tests.kubesim.pytest_plugin import A100_PRODUCT, hub_cluster
from tests.support.hub.kube import GPU_TOLERATION, NAMESPACE, hub_config
from tests.support.hub.process import API_TOKEN, Hub, spawn_json, start_hub
from tests.support.hub.prometheus import running_prometheus, serving_exposition

pytestmark = pytest.mark.e2e

# (namespace, pod) -> utilization percent of its one GPU; the test sets it.
SAMPLES: dict[tuple[str, str], float] = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimThread]:
    with hub_cluster(tmp_path_factory.mktemp("kubesim") / "kubeconfig") as sim:
        yield sim


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    with serving_exposition(dcgm_exposition) as target:
        yield target


def dcgm_exposition() -> str:
    """dcgm-exporter's utilization of each pod's one GPU, as the test set it in SAMPLES."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for i, ((namespace, pod), util) in enumerate(sorted(SAMPLES.items())):
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}",namespace="{namespace}",'
            f'pod="{pod}",container="notebook"}} {util}'
        )
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(exporter: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    scrape = {
        "job_name": "dcgm-exporter",
        "honor_labels": True,
        "static_configs": [{"targets": [exporter]}],
    }
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), [scrape]) as url:
        yield url


@pytest.fixture(scope="module")
def hub(
    cluster: KubeSimThread, prometheus: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    extra = textwrap.dedent(
        f"""
        from gpuhub.hub_api import configure_hub
        configure_hub(c)
        c.Authenticator.allowed_users = {{"bob", "carol", "root"}}
        c.Authenticator.admin_users = {{"root"}}
        # The test asks for grants as the jobs service does (a queued job's GPUs).
        c.JupyterHub.load_roles.append(
            {{"name": "grants", "services": ["gpuhub-test"], "scopes": ["custom:gpuhub:grants"]}}
        )
        c.GPUSpawner.prometheus_url = {prometheus!r}
        c.GPUSpawner.gpu_monitor_interval = 0.5
        c.GPUSpawner.gpu_idle_reclaim = {{"after": 4, "utilization_below": 0.05, "warn": 4}}
        """
    )
    running = start_hub(tmp_path_factory.mktemp("reclaim-kube-hub"), hub_config(extra))
    try:
        yield running
    finally:
        for name in ("bob", "carol"):
            running.api("DELETE", f"/users/{name}/server")
        running.stop()


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} did not happen\n{hub.log()[-4000:]}"
        time.sleep(0.3)


def server_pod(cluster: KubeSimThread, user: str) -> str | None:
    for pod in cluster.list("Pod", NAMESPACE):
        notes = pod["metadata"].get("annotations") or {}
        if notes.get("hub.jupyter.org/username") == user:
            return str(pod["metadata"]["name"])
    return None


def start(hub: Hub, cluster: KubeSimThread, user: str, utilization: float) -> str:
    answer = spawn_json(hub, user, {"gpus": 1, "gpu_type": "a100", "image": "pytorch"})
    assert answer.status_code in (201, 202), answer.text
    pod = wait_for(f"{user}'s pod", lambda: server_pod(cluster, user), hub)
    SAMPLES[(NAMESPACE, pod)] = utilization
    hub.wait_for_server(user, timeout=120)
    return str(pod)


def clock(hub: Hub, user: str) -> dict[str, Any] | None:
    answer = hub.api("GET", f"/gpuhub/reclaim/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()["servers"].get("")


def test_idle_pod_is_reclaimed_and_busy_one_kept(hub: Hub, cluster: KubeSimThread) -> None:
    idle_pod = start(hub, cluster, "bob", 60.0)
    start(hub, cluster, "carol", 60.0)
    time.sleep(2)  # a few ticks while both are busy
    assert not (clock(hub, "bob") or {}).get("warned")
    SAMPLES[(NAMESPACE, idle_pod)] = 1.0  # 1 % of its GPU: idle from now on
    wait_for("bob's warning", lambda: (clock(hub, "bob") or {}).get("warned"), hub)
    wait_for("bob's stop", lambda: not hub.user_model("bob").get("servers"), hub)
    wait_for("bob's pod to go", lambda: server_pod(cluster, "bob") is None, hub)
    assert idle_pod not in {p["metadata"]["name"] for p in cluster.list("Pod", NAMESPACE)}
    home = hub.login("bob").get(f"{hub.url}/hub/home", timeout=30).text
    assert "Your server was stopped on" in home and "Your files are safe" in home
    assert "its 1 NVIDIA A100 80GB GPU stayed below 5% utilization" in home  # not the resource
    # carol's GPU was busy all along: sampled (so the source works) and never warned.
    state = clock(hub, "carol")
    assert state is not None and state["idle_seconds"] == 0 and not state["warned"]
    assert hub.user_model("carol")["servers"][""]["ready"]
    metrics = requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    ).text
    assert 'gpuhub_idle_reclaims_total{gpu_type="NVIDIA A100 80GB"} 1.0' in metrics
    assert 'gpuhub_gpus_held{gpu_type="NVIDIA A100 80GB",kind="server",user="carol"} 1.0' in (
        metrics
    )
    assert re.search(r'gpuhub_gpus\{gpu_type="NVIDIA A100 80GB",state="held"\} 1\.0', metrics)


def gpuhub_job(job_id: str, user: str) -> dict[str, Any]:
    """A Job as gpuhub's jobs service makes it (its labels and annotations), on one A100."""
    labels = {
        "app.kubernetes.io/managed-by": "gpuhub",
        "gpuhub.io/job-id": job_id,
        "gpuhub.io/user": user,
        "gpuhub.io/kind": "job",
    }
    meta = {"labels": labels, "annotations": {"gpuhub.io/username": user}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_id, **meta},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": meta,
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": A100_PRODUCT},
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "notebook",
                            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20",
                            "command": ["sleep", "infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ],
                },
            },
        },
    }


def job_pods(cluster: KubeSimThread, job_id: str) -> list[dict[str, Any]]:
    return cluster.list("Pod", NAMESPACE, labels={"gpuhub.io/job-id": job_id})


def test_an_admin_cancels_a_cluster_job_from_the_fleet_page(
    hub: Hub, cluster: KubeSimThread
) -> None:
    job_id = "train-1a2b3c"
    cluster.create(gpuhub_job(job_id, "carol"), NAMESPACE)
    # A GPU pod that gpuhub counts but is no Job, PyTorchJob or TFJob (a pipeline step).
    step = gpuhub_job("pipe-4d5e6f", "carol")["spec"]["template"]
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            **step,
            "metadata": {"name": "pipe-4d5e6f-step", **step["metadata"]},
        },
        NAMESPACE,
    )
    root = hub.login("root")

    def rows() -> set[str]:
        html = root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
        return set(re.findall(r'data-user="carol" data-kind="job" data-name="([^"]*)"', html))

    wait_for("the job rows", lambda: {job_id, "pipe-4d5e6f"} <= rows(), hub)
    xsrf = root.cookies.get("_xsrf", path="/hub/")

    def cancel(target: str, reason: str) -> requests.Response:
        return root.post(
            f"{hub.url}/hub/gpuhub/fleet/cancel",
            data={"target": target, "reason": reason, "_xsrf": xsrf},
            timeout=60,
            allow_redirects=False,
        )

    refused = cancel("carol/pipe-4d5e6f", "stuck")
    assert refused.status_code == 409, refused.text[-2000:]
    assert "is no Job, PyTorchJob or TFJob that gpuhub made" in html_text(refused)
    done = cancel(f"carol/{job_id}", "the A100s are <b>reserved</b> for the workshop")
    assert done.status_code == 303, done.text[-2000:]
    wait_for("the Job to go", lambda: cluster.get("Job", job_id, NAMESPACE, "batch") is None, hub)
    assert not job_pods(cluster, job_id)
    assert job_id not in rows()
    home = hub.login("carol").get(f"{hub.url}/hub/home", timeout=30).text
    assert f"Your job &#39;{job_id}&#39; was cancelled on" in home, home[-3000:]
    assert "by root: the A100s are &lt;b&gt;reserved&lt;/b&gt; for the workshop" in home
    cluster.delete("Pod", "pipe-4d5e6f-step", NAMESPACE)


def html_text(answer: requests.Response) -> str:
    import html

    return html.unescape(answer.text)


def test_a_queued_job_without_pods_is_cancelled_through_its_grant(
    hub: Hub, cluster: KubeSimThread
) -> None:
    """A job waiting in a Kueue queue has no pod; the ledger counts it by the jobs service's
    grant, and the fleet page's Cancel deletes the suspended Job in the hub's namespace."""
    job_id = "queued-7a8b9c"
    job = gpuhub_job(job_id, "carol")
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "gpus"
    job["spec"]["suspend"] = True
    cluster.create(job, NAMESPACE)
    grant = hub.api(
        "POST",
        "/gpuhub/grants",
        json={"user": "carol", "kind": "job", "name": job_id, "gpus": 1, "gpu_type": "A100"},
    )
    assert grant.status_code == 201, grant.text
    root = hub.login("root")

    def rows() -> set[str]:
        html = root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
        return set(re.findall(r'data-user="carol" data-kind="job" data-name="([^"]*)"', html))

    wait_for("the queued job's row", lambda: job_id in rows(), hub)
    assert not job_pods(cluster, job_id)
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/cancel",
        data={
            "target": f"carol/{job_id}",
            "reason": "queue drained for maintenance",
            "_xsrf": root.cookies.get("_xsrf", path="/hub/"),
        },
        timeout=60,
        allow_redirects=False,
    )
    assert done.status_code == 303, html_text(done)[-2000:]
    wait_for("the Job to go", lambda: cluster.get("Job", job_id, NAMESPACE, "batch") is None, hub)
    time.sleep(2)  # a few monitor ticks: the grant went with the job, so its row stays gone
    assert job_id not in rows()
    holdings = hub.api("GET", "/gpuhub/holdings/carol").json()["holdings"]
    assert job_id not in {h["name"] for h in holdings}
