"""``%gpu`` outside a Jupyter server: falls back to NVML in-process; bad arguments refused."""

from __future__ import annotations

import pytest

from gpuhub_lab import gpu_magic
from tests.support import fake_nvml as fake

GIB = 2**30


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JPY_PARENT_PID", "GPUHUB_SERVER_URL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUHUB_NVML_MODULE", "tests.support.fake_nvml")


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
    for name in ("JPY_PARENT_PID", "GPUHUB_SERVER_URL", "GPUHUB_SERVER_PID", "GPUHUB_NVML_MODULE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUHUB_JOB_ID", "train-abc123")
    monkeypatch.setenv("GPUHUB_SIMULATED_GPUS", "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("GPUHUB_GPUS", "1")
    monkeypatch.setenv("GPUHUB_GPU_TYPE_NAME", "Simulated GPU")
    text = repr(gpu_magic.gpu(""))
    assert text.startswith("GPU 1 (Simulated GPU) assigned to this job."), text
    assert "GPU 1: Simulated GPU" in text and "GPU 0:" not in text
    assert "NVML" not in text and "Read the simulated GPUs in this kernel" in text
