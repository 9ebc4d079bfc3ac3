"""GPU reclaim on Kubernetes: a real JupyterHub with GPUSpawner on the test cluster, under the
Helm chart's RBAC for the hub (z2jh's ``hub`` ServiceAccount with gpuhub's capacity and cancel
roles; tests/support/hub/jobs_on_cluster.py), the hub's utilization from a real Prometheus
that scrapes a stand-in dcgm-exporter serving per-pod samples (DCGM_FI_DEV_GPU_UTIL with
namespace/pod labels), as the GPU Operator sets it up. An idle server is warned and stopped
(its pod goes), a busy one is kept; an admin cancels a job from the fleet page (its Job goes,
foreground). The servers run on the process node, so that they really answer the hub.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests

from gpuhub.core.holdings import Holding
from gpuhub.hub.monitor.utilization import PrometheusUtilization
from harness.cluster import (
    A100_PRODUCT,
    GPU_TOLERATION,
    KWOK_TOLERATION,
    Kube,
)
from harness.hub.process import API_TOKEN, Hub, spawn_json
from tests.support.hub.jobs_on_cluster import start_chart_hub
from tests.support.hub.prometheus import running_prometheus, serving_exposition

pytestmark = pytest.mark.e2e

# (namespace, pod) -> utilization percent of its one GPU; the test sets it.
SAMPLES: dict[tuple[str, str], float] = {}


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
def cluster(module_kube: Kube) -> Kube:
    return module_kube


@pytest.fixture(scope="module")
def hub(cluster: Kube, prometheus: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    extra = f"""
        from gpuhub.hub.web.api import configure_hub
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
    running = start_chart_hub(cluster, tmp_path_factory.mktemp("reclaim-kube"), extra)
    try:
        yield running
    finally:
        for name in ("bob", "carol"):
            running.api("DELETE", f"/users/{name}/server")
        running.stop()


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 90) -> Any:
    try:
        return Kube.wait_for(check, timeout, interval=0.3)
    except AssertionError:
        raise AssertionError(f"{what} did not happen\n{hub.log()[-4000:]}") from None


def server_pod(cluster: Kube, user: str) -> str | None:
    for pod in cluster.list("Pod"):
        notes = pod["metadata"].get("annotations") or {}
        if notes.get("hub.jupyter.org/username") == user:
            return str(pod["metadata"]["name"])
    return None


def start(hub: Hub, cluster: Kube, user: str, utilization: float) -> str:
    """A server on one of the process node's GPUs, whose utilization is ``utilization``."""
    cluster.require_local("the process node, where a server really starts")
    answer = spawn_json(hub, user, {"gpus": 1, "gpu_type": "local", "image": "pytorch"})
    assert answer.status_code in (201, 202), answer.text
    pod = wait_for(f"{user}'s pod", lambda: server_pod(cluster, user), hub)
    SAMPLES[(cluster.namespace, pod)] = utilization
    hub.wait_for_server(user, timeout=120)
    return str(pod)


def metrics(hub: Hub) -> str:
    return requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    ).text


