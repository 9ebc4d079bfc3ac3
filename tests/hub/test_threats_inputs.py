"""Threat: hostile input to every surface a user reaches; the answer is 2xx or 4xx, never 5xx.

Real servers: a jupyter_server with the gpuhub_lab extension (the user's ``/gpuhub/api/*``,
in Kubernetes mode with a recording remote backend so that valid submits run nothing), and
a JupyterHub with LocalGPUSpawner (``POST /hub/api/users/NAME/server``, the spawn REST path).
The jobs service has its own file (tests/jobs/test_threats_service.py). Example counts are kept
modest: each example is a real HTTP round trip.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhub.core.options import FIELDS
from gpuhub.jobs.model import JOB_FIELDS
from gpuhub.jobs.policy_env import policy_env
from harness.hub.process import JUPYTERHUB_MAJOR, Hub, start_hub
from harness.jupyter.server import JupyterServer, jupyter_server
from tests.support.hostile import NASTY, Deep, encode, json_values, text
from tests.support.jupyter.notebooks import write_notebook
from tests.support.policies import DESIGN_CONFIG

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BODY_FIELDS = (*FIELDS, *JOB_FIELDS)


def assert_one_sentence_4xx(response: Any, sent: Any) -> None:
    assert response.status_code < 500, (sent, response.status_code, response.text[:300])
    if response.status_code >= 400 and response.headers.get("Content-Type", "").startswith(
        "application/json"
    ):
        answer = response.json()
        assert isinstance(answer.get("message"), str) and answer["message"], answer


# -- the user's server: /gpuhub/api/jobs ------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    tmp = tmp_path_factory.mktemp("threat-server")
    root = tmp / "home"
    write_notebook(root / "train.ipynb", "print('ok')")
    env = {
        **policy_env(DESIGN_CONFIG, ["staff"]),
        "GPUHUB_JOBS_URL": "http://127.0.0.1:9/services/gpuhub/",
        "JUPYTERHUB_API_TOKEN": "user-token",
        "JUPYTERHUB_USER": "ada",
        "GPUHUB_TEST_FORWARD_LOG": str(tmp / "forwarded.jsonl"),
    }
    config = 'c.GPUHubJobs.remote_backend_class = "tests.support.jupyter.recording_backend.RecordingBackend"\n'
    with jupyter_server(root, tmp, env=env, config=config) as server:
        yield server


def post_jobs(server: JupyterServer, body: Any, path: str = "gpuhub/api/jobs") -> Any:
    return server.api("POST", path, data=encode(body), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"notebook": "train.ipynb", "gpus": "\u00b2"}, "gpus"),
        ({"notebook": "train.ipynb", "kind": "pytorchjob", "workers": "\u00b2"}, "workers"),
        ({"notebook": "train.ipynb", "gpus": "2"}, "gpus"),  # text is not a GPU count
        ({"notebook": "train.ipynb", "parameters": {"x": "\ud800"}}, "parameters"),
        ({"notebook": "train.ipynb", "parameters": {"x": Deep(3000)}}, "body"),
        ({"notebook": "train.ipynb", "parameters": {"x": 10**30}}, "parameters"),
        ({"notebook": "train.ipynb", "name": "\ud800"}, "name"),
        ([1, 2], "body"),
        ("train.ipynb", "body"),
    ],
)
@pytest.mark.e2e
def test_threat_odd_json_gets_400_naming_the_field(server, body, field):
    response = post_jobs(server, body)
    assert response.status_code == 400, response.text
    assert response.json()["field"] == field
    assert response.json()["message"].endswith(".")


@pytest.mark.e2e
def test_threat_odd_log_tail_gets_400(server):
    for tail in ("\u00b2", "-1", "1e3", "0", "100001", "9" * 400, "\u0661"):
        response = server.api("GET", f"gpuhub/api/jobs/some-job/logs?tail={quote(tail)}")
        assert response.status_code == 400, (tail, response.text)
        assert response.json()["field"] == "tail"


@pytest.mark.e2e
def test_threat_oversized_body_is_413_before_authentication_and_unread(server):
    url = urlparse(server.url)
    head = (
        f"POST {url.path}gpuhub/api/jobs HTTP/1.1\r\nHost: {url.netloc}\r\n"
        "Content-Type: application/json\r\nContent-Length: 21474836480\r\n\r\n"
    )  # 20 GiB declared, no token, and not one byte of the body sent
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    said = "The request body is over the 128 KiB this API takes (a job's parameters plus 64 KiB)."
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {
        "message": said,
        "field": "body",
        "errors": [{"field": "body", "message": said}],
    }
    assert server.api("GET", "gpuhub/api/jobs").status_code == 200


@pytest.mark.e2e
@PROPERTY
@given(field=st.sampled_from(BODY_FIELDS), value=json_values)
def test_threat_any_json_in_any_field_is_not_a_5xx(server, field, value):
    body = {"notebook": "train.ipynb", field: value}
    assert_one_sentence_4xx(post_jobs(server, body), body)
    assert_one_sentence_4xx(post_jobs(server, body, "gpuhub/api/jobs/pipeline.yaml"), body)


@pytest.mark.e2e
@PROPERTY
@given(body=json_values)
def test_threat_any_json_body_is_not_a_5xx(server, body):
    assert_one_sentence_4xx(post_jobs(server, body), body)


@pytest.mark.e2e
@PROPERTY
@given(job_id=text, tail=text)
def test_threat_any_job_id_or_query_is_not_a_5xx(server, job_id, tail):
    quoted = quote(job_id.encode("utf-8", "surrogatepass"), safe="")
    query = quote(tail.encode("utf-8", "surrogatepass"))
    for path in (
        f"gpuhub/api/jobs/{quoted}",
        f"gpuhub/api/jobs/{quoted}/logs?tail={query}",
        f"gpuhub/api/jobs/{quoted}/pipeline.yaml",
        f"gpuhub/api/metrics?since={query}",
    ):
        assert_one_sentence_4xx(server.api("GET", path), path)


# -- the hub: POST /hub/api/users/NAME/server --------------------------------------------------------
HUB_CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = [0, 1]
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 4, "default": 1}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "8G", "default": "1G"}
c.LocalGPUSpawner.default_limits = {"max_gpus": 2}
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    hub = start_hub(tmp_path_factory.mktemp("threat-hub"), HUB_CONFIG)
    try:
        hub.api("POST", "/users/mallory")
        yield hub
    finally:
        hub.api("DELETE", "/users/mallory/server")
        hub.stop()


def spawn(hub: Hub, body: Any) -> Any:
    response = hub.api("POST", "/users/mallory/server", data=encode(body))
    if response.status_code < 300:  # a valid body started a server: stop it for the next one
        hub.stop_server("mallory")
    return response


@pytest.mark.e2e
def test_threat_gpu_count_as_json_text_is_refused(hub):
    for gpus, said in (
        ("2", 'must be a number such as 2, not text: you gave "2" in quotes'),
        ("\u00b2", 'must be a whole number such as 0, 1 or 2; you gave the text "\u00b2"'),
        (" 1", 'must be a number such as 1, not text: you gave " 1" in quotes'),
        (1.0, "must be a whole number such as 0, 1 or 2; you gave 1.0"),
        (True, "must be a whole number such as 0, 1 or 2; you gave true"),
    ):
        response = spawn(hub, {"gpus": gpus})
        assert response.status_code == 400, (gpus, response.text)
        assert f"The number of GPUs {said}" in response.json()["message"]
    assert not hub.user_model("mallory")["servers"]


@pytest.mark.e2e
def test_threat_non_object_body_is_400_and_the_spawn_page_still_works(hub):
    # JupyterHub stores a REST body as the user's next defaults before the spawner sees it.
    # JupyterHub 6 refuses a body that is no object itself, but takes a false one (0, false,
    # "", []) for no body at all; gpuhub refuses those, as every non-object on 5.x.
    ours = "Options must be a JSON object of field names to values."
    theirs = "Body must be a JSON object" if JUPYTERHUB_MAJOR >= 6 else ours
    for body, said in (([1, 2], theirs), ("gpus", theirs), (0, ours), (False, ours), ([], ours)):
        response = spawn(hub, body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["message"] == said
    # JupyterHub 6's {"user_options": ...} body: a non-object there is refused too (by
    # JupyterHub 6; 5.x takes the key for an option, and gpuhub refuses it by name).
    response = spawn(hub, {"user_options": [1, 2]})
    assert response.status_code == 400, response.text
    assert "user_options" in response.json()["message"]
    page = hub.login("mallory").get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200 and 'name="gpus"' in page.text


@pytest.mark.e2e
@PROPERTY
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_threat_any_json_in_any_option_is_not_a_5xx(hub, field, value):
    # Another option always fails last, so no example starts a server: too many GPUs, or an
    # unknown GPU type when the GPU count itself is what is being tried.
    base: dict[str, Any] = {"gpu_type": "no-such-type"} if field == "gpus" else {"gpus": 10**6}
    body = {**base, field: value}
    response = spawn(hub, body)
    assert response.status_code == 400, (body, response.text[:300])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.e2e
@given(body=json_values)
def test_threat_any_json_body_to_spawn_is_not_a_5xx(hub, body):
    assert_one_sentence_4xx(spawn(hub, body), body)


@pytest.mark.e2e
def test_threat_body_too_deep_for_the_hubs_database_is_refused(hub):
    """JupyterHub stores a spawn's body before any spawner code runs; one nested ~900 deep
    overflowed its ``json.dumps`` (a 500). gpuhub refuses it first, and nothing is stored."""
    for depth in (60, 900):
        response = spawn(hub, {"gpus": Deep(depth)})
        assert_one_sentence_4xx(response, depth)
        assert response.status_code == 400
        assert "nested more than" in response.json()["message"]
    assert not hub.user_model("mallory")["servers"]


# -- the magics ---------------------------------------------------------------------------------------
def test_threat_magic_arguments_are_usage_errors_not_crashes():
    from IPython.core.error import UsageError

    from gpuhub_lab.jobs_magics import parse_parameters, request_body

    class Args:
        kind = gpus = gpu_type = gpu_memory = image = cpu = memory = name = runtime = None
        workers = "\u00b2"
        parameters: list[str] = []

    assert request_body(Args(), "a.ipynb")["workers"] == "\u00b2"  # sent as typed, refused there
    with pytest.raises(UsageError, match="nested too deeply"):
        parse_parameters(["x=" + Deep(5000).text])
    assert parse_parameters(["x=\u00b2"]) == {"x": "\u00b2"}


def test_nasty_values_are_json_encodable():
    for value in NASTY:
        assert json.loads(encode(value)) == value or value != value  # NaN is not equal to itself


@pytest.mark.e2e
def test_forwarded_log_never_held_a_refused_body(server):
    """Nothing refused above was forwarded: every line is a valid, complete submit."""
    log = Path(server.root).parent / "forwarded.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        body = json.loads(line)["body"]
        assert isinstance(body["gpus"], int) and body["notebook"] == "train.ipynb"


class RefusingClient:
    """Stands in for the jobs client: every call is refused as the server would refuse it."""

    def __getattr__(self, name: str) -> Any:
        from gpuhub_lab.jobs_client import JobsClientError

        def refuse(*args: Any, **kwargs: Any) -> Any:
            json.dumps([args, kwargs])  # what the client would send must be sendable
            raise JobsClientError("gpus must be a whole number such as 0, 1 or 2.", 400)

        return refuse


@settings(max_examples=150, deadline=None)
@given(
    line=st.one_of(
        text,
        st.lists(
            st.sampled_from(
                [
                    "--gpus",
                    "--workers",
                    "--tail",
                    "-p",
                    "x=\u00b2",
                    "\u00b2",
                    "2",
                    "'",
                    '"',
                    "logs",
                    "cancel",
                    "status",
                    "a.ipynb",
                    "--kind",
                    "tfjob",
                    "x=[[[",
                    "-1",
                    "--wait",
                ]
            ),
            max_size=6,
        ).map(" ".join),
    )
)
def test_threat_any_magic_line_is_a_usage_error_at_worst(line):
    from IPython.core.error import UsageError

    from gpuhub_lab.jobs_magics import JobMagics

    magics = JobMagics(shell=None)
    magics._client = RefusingClient()  # type: ignore[assignment]
    for call in (magics.submit, magics.job, magics.jobs):
        try:
            call(line)
        except UsageError as exc:
            assert str(exc)
