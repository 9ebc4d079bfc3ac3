"""Threat: hostile callers and hostile notebooks against the shared ``gpuhub`` jobs service.

The service runs as its own process (``python -m gpuhub.service``) behind a real JupyterHub,
on the test cluster under the chart's RBAC, exactly as in tests/jobs/test_jobs_service.py
(tests/support/hub/jobs_on_cluster.py). One user must not be able to make it answer 5xx, read
a body before knowing who sent it, or exhaust its memory with what their notebook prints.
"""

from __future__ import annotations

import inspect
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhub.core.options import FIELDS
from gpuhub.jobs.model import JOB_FIELDS
from gpuhub.jobs.run_notebook import OUTPUT_BEGIN, OUTPUT_END
from harness.cluster import Kube
from tests.support.hostile import Deep, encode, gzip_bomb, json_values, text
from tests.support.hub.jobs_on_cluster import JobsOnCluster, jobs_on_cluster
from tests.support.jobs_service import NOTEBOOK_OK, write_notebook

pytestmark = pytest.mark.e2e

MAX_NOTEBOOK = 256 * 1024
BODY_CAP = MAX_NOTEBOOK + 64 * 1024
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Service:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def status_kb(self, key: str) -> int:
        """``VmRSS``/``VmHWM`` (peak) of the service process, in KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {key} in /proc/{self.proc.pid}/status")


@pytest.fixture(scope="module")
def jobs(module_kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsOnCluster]:
    config = {
        "gpu_quota": {"default": 2, "groups": {"staff": 8}},
        "max_notebook_bytes": MAX_NOTEBOOK,
        # max_output_bytes: the default (64 MiB), as the chart ships it.
    }
    with jobs_on_cluster(
        module_kube,
        tmp_path_factory.mktemp("threat-service"),
        users={"mallory": ["staff"]},
        service_config=config,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def service(jobs: JobsOnCluster) -> Service:
    return Service(jobs.url, jobs.service.proc, jobs.service.log_path)


@pytest.fixture(scope="module")
def cluster(jobs: JobsOnCluster) -> Kube:
    return jobs.kube


@pytest.fixture(scope="module")
def token(jobs: JobsOnCluster) -> str:
    return jobs.token("mallory")


@pytest.fixture(scope="module")
def notebook_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_notebook(tmp_path_factory.mktemp("nb") / "train.ipynb", NOTEBOOK_OK).read_text()


def call(service: Service, method: str, path: str, token: str | None, **kw: Any) -> Any:
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    if token:
        headers["Authorization"] = f"token {token}"
    return requests.request(method, service.url + path, headers=headers, timeout=60, **kw)


def assert_not_5xx(response: Any, sent: Any) -> None:
    assert response.status_code < 500, (sent, response.status_code, response.text[:300])
    if response.status_code >= 400 and "json" in response.headers.get("Content-Type", ""):
        assert response.json()["message"], response.text


# -- no 5xx on any input -----------------------------------------------------------------------------
def test_threat_lone_surrogate_in_notebook_content_is_400(service, token, notebook_text):
    body = {"notebook": "train.ipynb", "notebook_content": notebook_text[:-2] + '"\ud800"}'}
    response = call(service, "POST", "jobs", token, data=encode(body))
    assert response.status_code == 400, response.text
    said = "The notebook's content contains text that is not valid Unicode (a lone surrogate)."
    assert response.json() == {
        "message": said,
        "field": "notebook_content",
        "errors": [{"field": "notebook_content", "message": said}],
    }


def test_threat_deep_nesting_and_odd_digits_are_400(service, token, notebook_text):
    base = {"notebook": "train.ipynb", "notebook_content": notebook_text}
    for extra, field in (
        ({"parameters": {"x": Deep(3000)}}, "body"),
        ({"gpus": "\u00b2"}, "gpus"),
        ({"kind": "tfjob", "workers": "\u00b2"}, "workers"),
        ({"gpus": "2"}, "gpus"),
    ):
        response = call(service, "POST", "jobs", token, data=encode({**base, **extra}))
        assert (response.status_code, response.json()["field"]) == (400, field), response.text
    tail = call(service, "GET", "jobs/some-job/logs?tail=%C2%B2", token)
    assert (tail.status_code, tail.json()["field"]) == (400, "tail")


@PROPERTY
@given(field=st.sampled_from((*FIELDS, *JOB_FIELDS, "notebook_content")), value=json_values)
def test_threat_any_json_in_any_field_of_a_submit_is_not_a_5xx(
    service, token, notebook_text, field, value
):
    body = {"notebook": "train.ipynb", "notebook_content": notebook_text, field: value}
    assert_not_5xx(call(service, "POST", "jobs", token, data=encode(body)), body)
    assert_not_5xx(call(service, "POST", "jobs/pipeline.yaml", token, data=encode(body)), body)


@PROPERTY
@given(body=json_values)
def test_threat_any_json_body_is_not_a_5xx(service, token, body):
    assert_not_5xx(call(service, "POST", "jobs", token, data=encode(body)), body)


@PROPERTY
@given(job_id=text, tail=text)
def test_threat_any_job_id_or_tail_is_not_a_5xx(service, token, job_id, tail):
    quoted = quote(job_id.encode("utf-8", "surrogatepass"), safe="")
    tail_arg = quote(tail.encode("utf-8", "surrogatepass"))
    for path in (f"jobs/{quoted}", f"jobs/{quoted}/logs?tail={tail_arg}", f"jobs/{quoted}/output"):
        assert_not_5xx(call(service, "GET", path, token), path)


# -- body caps before authentication ---------------------------------------------------------------
def raw_request(service: Service, head: str, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``) on a plain socket; return what came back before close."""
    url = urlparse(service.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + body)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_threat_oversized_body_is_413_before_authentication_and_unread(service):
    declared = 20 * 1024 * 1024 * 1024  # 20 GiB declared; not one byte of it is sent
    head = (
        "POST /services/gpuhub/jobs HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    )
    started = time.monotonic()
    answer = raw_request(service, head)
    assert time.monotonic() - started < 10  # answered at once: the server did not wait for it
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 413 "), answer[:200]
    message = json.loads(rest.partition(b"\r\n\r\n")[2])
    said = "The request body is over the 320 KiB this API takes (the notebook limit plus 64 KiB)."
    assert message == {
        "message": said,
        "field": "body",
        "errors": [{"field": "body", "message": said}],
    }
    assert requests.get(service.url + "health", timeout=10).ok


def test_threat_undeclared_chunked_body_is_cut_at_the_cap(service, token):
    head = (
        "POST /services/gpuhub/jobs HTTP/1.1\r\nHost: localhost\r\n"
        f"Authorization: token {token}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(BODY_CAP // 65536 + 4))
    answer = raw_request(service, head, body + b"0\r\n\r\n")
    assert not answer.startswith(b"HTTP/1.1 2"), answer[:200]
    assert requests.get(service.url + "health", timeout=10).ok


def test_body_just_under_the_cap_is_read(service, token, notebook_text):
    padding = "x" * (MAX_NOTEBOOK - len(notebook_text) - 1000)
    content = notebook_text.replace('"cells": [', f'"padding": "{padding}", "cells": [', 1)
    body = {"notebook": "train.ipynb", "notebook_content": content, "kind": "nope"}
    response = call(service, "POST", "jobs", token, data=encode(body))
    assert response.status_code == 400 and response.json()["field"] == "kind", response.text


# -- bounded work per request ----------------------------------------------------------------------
# A hostile notebook: it prints 4 MB of chatter, then a fake executed-notebook block holding a
# gzip bomb (1.2 GiB inflated), into its pod's log, before the runner prints the real block.
BOMB_NOTEBOOK = "\n".join(
    [
        "import base64, struct, zlib",
        "",
        inspect.getsource(gzip_bomb),
        "encoded = base64.b64encode(gzip_bomb(1200)).decode()",
        "bomb = [encoded[i : i + 76] for i in range(0, len(encoded), 76)]",
        'chatter = [f"epoch {n} loss 0.{n % 97:02d} " + "." * 60 for n in range(30_000)]',
        f"print('\\n'.join([*chatter, {OUTPUT_BEGIN!r}, *bomb, {OUTPUT_END!r}]))",
    ]
)


def test_threat_log_bomb_does_not_kill_service(service, cluster, token, tmp_path):
    cluster.require_local("the process node, where the job's pod really runs")
    before_mb = service.status_kb("VmHWM") / 1024
    notebook = write_notebook(tmp_path / "bomb.ipynb", ["", BOMB_NOTEBOOK]).read_text()
    body = {"notebook": "bomb.ipynb", "notebook_content": notebook, "name": "bomb"}
    # CPU only: the job's pod really runs on the process node.
    created = call(service, "POST", "jobs", token, data=encode(body))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]

    def ended() -> dict[str, Any] | None:
        job = call(service, "GET", f"jobs/{job_id}", token).json()
        assert job["status"] in ("pending", "running", "succeeded"), job
        return job if job["status"] == "succeeded" else None

    cluster.wait_for(ended, timeout=120, interval=0.5)
    (pod,) = cluster.job_pods(job_id)
    log = cluster.logs(pod["metadata"]["name"])
    assert len(log) >= 4_000_000 and log.count(OUTPUT_BEGIN) == 2  # a 4 MB log, two blocks
    # The user's server fetches the output once (bounded inflation: 422 and the verdict);
    # from then on the verdict is the job's message. The UI polls, and retries, many times.
    first = call(service, "GET", f"jobs/{job_id}/output", token)
    assert first.status_code == 422, first.text
    job = call(service, "GET", f"jobs/{job_id}", token).json()
    assert job["message"] == first.json()["message"]
    for _ in range(10):
        listed = call(service, "GET", "jobs", token).json()["jobs"]
        assert [j["message"] for j in listed if j["id"] == job_id] == [job["message"]]
        tail = call(service, "GET", f"jobs/{job_id}/logs?tail=50", token).json()["logs"]
        assert "H4sI" not in tail and len(tail.splitlines()) <= 50
        output = call(service, "GET", f"jobs/{job_id}/output", token)
        assert output.status_code == 422 and output.json()["message"] == job["message"]
    assert "over the 64 MiB" in job["message"] and "jobs.maxOutputBytes" in job["message"]
    peak_mb = service.status_kb("VmHWM") / 1024
    print(f"service peak RSS: {before_mb:.0f} MB before the log bomb, {peak_mb:.0f} MB after")
    assert peak_mb < 300, f"the service's memory peaked at {peak_mb:.0f} MB"
    assert service.proc.poll() is None and requests.get(service.url + "health", timeout=10).ok
