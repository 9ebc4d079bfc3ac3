"""The local backend end to end: real papermill, real kernels, real process trees."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from gpuhub.core.policy import Policy
from gpuhub.jobs import JobError, JobNotFound, JobRequest
from gpuhub.jobs.local import LocalBackend, server_gpu_ids
from tests.support.jupyter.notebooks import read_outputs, write_notebook

POLICY = Policy.from_config(
    gpu_types={"a100": {"display_name": "NVIDIA A100", "max_gpus": 4}},
    default_limits={"max_gpus": 4},
)
SHOW_ENV = (
    "import os\nprint('epochs', epochs, 'gpus', repr(os.environ['CUDA_VISIBLE_DEVICES']))\n"
    "print('cpu', os.environ['CPU_LIMIT'], 'memory', os.environ['MEM_LIMIT'])"
)


def request(root: Path, **body) -> JobRequest:
    return JobRequest.parse(body, policy=POLICY, root_dir=root)


async def until_final(backend: LocalBackend, job_id: str, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        record = await backend.get("ada", job_id)
        if record.is_final:
            return record
        assert time.monotonic() < deadline, f"{job_id} still {record.status}"
        await asyncio.sleep(0.2)


async def until(predicate, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    write_notebook(root / "exp" / "train.ipynb", SHOW_ENV, parameters="epochs = 1")
    return root


async def test_runs_with_parameters_and_this_servers_gpus(root):
    backend = LocalBackend(root, owner="ada", gpu_ids=["2", "5"])
    job = request(
        root, notebook="exp/train.ipynb", gpus=1, cpu=2, memory="3G", parameters={"epochs": 7}
    )
    await backend.check(job, "ada")
    record = await backend.submit(job, "ada")
    assert record.status == "running" and record.id.startswith("train-")
    done = await until_final(backend, record.id)
    assert done.status == "succeeded", done.error
    assert done.output == f"exp/gpuhub-runs/{record.id}/{record.id}.ipynb"
    output = read_outputs(root / done.output)
    # The parameter was injected, and the job saw only the first of the server's GPUs.
    assert "epochs 7 gpus '2'" in output
    assert "cpu 2 memory 3000000000" in output  # the request, for thread pools and the UI
    assert done.progress == {"done": 3, "total": 3}  # markdown, parameters, code (not injected)
    assert done.started and done.finished and done.elapsed() is not None
    logs = await backend.logs("ada", record.id)
    assert "epochs 7 gpus '2'" in logs and "Executing Cell" in logs
    assert "without encryption" not in logs  # the kernel's transport warning is not news
    assert (await backend.logs("ada", record.id, tail=1)).count("\n") <= 1
    # A CPU-only job sees no GPU at all.
    cpu = await backend.submit(request(root, notebook="exp/train.ipynb", gpus=0), "ada")
    cpu_done = await until_final(backend, cpu.id)
    assert "gpus ''" in read_outputs(root / cpu_done.output)
    assert [r.id for r in await backend.list("ada")] == [cpu.id, record.id]
    assert await backend.list("someone-else") == []


async def test_failure_reports_the_failing_cell(root):
    write_notebook(
        root / "bad.ipynb",
        "x = 1",
        "raise ValueError(f'loss diverged at epoch {epochs}')",
        "print('never')",
        parameters="epochs = 1",
    )
    backend = LocalBackend(root, owner="ada", gpu_ids=[])
    record = await backend.submit(
        request(root, notebook="bad.ipynb", parameters={"epochs": 3}), "ada"
    )
    done = await until_final(backend, record.id)
    assert done.status == "failed"
    # Cell 4 of the notebook as its author sees it: papermill's injected cell is not counted.
    assert done.error == "The notebook failed in cell 4: ValueError: loss diverged at epoch 3."
    assert done.failed_cell is not None
    assert done.failed_cell.ename == "ValueError"
    assert "raise ValueError" in done.failed_cell.source
    assert done.failed_cell.index == 4  # markdown, parameters, injected, x = 1, raise
    assert done.output and "never" not in read_outputs(root / done.output)
    assert "loss diverged at epoch 3" in await backend.logs("ada", record.id)


async def test_cancel_kills_the_whole_tree(root, tmp_path):
    pids = tmp_path / "pids.json"
    write_notebook(
        root / "long.ipynb",
        "import json, os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"json.dump({{'kernel': os.getpid(), 'child': child.pid}}, open({str(pids)!r}, 'w'))\n"
        "time.sleep(300)",
    )
    backend = LocalBackend(root, owner="ada", gpu_ids=[])
    record = await backend.submit(request(root, notebook="long.ipynb"), "ada")
    await until(pids.exists)
    await until(lambda: pids.stat().st_size > 0)
    await asyncio.sleep(0.2)
    started = json.loads(pids.read_text())
    tree = [record_pid(backend, record.id), started["kernel"], started["child"]]
    assert all(psutil.pid_exists(pid) for pid in tree)
    cancelled = await backend.cancel("ada", record.id)
    assert cancelled.status == "cancelled" and cancelled.finished is not None
    for pid in tree:
        assert not _running(pid), f"pid {pid} survived the cancel"
    # Cancelling again, or a finished job, changes nothing.
    assert (await backend.cancel("ada", record.id)).status == "cancelled"


def record_pid(backend: LocalBackend, job_id: str) -> int:
    pid = backend._jobs[job_id].pid
    assert pid is not None
    return pid


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_restarted_server_lists_old_jobs_and_follows_live_ones(root, tmp_path):
    write_notebook(root / "quick.ipynb", "print('quick')")
    marker = tmp_path / "started"
    write_notebook(
        root / "slow.ipynb", f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(300)"
    )
    first = LocalBackend(root, owner="ada", gpu_ids=[])
    quick = await first.submit(request(root, notebook="quick.ipynb"), "ada")
    await until_final(first, quick.id)
    slow = await first.submit(request(root, notebook="slow.ipynb"), "ada")
    await until(marker.exists)
    pid = record_pid(first, slow.id)
    await first.close()  # the server stops; the job does not

    second = LocalBackend(root, owner="ada", gpu_ids=[])
    listed = {r.id: r for r in await second.list("ada")}
    assert listed[quick.id].status == "succeeded"
    assert listed[slow.id].status == "running"
    # The job dies while nobody watches it: the next look marks it failed, with a reason.
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        proc.send_signal(signal.SIGKILL)
    await until(lambda: not _running(pid))
    failed = await second.get("ada", slow.id)
    assert failed.status == "failed"
    assert "ended without reporting a result" in failed.error

    third = LocalBackend(root, owner="ada", gpu_ids=[])
    assert (await third.get("ada", slow.id)).status == "failed"


SHOW_HOLDER_ENV = (
    "import json, os\n"
    "print('holder', json.dumps({k: v for k, v in os.environ.items() if k.startswith(("
    "'GPUHUB_GPU', 'CUDA_')) and k != 'CUDA_DEVICE_ORDER'}, sort_keys=True))"
)


async def test_a_job_on_a_share_of_a_gpu_holds_its_own_part_of_it(tmp_path):
    """The server's GPU, type and share reach the job as its own (gpuhub.core.holder_env):
    its part of the server's 8 GB, and the MPS daemon's limit for that part."""
    root = tmp_path / "home"
    write_notebook(root / "env.ipynb", SHOW_HOLDER_ENV)
    shared = Policy.from_config(
        gpu_types={"t4": {"display_name": "T4", "sharing": {"memory": "16G", "min": "1G"}}},
    )
    server = {
        **os.environ,
        "GPUHUB_GPUS": "1",
        "GPUHUB_GPU_TYPE": "t4",
        "GPUHUB_GPU_TYPE_NAME": "T4",
        "GPUHUB_GPU_SHARE": "1/2",
        "GPUHUB_GPU_MEMORY": str(8 * 10**9),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=7630M",
    }
    backend = LocalBackend(root, owner="ada", gpu_ids=["3"], gpu_type="t4", env=server)
    job = JobRequest.parse(
        {"notebook": "env.ipynb", "gpus": 1, "gpu_type": "t4", "gpu_memory": "4G"},
        policy=shared,
        root_dir=root,
    )
    await backend.check(job, "ada")
    done = await until_final(backend, (await backend.submit(job, "ada")).id)
    assert done.status == "succeeded", done.error
    line = next(x for x in read_outputs(root / done.output).splitlines() if "holder" in x)
    assert json.loads(line.split("holder ", 1)[1]) == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3815M",  # 4 GB in MiB, rounded up
        "CUDA_VISIBLE_DEVICES": "3",
        "GPUHUB_GPUS": "1",
        "GPUHUB_GPU_MEMORY": str(4 * 10**9),
        "GPUHUB_GPU_SHARE": "1/4",  # half of the server's half
        "GPUHUB_GPU_TYPE": "t4",
        "GPUHUB_GPU_TYPE_NAME": "T4",
    }


async def test_gpu_requests_beyond_this_server_are_refused(root):
    none = LocalBackend(root, owner="ada", gpu_ids=[])
    with pytest.raises(JobError) as caught:
        await none.check(request(root, notebook="exp/train.ipynb", gpus=1), "ada")
    assert caught.value.field == "gpus" and "This server has no GPU" in caught.value.message
    two = LocalBackend(root, owner="ada", gpu_ids=["0", "1"], gpu_type="a100")
    with pytest.raises(JobError, match=r"has 2 GPUs.*at most 2 \(you asked for 3\)"):
        await two.check(request(root, notebook="exp/train.ipynb", gpus=3), "ada")
    await two.check(request(root, notebook="exp/train.ipynb", gpus=2), "ada")
    assert two.request_defaults() == {"gpu_type": "a100"}
    assert not (root / "exp" / "gpuhub-runs").exists()


async def test_other_users_and_bad_ids_are_not_found(root):
    backend = LocalBackend(root, owner="ada", gpu_ids=[])
    for job_id in ("nope", "../../etc", "x" * 300):
        with pytest.raises(JobNotFound):
            await backend.get("ada", job_id)
    with pytest.raises(JobError) as caught:
        await backend.submit(request(root, notebook="exp/train.ipynb"), "mallory")
    assert caught.value.status == 403


def test_server_gpus_come_from_cuda_visible_devices():
    assert server_gpu_ids({"CUDA_VISIBLE_DEVICES": "1, 3"}) == ["1", "3"]
    assert server_gpu_ids({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert server_gpu_ids({"CUDA_VISIBLE_DEVICES": "GPU-abc,MIG-def"}) == ["GPU-abc", "MIG-def"]
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert isinstance(server_gpu_ids({}), list)  # NVML, or none without a driver
