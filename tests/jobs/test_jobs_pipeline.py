"""Kind ``pipeline``: compiled by the real kfp compiler, run for real, submitted with the real
``kfp.Client`` against a recorded stand-in of the KFP v2beta1 REST API (tests/support/kfp_standin.py),
with the job's record kept as a ConfigMap on the test cluster (harness/cluster.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys

import nbformat
import pytest
import yaml
from kubernetes_asyncio import config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.model import JobError, JobNotFound
from gpuhub.jobs.pipeline import (
    NOT_CONFIGURED,
    KFPBackend,
    KFPSettings,
    compile_pipeline,
)
from gpuhub.k8s.labels import JOB_ID_LABEL, MANAGED_BY_LABEL
from tests.support.jobs_service import NOTEBOOK_OK, make_request, write_notebook
from tests.support.kfp_standin import KFPStandIn

# A real kube-apiserver, controllers and operators (harness/cluster.py).
pytestmark = pytest.mark.e2e

IMAGE = "ghcr.io/gpuhub/gpuhub-notebook:0.1.0"
SETTINGS = m.KubeJobSettings(job_image=IMAGE)


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    return root


def compiled(root, **body):
    request = make_request(root, kind="pipeline", **body)
    text = compile_pipeline(request, (root / "train.ipynb").read_bytes(), image=IMAGE)
    docs = list(yaml.safe_load_all(text))
    return request, text, docs


def executor(docs):
    executors = docs[0]["deploymentSpec"]["executors"]
    assert list(executors) == ["exec-run-notebook"]  # one step
    return executors["exec-run-notebook"]["container"]


def test_gpu_step_has_accelerator_image_command_and_placement(root):
    _, text, docs = compiled(root, gpus=2, gpu_type="a100", cpu=4, memory="16G", image="pytorch")
    assert text.startswith("# PIPELINE DEFINITION")
    container = executor(docs)
    assert container["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    assert container["command"][:2] == ["python", "-c"]
    assert "papermill.execute_notebook" in container["command"][2]
    assert container["args"] == [
        "{{$.inputs.parameters['notebook']}}",
        "{{$.inputs.parameters['parameters']}}",
        "{{$.outputs.artifacts['executed_notebook'].path}}",
    ]
    resources = container["resources"]
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert resources["accelerator"]["resourceCount"] == "2"
    assert resources["resourceCpuLimit"] == resources["resourceCpuRequest"] == "4"
    assert resources["resourceMemoryLimit"] == resources["resourceMemoryRequest"] == "16G"
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
        "exec-run-notebook"
    ]
    assert platform["nodeSelector"]["labels"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert platform["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    task = docs[0]["root"]["dag"]["tasks"]["run-notebook"]
    assert task["cachingOptions"] == {}  # caching off (kfp writes enableCache: false as {})


def test_cpu_step_hides_gpus_and_mig_uses_its_resource(root):
    _, _, docs = compiled(root, gpus=0)
    container = executor(docs)
    assert "accelerator" not in container["resources"]
    env = {e["name"]: e.get("value", "") for e in container["env"]}  # "" is left out
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert container["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    _, _, docs = compiled(root, gpus=1, gpu_type="a100-1g", image="registry.example.org/me/x:1")
    container = executor(docs)
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/mig-1g.10gb"
    assert container["image"] == "registry.example.org/me/x:1"


def test_compiled_step_runs_the_notebook(root, tmp_path):
    """The pipeline is self-contained: its defaults and command run the notebook as is."""
    _, _, docs = compiled(root, parameters={"epochs": 4})
    container = executor(docs)
    inputs = docs[0]["root"]["inputDefinitions"]["parameters"]
    notebook, parameters = inputs["notebook"]["defaultValue"], inputs["parameters"]["defaultValue"]
    assert json.loads(parameters) == {"epochs": 4}
    output = tmp_path / "artifact" / "executed_notebook"
    proc = subprocess.run(
        [sys.executable, "-c", container["command"][2], notebook, parameters, str(output)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert 'gpuhub-result: {"status": "succeeded"' in proc.stdout
    executed = nbformat.read(output, as_version=4)
    texts = [o.get("text", "") for c in executed.cells for o in c.get("outputs", [])]
    assert "result 8\n" in texts


def test_notebook_too_large_for_a_pipeline(root):
    big = nbformat.v4.new_notebook()
    big.cells.append(
        nbformat.v4.new_code_cell("x = '" + "".join(f"{i:x}" for i in range(60000)) + "'")
    )
    (root / "big.ipynb").write_text(nbformat.writes(big))
    request = make_request(root, notebook="big.ipynb", kind="pipeline")
    with pytest.raises(JobError) as caught:
        compile_pipeline(request, (root / "big.ipynb").read_bytes(), image=IMAGE)
    assert caught.value.status == 413
    assert "too large to travel inside a pipeline" in caught.value.message


# -- submission -------------------------------------------------------------------------------
@pytest.fixture
def kfp_api():
    standin = KFPStandIn()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture
async def kfp_backend(kube, kfp_api):
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    settings = KFPSettings(endpoint=kfp_api.url, ui_url="https://kubeflow.example.org/pipeline")
    backend = KFPBackend(api, dataclasses.replace(SETTINGS, namespace=kube.namespace), settings)
    try:
        yield backend
    finally:
        await api.close()


async def test_submit_follow_and_cancel_a_run(kube, kfp_api, kfp_backend, root):
    request = make_request(root, kind="pipeline", gpus=1, gpu_type="a100")
    notebook = (root / "train.ipynb").read_bytes()
    record = await kfp_backend.submit(request, "alice", notebook=notebook, key="k1")
    [run] = kfp_api.runs.values()
    assert record.url == f"https://kubeflow.example.org/pipeline/#/runs/details/{run['run_id']}"
    assert record.status == "pending" and record.kind == "pipeline"
    # What kfp.Client posted is the pipeline we compiled (and keep for download).
    # With a platform spec (node selector, tolerations) kfp.Client posts both, nested.
    spec = run["pipeline_spec"]["pipeline_spec"]
    container = spec["deploymentSpec"]["executors"]["exec-run-notebook"]["container"]
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    platform = run["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]
    assert platform["deploymentSpec"]["executors"]["exec-run-notebook"]["tolerations"]
    assert run["display_name"] == record.id
    kept = yaml.safe_load_all(await kfp_backend.pipeline_yaml("alice", record.id))
    assert next(kept)["deploymentSpec"] == spec["deploymentSpec"]
    assert [e["display_name"] for e in kfp_api.experiments.values()] == ["gpuhub-alice"]
    # The record is a ConfigMap in the service's namespace, as the apiserver keeps it.
    [kept_record] = await asyncio.to_thread(
        kube.list, "ConfigMap", labels={JOB_ID_LABEL: record.id}
    )
    assert kept_record["metadata"]["labels"][MANAGED_BY_LABEL] == "gpuhub"

    # Retried with the same key: the same run, not a second one.
    again = await kfp_backend.submit(request, "alice", notebook=notebook, key="k1")
    assert again.id == record.id and len(kfp_api.runs) == 1

    kfp_api.set_state(run["run_id"], "RUNNING")
    kfp_backend._state_cache.clear()
    running = await kfp_backend.get("alice", record.id)
    assert running.status == "running" and running.started is not None
    assert "run page" in await kfp_backend.logs("alice", record.id)
    with pytest.raises(JobNotFound):
        await kfp_backend.get("bob", record.id)
    assert await kfp_backend.list("bob") == []

    cancelled = await kfp_backend.cancel("alice", record.id)
    assert cancelled.status == "cancelled"
    assert ("POST", f"/apis/v2beta1/runs/{run['run_id']}:terminate") in kfp_api.requests
    assert [r.status for r in await kfp_backend.list("alice")] == ["cancelled"]


async def test_failed_run_says_why(kfp_api, kfp_backend, root):
    request = make_request(root, kind="pipeline")
    record = await kfp_backend.submit(
        request, "alice", notebook=(root / "train.ipynb").read_bytes()
    )
    [run_id] = kfp_api.runs
    kfp_api.set_state(run_id, "FAILED", error="task run-notebook failed")
    kfp_backend._state_cache.clear()
    failed = await kfp_backend.get("alice", record.id)
    assert failed.status == "failed"
    assert failed.error == "The pipeline run failed: task run-notebook failed"


async def test_rejected_run_leaves_no_record(kube, kfp_api, kfp_backend, root):
    kfp_api.fail("POST", "/apis/v2beta1/runs", status=503, count=5)
    request = make_request(root, kind="pipeline")
    with pytest.raises(JobError) as caught:
        await kfp_backend.submit(request, "alice", notebook=(root / "train.ipynb").read_bytes())
    assert caught.value.status == 502 and "nothing was left behind" in caught.value.message
    managed = {MANAGED_BY_LABEL: "gpuhub"}
    assert await asyncio.to_thread(kube.list, "ConfigMap", labels=managed) == []


async def test_not_configured_is_said_plainly(kube, root):
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    try:
        settings = dataclasses.replace(SETTINGS, namespace=kube.namespace)
        backend = KFPBackend(api, settings, KFPSettings())
        with pytest.raises(JobError) as caught:
            await backend.submit(
                make_request(root, kind="pipeline"),
                "alice",
                notebook=(root / "train.ipynb").read_bytes(),
            )
        assert caught.value.status == 422 and caught.value.message == NOT_CONFIGURED
        # Compiling needs no endpoint.
        assert backend.compile(
            make_request(root, kind="pipeline"), (root / "train.ipynb").read_bytes()
        )
    finally:
        await api.close()