def clock(hub: Hub, user: str) -> dict[str, Any] | None:
    answer = hub.api("GET", f"/gpuhub/reclaim/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()["servers"].get("")


def test_idle_pod_is_reclaimed_and_busy_one_kept(hub: Hub, cluster: Kube) -> None:
    idle_pod = start(hub, cluster, "bob", 60.0)
    busy_pod = start(hub, cluster, "carol", 60.0)
    # Both busy: the hub's samples from Prometheus say so (60 %), and nobody is warned.
    for user, pod in (("bob", idle_pod), ("carol", busy_pod)):
        sample = re.compile(
            rf'gpuhub_gpu_utilization\{{gpu="{pod}/\d+",server="",user="{user}"\}} 0\.6\b'
        )
        wait_for(f"{user}'s busy sample", lambda s=sample: s.search(metrics(hub)), hub)
    assert not (clock(hub, "bob") or {}).get("warned")
    SAMPLES[(cluster.namespace, idle_pod)] = 1.0  # 1 % of its GPU: idle from now on
    wait_for("bob's warning", lambda: (clock(hub, "bob") or {}).get("warned"), hub)
    wait_for("bob's stop", lambda: not hub.user_model("bob").get("servers"), hub)
    wait_for("bob's pod to go", lambda: server_pod(cluster, "bob") is None, hub)
    assert idle_pod not in {p["metadata"]["name"] for p in cluster.list("Pod")}
    home = hub.login("bob").get(f"{hub.url}/hub/home", timeout=30).text
    assert "Your server was stopped on" in home and "Your saved files are safe" in home
    # The GPU type's name, not the resource's ("local": "Simulated GPU", on the process node).
    assert "its 1 Simulated GPU stayed below 5% utilization" in home
    # carol's GPU was busy all along: sampled (so the source works) and never warned.
    state = clock(hub, "carol")
    assert state is not None and state["idle_seconds"] == 0 and not state["warned"]
    assert hub.user_model("carol")["servers"][""]["ready"]
    # The metrics are those of the monitor's last tick: one tick after bob's pod went.
    expected = (
        'gpuhub_idle_reclaims_total{gpu_type="Simulated GPU"} 1.0',
        'gpuhub_gpus_held{gpu_type="Simulated GPU",kind="server",user="carol"} 1.0',
        'gpuhub_gpus{gpu_type="Simulated GPU",state="held"} 1.0',
    )
    scraped = ""

    def figures() -> bool:
        nonlocal scraped
        scraped = metrics(hub)
        return all(line in scraped.splitlines() for line in expected)

    try:
        Kube.wait_for(figures, timeout=30, interval=0.3)
    except AssertionError:
        gpuhub = [line for line in scraped.splitlines() if line.startswith("gpuhub_")]
        raise AssertionError("\n".join(gpuhub)) from None


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
                    "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
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


def job_pods(cluster: Kube, job_id: str) -> list[dict[str, Any]]:
    return cluster.list("Pod", labels={"gpuhub.io/job-id": job_id})


def test_an_admin_cancels_a_cluster_job_from_the_fleet_page(hub: Hub, cluster: Kube) -> None:
    job_id = "train-1a2b3c"
    cluster.create(gpuhub_job(job_id, "carol"))
    # A GPU pod that gpuhub counts but is no Job, PyTorchJob or TFJob (a pipeline step).
    step = gpuhub_job("pipe-4d5e6f", "carol")["spec"]["template"]
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            **step,
            "metadata": {"name": "pipe-4d5e6f-step", **step["metadata"]},
        }
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
    assert "is no Job, PyTorchJob, TFJob or TrainJob that gpuhub made" in html_text(refused)
    done = cancel(f"carol/{job_id}", "the A100s are <b>reserved</b> for the workshop")
    assert done.status_code == 303, done.text[-2000:]
    wait_for("the Job to go", lambda: cluster.get("Job", job_id) is None, hub)
    assert not job_pods(cluster, job_id)
    # The page reads the hub's watch of the cluster, which sees the pods go a moment later.
    wait_for("the job's row to go", lambda: job_id not in rows(), hub)
    home = hub.login("carol").get(f"{hub.url}/hub/home", timeout=30).text
    assert f"Your job &#39;{job_id}&#39; was cancelled on" in home, home[-3000:]
    assert "by root: the A100s are &lt;b&gt;reserved&lt;/b&gt; for the workshop" in home
    cluster.delete("Pod", "pipe-4d5e6f-step")


def test_an_admin_cancels_a_trainjob_from_the_fleet_page(
    hub: Hub, cluster: Kube, tmp_path: Path
) -> None:
    """A TrainJob's two nodes (kwok's A100s) are one job row; cancel deletes the TrainJob, and
    its JobSet and pods go with it. The hub finds the TrainJob through the pods' JobSet
    (the chart's ``jobsets`` get), so it deletes exactly that object."""
    from gpuhub.jobs.k8s import manifests as m
    from tests.support.jobs_service import NOTEBOOK_OK, cluster_request, write_notebook

    write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK)
    request = cluster_request(tmp_path, kind="trainjob", workers=2, gpus=1, gpu_type="a100")
    settings = m.KubeJobSettings(namespace=cluster.namespace, job_image="img:1")
    job_id = "ddp-7h8j9k"
    cluster.create(m.workload(request, "carol", job_id, settings, key="k", created="now"))
    root = hub.login("root")

    def rows() -> list[str]:
        html = root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
        return re.findall(r'data-user="carol" data-kind="job" data-name="([^"]*)"', html)

    wait_for("one row for both nodes", lambda: len(job_pods(cluster, job_id)) == 2, hub)
    wait_for("the TrainJob's row", lambda: rows().count(job_id) == 1, hub)
    xsrf = root.cookies.get("_xsrf", path="/hub/")
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/cancel",
        data={"target": f"carol/{job_id}", "reason": "maintenance", "_xsrf": xsrf},
        timeout=60,
        allow_redirects=False,
    )
    said = re.findall(
        r"(?:Kubernetes refused|is no Job|has no job|being cancelled)[^<]*", done.text
    )
    assert done.status_code == 303, said or done.text[-2000:]
    jobset = "jobset.x-k8s.io/v1alpha2"
    wait_for(
        "the TrainJob, its JobSet and pods to go",
        lambda: (
            cluster.get("TrainJob", job_id, api_version="trainer.kubeflow.org/v1alpha1") is None
            and cluster.get("JobSet", job_id, api_version=jobset) is None
            and not job_pods(cluster, job_id)
        ),
        hub,
    )
    # The row goes at the monitor's next look once the pods' deletions reach its watch.
    wait_for("the row to go", lambda: job_id not in rows(), hub)


