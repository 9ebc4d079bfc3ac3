"""Threat: a hostile or huge notebook output in a job's pod log (Kubernetes backend, on the test
cluster's process node, where the notebook really runs).

Without a shared home, the executed notebook comes back gzip+base64 in the pod's log, which
the user's notebook controls: it can print a gzip bomb, garbage between the markers, or more
than the kubelet keeps. The service must stay bounded, say what happened in the job's
message once (cached), and read only the tail of a log when asked for a tail.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
from typing import Any

import nbformat
import pytest
from kubernetes_asyncio import config

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.k8s.status import LOST_OUTPUT, parse_pod_log
from gpuhub.jobs.model import JobError
from gpuhub.jobs.run_notebook import OUTPUT_BEGIN, OUTPUT_END, RESULT_PREFIX
from tests.support.hostile import gzip_bomb
from tests.support.jobs_service import NOTEBOOK_OK, cluster_request, write_notebook

# A real kube-apiserver, controllers and operators (harness/cluster.py).
pytestmark = pytest.mark.e2e

MAX_OUTPUT = 4 * 1024 * 1024
SETTINGS = m.KubeJobSettings(
    namespace="default",
    job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0",
    max_output_bytes=MAX_OUTPUT,
)
OK_RESULT = RESULT_PREFIX + '{"status": "succeeded", "error": null, "failed_cell": null}\n'


def block(payload: bytes) -> str:
    encoded = base64.b64encode(payload).decode()
    lines = [encoded[i : i + 76] for i in range(0, len(encoded), 76)]
    return "\n".join(["", OUTPUT_BEGIN, *lines, OUTPUT_END, ""])


def notebook_log(payload: bytes, before: str = "epoch 1 loss 0.3\n") -> str:
    return before + block(payload) + OK_RESULT


# -- the parser, pure --------------------------------------------------------------------------
def test_threat_gzip_bomb_is_inflated_only_up_to_the_bound():
    parsed = parse_pod_log(
        notebook_log(gzip_bomb(64)),
        inflate=True,
        keep_notebook=True,
        max_output_bytes=MAX_OUTPUT,
    )
    assert parsed.notebook is None and not parsed.has_output
    assert parsed.output_problem is not None and "over the 4 MiB" in parsed.output_problem
    assert parsed.result == {"status": "succeeded", "error": None, "failed_cell": None}


def test_threat_corrupt_block_is_reported_not_raised():
    bad = "\n".join(["", OUTPUT_BEGIN, "not base64 at all!", OUTPUT_END, ""]) + OK_RESULT
    assert "corrupt" in str(parse_pod_log(bad, inflate=True).output_problem)
    truncated_gzip = gzip.compress(b'{"cells": []}' * 1000)[:-20]
    cut = parse_pod_log(notebook_log(truncated_gzip), inflate=True, keep_notebook=True)
    assert cut.notebook is None and "corrupt" in str(cut.output_problem)


def test_threat_rotated_log_loses_the_begin_marker_and_says_so():
    whole = notebook_log(gzip.compress(b'{"cells": []}'))
    rotated = whole[whole.index(OUTPUT_BEGIN) + len(OUTPUT_BEGIN) :]
    parsed = parse_pod_log(rotated, inflate=True)
    assert parsed.output_problem == LOST_OUTPUT
    assert "rotated away" in parsed.text
    # A tail that starts inside the block is just a tail: no verdict, no base64 shown.
    tail = parse_pod_log(rotated, tail=True)
    assert tail.output_problem is None and "executed notebook" in tail.text


def test_block_is_never_inflated_for_reading_a_log():
    parsed = parse_pod_log(notebook_log(gzip_bomb(8)))
    assert parsed.notebook is None and parsed.output_problem is None
    assert "epoch 1 loss 0.3" in parsed.text and "H4sI" not in parsed.text


# -- the backend, with the notebook run for real ----------------------------------------------------
# The job's pod runs on the process node: its notebook is the hostile party, printing what it
# likes into the pod's log (papermill logs every cell's output), before the runner prints the
# real executed notebook and its result line.
@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    return root


@pytest.fixture
async def backend(kube):
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    backend = KubernetesBackend(api, dataclasses.replace(SETTINGS, namespace=kube.namespace))
    try:
        yield backend
    finally:
        await backend.close()


class LogReads:
    """Counts the pod-log reads the backend makes and the tailLines it asks for."""

    def __init__(self, backend: KubernetesBackend) -> None:
        self.calls: list[dict[str, Any]] = []
        original = backend.core.read_namespaced_pod_log

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(kwargs)
            return original(*args, **kwargs)

        backend.core.read_namespaced_pod_log = counted


def printing(text: str) -> str:
    """A cell that prints ``text`` as it is (one write, so one log entry)."""
    return f"import sys\nsys.stdout.write({text!r})\nsys.stdout.flush()"


async def finished_job(backend, root, cells: list[str]) -> str:
    """A CPU-only job of a notebook with ``cells``, run to success on the process node."""
    write_notebook(root / "hostile.ipynb", ["x = 1", *cells])
    request = cluster_request(root, notebook="hostile.ipynb")
    record = await backend.submit(request, "alice", notebook=(root / "hostile.ipynb").read_bytes())
    deadline = asyncio.get_running_loop().time() + 120
    while (got := await backend.get("alice", record.id)).status != "succeeded":
        assert got.status in ("pending", "running"), (got.status, got.error, got.message)
        assert asyncio.get_running_loop().time() < deadline, f"the job stayed {got.status}"
        await asyncio.sleep(0.1)
    return record.id


async def test_threat_log_bomb_verdict_is_in_the_message_and_cached(backend, root):
    # A gzip bomb between forged markers, before the runner's real block.
    job_id = await finished_job(backend, root, [printing(notebook_log(gzip_bomb(64)))])
    # Listing and status never inflate; the user server's one output fetch does, bounded.
    assert (await backend.get("alice", job_id)).message is None
    with pytest.raises(JobError) as refused:
        await backend.output("alice", job_id)
    assert refused.value.status == 422 and "over the 4 MiB" in refused.value.message
    reads = LogReads(backend)
    for _ in range(5):  # the UI polls
        job = await backend.get("alice", job_id)
        assert job.status == "succeeded"
        assert job.message is not None and "over the 4 MiB" in job.message
        assert [j.message for j in await backend.list("alice") if j.id == job_id] == [job.message]
        with pytest.raises(JobError) as refused:
            await backend.output("alice", job_id)
        assert refused.value.status == 422 and refused.value.message == job.message
    assert reads.calls == []  # the verdict was reached once, before; never read again


async def test_threat_lost_output_is_reported(backend, root):
    # A log whose begin marker is gone reads as one the kubelet rotated: the end marker alone.
    job_id = await finished_job(backend, root, [printing(f"epoch 1\n{OUTPUT_END}\n")])
    assert (await backend.get("alice", job_id)).message == LOST_OUTPUT
    with pytest.raises(JobError) as refused:
        await backend.output("alice", job_id)
    assert refused.value.status == 422 and refused.value.message == LOST_OUTPUT


async def test_whole_output_has_no_message_and_comes_back(backend, root):
    # A forged but valid block of another notebook does not replace the executed one.
    forged = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    job_id = await finished_job(
        backend, root, [printing(notebook_log(gzip.compress(forged))), "print('the real one')"]
    )
    assert (await backend.get("alice", job_id)).message is None
    output = await backend.output("alice", job_id)
    assert output != forged
    executed = nbformat.reads(output.decode(), as_version=4)
    texts = [o.get("text", "") for c in executed.cells for o in c.get("outputs", [])]
    assert "the real one\n" in texts


async def test_threat_log_tail_reads_only_the_tail(kube, backend, root):
    lines = "".join(f"line {n}\n" for n in range(5000))
    job_id = await finished_job(backend, root, [printing(lines)])
    reads = LogReads(backend)
    text = await backend.logs("alice", job_id, tail=3)
    assert reads.calls[-1]["tail_lines"] == 3
    assert "line 4999" not in text and text.count("\n") <= 3
    # As many lines as the log has from "line 4999" on: that line, and none before it.
    [pod] = await asyncio.to_thread(kube.job_pods, job_id)
    raw = (await asyncio.to_thread(kube.logs, pod["metadata"]["name"])).splitlines()
    last = max(i for i, line in enumerate(raw) if line.endswith("line 4999"))
    text = await backend.logs("alice", job_id, tail=len(raw) - last)
    assert reads.calls[-1]["tail_lines"] == len(raw) - last
    assert "line 4999\n" in text and "line 4998" not in text


# -- the user's server, fetching the output from the service -----------------------------------------
async def test_threat_output_that_is_no_notebook_is_not_saved_and_said(tmp_path):
    from types import SimpleNamespace

    from gpuhub.jobs.remote import NOT_A_NOTEBOOK, HubServiceBackend

    backend = HubServiceBackend("http://127.0.0.1:9/services/gpuhub", "t", root_dir=str(tmp_path))
    fetched: list[str] = []

    async def fetch(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        fetched.append(path)
        return SimpleNamespace(body=b"[" * 5000 + b"]" * 5000)  # valid JSON? too deep; no cells

    backend._fetch = fetch  # type: ignore[method-assign]
    data = {
        "id": "train-x7k2p",
        "name": "train",
        "kind": "job",
        "backend": "kubernetes",
        "status": "succeeded",
        "owner": "mallory",
        "notebook": "train.ipynb",
        "created": "2026-01-01T00:00:00Z",
        "output_ready": True,
    }
    for _ in range(3):  # polled: fetched once, said every time
        record = await backend._local(dict(data))
        assert record.output is None and record.message == NOT_A_NOTEBOOK
    assert fetched == ["jobs/train-x7k2p/output"]
    assert not (tmp_path / "gpuhub-runs").exists()
