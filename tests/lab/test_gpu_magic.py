"""``%gpu`` outside a Jupyter server: falls back to NVML in-process; bad arguments refused;
in a cluster job's pod, the job's own GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhub.jobs import run_notebook
from gpuhub_lab import gpu_magic
from harness import fake_nvml as fake
from harness.jupyter.server import SOURCE_PATHS
from tests.support.jupyter.notebooks import read_outputs, write_notebook

GIB = 2**30


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JPY_PARENT_PID", "GPUHUB_SERVER_URL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUHUB_NVML_MODULE", "harness.fake_nvml")


def test_without_a_server_it_reads_nvml_itself(no_server: None):
    scenario = fake.a100s(1, utilization=40, memory_used=8 * GIB)
    scenario.gpus[0].processes = [fake.FakeProcess(31337, 2 * GIB)]
    fake.install(scenario)
    report = gpu_magic.gpu("")
    assert report is not None
    text = repr(report)
    assert "GPU 0: NVIDIA A100-SXM4-80GB" in text
    assert "utilization 40%" in text and "8.0 GiB / 80.0 GiB" in text
    assert "pid 31337 (not a kernel of this server)" in text
    assert "Read NVML in this kernel" in text  # says why notebook names are missing
    html = report._repr_html_()
    assert "<table" in html and "2.0 GiB: pid 31337" in html


def test_no_gpu_says_why(no_server: None):
    fake.install(fake.Scenario(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND))
    report = gpu_magic.gpu("")
    assert repr(report).startswith("No GPU: No NVIDIA driver")
    assert "<b>No GPU</b>" in report._repr_html_()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "does not understand"),
        ("--watch soon", "takes a number of seconds"),
        ("--watch 0", "between 0 and 3600"),
    ],
)
def test_bad_arguments_are_one_sentence(no_server: None, line: str, message: str):
    with pytest.raises(ValueError, match=message):
        gpu_magic.gpu(line)


def test_in_a_job_it_shows_the_jobs_own_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's kernel (GPUHUB_JOB_ID) sees the job's GPUs, the first of its server's, named
    for the job; simulated GPUs are not "NVML" even when the server does not answer."""
    for name in ("JPY_PARENT_PID", "GPUHUB_SERVER_URL", "GPUHUB_NVML_MODULE"):
        monkeypatch.delenv(name, raising=False)
    # A local job is told its server's pid; this one's server does not answer.
    monkeypatch.setenv("GPUHUB_SERVER_PID", str(os.getpid()))
    monkeypatch.setenv("GPUHUB_JOB_ID", "train-abc123")
    monkeypatch.setenv("GPUHUB_SIMULATED_GPUS", "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("GPUHUB_GPUS", "1")
    monkeypatch.setenv("GPUHUB_GPU_TYPE_NAME", "Simulated GPU")
    text = repr(gpu_magic.gpu(""))
    assert text.startswith("GPU 1 (Simulated GPU) assigned to this job."), text
    assert "GPU 1: Simulated GPU" in text and "GPU 0:" not in text
    assert "NVML" not in text and "Read the simulated GPUs in this kernel" in text


def test_in_a_cluster_jobs_pod_it_shows_the_pods_gpus(tmp_path: Path) -> None:
    """A Kubernetes job's pod runs the notebook as every job does (the runner, papermill, a
    kernel whose parent is the runner, no Jupyter server): ``%gpu`` there shows the GPU the
    pod was given, read in the pod, not a complaint about the kernel's parent process."""
    scenario = fake.a100s(1, utilization=70, memory_used=3 * GIB)
    (tmp_path / "nvml.json").write_text(scenario.to_json())
    write_notebook(tmp_path / "train.ipynb", "%load_ext gpuhub_lab", "%gpu")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUHUB_", "JUPYTER", "JPY_", "CUDA_", "NVIDIA_"))
    }
    env.update(
        {
            # What the job's manifest gives its container (gpuhub.jobs.k8s.manifests): the
            # device plugin's GPU by UUID, gpuhub's count and type, and the run's files.
            "GPUHUB_INPUT": str(tmp_path / "train.ipynb"),
            "GPUHUB_OUTPUT": str(tmp_path / "out" / "train.ipynb"),
            "GPUHUB_CWD": str(tmp_path),
            "GPUHUB_JOB_ID": "train-abc123",
            "GPUHUB_GPUS": "1",
            "GPUHUB_GPU_TYPE": "a100",
            "GPUHUB_GPU_TYPE_NAME": "NVIDIA A100 80GB",
            "NVIDIA_VISIBLE_DEVICES": scenario.gpus[0].uuid,
            "GPUHUB_NVML_MODULE": "harness.fake_nvml",
            "GPUHUB_FAKE_NVML": str(tmp_path / "nvml.json"),
            "PYTHONPATH": os.pathsep.join(SOURCE_PATHS),
        }
    )
    ran = subprocess.run(
        [sys.executable, "-P", run_notebook.__file__],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    shown = read_outputs(tmp_path / "out" / "train.ipynb")
    assert "GPU 0 (NVIDIA A100 80GB) assigned to this job." in shown, shown
    assert "utilization 70%" in shown and "3.0 GiB / 80.0 GiB" in shown, shown
    assert "parent" not in shown and "did not answer" not in shown, shown


def test_a_dra_server_names_the_device_it_was_allocated() -> None:
    """``%gpu`` in a server whose GPU was claimed through DRA: the device the hub says it was
    allocated (the holdings' ``device_names``), after what the server was given."""
    from gpuhub_lab.gpu_magic import GPUReport

    data = {
        "available": False,
        "reason": "they cannot be read here.",
        "gpus": [],
        "assigned": {"devices": [0], "gpu_type": "A100 (DRA)", "share_text": None},
        "claimed": ["GPU 3 (A100-SXM4-80GB) on a100-7"],
    }
    report = GPUReport(data, own_pids=set())
    assert repr(report).startswith(
        "GPU 0 (A100 (DRA)) assigned to this server. Allocated: GPU 3 (A100-SXM4-80GB) on a100-7."
    )
    assert "Allocated: GPU 3 (A100-SXM4-80GB) on a100-7." in report._repr_html_()