def html_text(answer: requests.Response) -> str:
    import html

    return html.unescape(answer.text)


def test_a_queued_job_without_pods_is_cancelled_through_its_grant(hub: Hub, cluster: Kube) -> None:
    """A job waiting in a Kueue queue has no pod; the ledger counts it by the jobs service's
    grant, and the fleet page's Cancel deletes the suspended Job in the hub's namespace."""
    job_id = "queued-7a8b9c"
    job = gpuhub_job(job_id, "carol")
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "gpus"
    job["spec"]["suspend"] = True
    cluster.create(job)
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
    wait_for("the Job to go", lambda: cluster.get("Job", job_id) is None, hub)
    # The grant went with the job (the ledger no longer counts it), so its row goes and
    # stays gone.
    holdings = hub.api("GET", "/gpuhub/holdings/carol").json()["holdings"]
    assert job_id not in {h["name"] for h in holdings}
    wait_for("the queued job's row to go", lambda: job_id not in rows(), hub)


def fleet_row(hub: Hub, session: requests.Session, user: str, name: str) -> str:
    """The fleet page's row of ``user``'s job ``name``, as HTML ("" while there is none)."""
    html = session.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    found = re.search(
        rf'<tr class="gpuhub-holder[^"]*" data-user="{user}" data-kind="job" '
        rf'data-name="{re.escape(name)}".*?</tr>',
        html,
        re.S,
    )
    return found.group(0) if found else ""


def granted(hub: Hub, user: str, job_id: str) -> None:
    """A GPU job the jobs service asked the ledger for, with no pod yet (queued, starting)."""
    grant = hub.api(
        "POST",
        "/gpuhub/grants",
        json={"user": user, "kind": "job", "name": job_id, "gpus": 1, "gpu_type": "A100"},
    )
    assert grant.status_code == 201, grant.text


def test_the_fleet_page_says_why_a_row_has_no_samples(
    hub: Hub, cluster: Kube, tmp_path: Path
) -> None:
    """A holding without utilization samples says why in the utilization column: with
    Prometheus, a job with no pod yet has nothing to sample; without a utilization source,
    the admin reads which setting is missing."""
    granted(hub, "carol", "waiting-1a2b3c")
    root = hub.login("root")
    row = wait_for("the job's row", lambda: fleet_row(hub, root, "carol", "waiting-1a2b3c"), hub)
    # A grant with no pod yet is not held: its row waits, and says it has no GPU to sample.
    assert "waiting for a node" in row and "no GPU yet" in row, row
    assert hub.api("DELETE", "/gpuhub/grants/carol/waiting-1a2b3c").status_code == 204

    extra = """
        from gpuhub.hub.web.api import configure_hub
        configure_hub(c)
        c.Authenticator.admin_users = {"root"}
        c.JupyterHub.load_roles.append(
            {"name": "grants", "services": ["gpuhub-test"], "scopes": ["custom:gpuhub:grants"]}
        )
        c.GPUSpawner.gpu_monitor_interval = 0.5
        """
    bare = start_chart_hub(cluster, tmp_path, extra)
    try:
        assert bare.api("POST", "/users/carol").status_code == 201
        granted(bare, "carol", "unwatched-4d5e6f")
        admin = bare.login("root")
        row = wait_for(
            "the job's row", lambda: fleet_row(bare, admin, "carol", "unwatched-4d5e6f"), bare
        )
        # Its grant has no pod yet: the row waits and has no GPU to sample.
        assert "waiting for a node" in row and "no GPU yet" in row, row
    finally:
        bare.stop()
    # A held row without samples says why: no source, no pod yet, or Prometheus has none.
    held = Holding("carol", "job", "j", 1, "A100", pods=(("ns", "pod-0"),))
    assert PrometheusUtilization().unsampled(held) == (
        "no utilization source configured: set prometheus_url"
    )
    source = PrometheusUtilization("http://127.0.0.1:9")
    assert source.unsampled(replace(held, pods=())).startswith("no pod to sample yet")
    assert source.unsampled(held) == "Prometheus has no samples for this pod yet"
