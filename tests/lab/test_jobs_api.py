"""``/gpuhub/api/jobs`` on a real jupyter_server process with the gpuhub_lab extension."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import nbformat
import pytest
import requests

from gpuhub.jobs.model import KINDS, MAX_NAME
from gpuhub.jobs.policy_env import policy_env
from harness.jupyter.server import TOKEN, JupyterServer, jupyter_server
from tests.support.jupyter.notebooks import read_outputs, write_notebook
from tests.support.policies import DESIGN_CONFIG

pytestmark = pytest.mark.e2e


def wait_final(server: JupyterServer, job_id: str, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = server.api("GET", f"gpuhub/api/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        assert time.monotonic() < deadline, f"{job_id} still {job['status']}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[JupyterServer]:
    """``jupyter server`` on a two-GPU machine, nothing configured."""
    tmp = tmp_path_factory.mktemp("standalone")
    root = tmp / "home"
    write_notebook(
        root / "exp" / "train.ipynb",
        "import os\nprint('lr', lr, 'gpus', repr(os.environ['CUDA_VISIBLE_DEVICES']))",
        parameters="lr = 0.5",
    )
    write_notebook(root / "long.ipynb", "import time\ntime.sleep(300)")
    with jupyter_server(root, tmp, env={"CUDA_VISIBLE_DEVICES": "0,1"}) as server:
        yield server


def test_submit_follow_and_open_the_result(standalone):
    answer = standalone.api(
        "POST",
        "gpuhub/api/jobs",
        json={"notebook": "exp/train.ipynb", "gpus": 2, "parameters": {"lr": 0.01}},
    )
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert set(created) >= {"id", "status", "url", "job"} and created["status"] == "running"
    assert answer.headers["Location"].endswith(f"/gpuhub/api/jobs/{created['id']}")
    job = wait_final(standalone, created["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["gpu"] == "2 x NVIDIA GPU" and job["owner"] and job["elapsed"] >= 0
    # "Open result": the output path works with Jupyter's own contents API.
    contents = standalone.api("GET", f"api/contents/{job['output']}")
    assert contents.status_code == 200 and contents.json()["type"] == "notebook"
    assert "lr 0.01 gpus '0,1'" in read_outputs(standalone.root / job["output"])
    logs = standalone.api("GET", f"gpuhub/api/jobs/{created['id']}/logs").json()
    assert logs["status"] == "succeeded" and "lr 0.01" in logs["logs"]
    tail = standalone.api("GET", f"gpuhub/api/jobs/{created['id']}/logs?tail=2").json()
    assert len(tail["logs"].splitlines()) == 2
    listed = standalone.api("GET", "gpuhub/api/jobs").json()["jobs"]
    assert created["id"] in [j["id"] for j in listed]


def test_a_notebook_that_names_no_kernel_runs_on_the_default_one(standalone):
    """A notebook written by a tool (no kernelspec, no language_info) is taken by the API and
    run on the default kernel, its parameters injected (papermill alone refuses it)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("lr = 0.5", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import sys\nprint('lr', lr, 'on', sys.implementation.name)"),
    ]
    notebook.metadata = {}
    nbformat.write(notebook, standalone.root / "bare.ipynb")
    answer = standalone.api(
        "POST", "gpuhub/api/jobs", json={"notebook": "bare.ipynb", "parameters": {"lr": 0.25}}
    )
    assert answer.status_code == 201, answer.text
    job = wait_final(standalone, answer.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    assert "lr 0.25 on cpython" in read_outputs(standalone.root / job["output"])


def test_cancel_over_rest(standalone):
    created = standalone.api("POST", "gpuhub/api/jobs", json={"notebook": "long.ipynb"}).json()
    time.sleep(1)
    cancelled = standalone.api("DELETE", f"gpuhub/api/jobs/{created['id']}")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert wait_final(standalone, created["id"])["status"] == "cancelled"


def test_options_offer_this_machines_gpus(standalone):
    options = standalone.api("GET", "gpuhub/api/jobs/options").json()
    assert options["local"] == {"gpus": 2, "gpu_type": None, "gpu_memory": None}
    assert options["kubernetes"] is False
    assert [t["key"] for t in options["gpu_types"]] == ["gpu"] and options["max_gpus"] == 2
    kinds = {k["kind"]: k for k in options["kinds"]}
    assert kinds["job"]["available"] and not kinds["pytorchjob"]["available"]
    assert "not connected to one" in kinds["pipeline"]["reason"]
    assert options["max_name_length"] == MAX_NAME  # the dialog's default name is cut there
    # Each kind's facts come from the kinds' registry, so the dialog names no kind itself;
    # only the training job runs on this server.
    assert all(kinds[k.name].items() >= k.facts().items() for k in KINDS.values())
    assert [k for k in kinds if kinds[k]["here"]] == ["job"]
    assert kinds["pytorchjob"]["distributed"] and not kinds["job"]["distributed"]
    assert kinds["trainjob"]["takes_runtime"] and kinds["pipeline"]["runs_in"]
    assert options["gpu_types"][0]["dra"] is False


@pytest.mark.parametrize(
    ("body", "status", "field", "words"),
    [
        ({"notebook": "../../etc/passwd.ipynb"}, 400, "notebook", "outside"),
        ({"notebook": "/etc/hosts"}, 400, "notebook", "outside"),
        ({"notebook": "nope.ipynb"}, 404, "notebook", "does not exist"),
        ({"notebook": "exp/train.ipynb", "name": "Not_DNS"}, 400, "name", "lower-case"),
        ({"notebook": "exp/train.ipynb", "parameters": [1]}, 400, "parameters", "mapping"),
        ({"notebook": "exp/train.ipynb", "gpus": 3}, 400, "gpus", "at most 2"),
        ({"notebook": "exp/train.ipynb", "kind": "spark"}, 400, "kind", "not one gpuhub knows"),
        ({"notebook": "exp/train.ipynb", "kind": "pytorchjob"}, 400, "kind", "not connected"),
        ("not an object", 400, "body", "JSON object"),
    ],
)
def test_bad_submits_are_4xx_sentences_and_create_nothing(standalone, body, status, field, words):
    before = sorted(p.name for p in standalone.root.rglob("*"))
    answer = standalone.api("POST", "gpuhub/api/jobs", json=body)
    assert answer.status_code == status
    reply = answer.json()
    assert reply["field"] == field and words in reply["message"]
    assert "\n" not in reply["message"]
    assert sorted(p.name for p in standalone.root.rglob("*")) == before


def test_a_submit_hears_everything_wrong_at_once(standalone):
    """Four fields wrong: one 400 lists all four, in the dialog's order, each a sentence of
    its own naming the field; ``message`` is the first."""
    answer = standalone.api(
        "POST",
        "gpuhub/api/jobs",
        json={
            "notebook": "exp/train.ipynb",
            "cpu": "lots",
            "memory": "16 GB",
            "gpus": "1",
            "name": "Bad_Name",
        },
    )
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert [e["field"] for e in body["errors"]] == ["cpu", "memory", "gpus", "name"]
    assert (body["field"], body["message"]) == ("cpu", body["errors"][0]["message"])
    said = {e["field"]: e["message"] for e in body["errors"]}
    assert "did you mean 16G?" in said["memory"]
    assert "must be a number such as 1, not text" in said["gpus"]
    assert not standalone.api("GET", "gpuhub/api/jobs").json()["jobs"] or all(
        j["name"] != "bad-name" for j in standalone.api("GET", "gpuhub/api/jobs").json()["jobs"]
    )


def test_invalid_json_and_unknown_jobs(standalone):
    answer = standalone.api("POST", "gpuhub/api/jobs", data=b"{nope")
    assert (
        answer.status_code == 400
        and answer.json()["message"] == "The request body is not valid JSON."
    )
    for method, path in [
        ("GET", "gpuhub/api/jobs/missing-123"),
        ("GET", "gpuhub/api/jobs/missing-123/logs"),
        ("DELETE", "gpuhub/api/jobs/missing-123"),
    ]:
        answer = standalone.api(method, path)
        assert answer.status_code == 404
        assert answer.json()["message"] == 'There is no job "missing-123" among your jobs.'
    bad_tail = standalone.api("GET", "gpuhub/api/jobs/missing-123/logs?tail=x")
    assert bad_tail.status_code == 400


def test_requests_need_authentication_and_xsrf(standalone):
    for method, path in [
        ("GET", "gpuhub/api/jobs"),
        ("GET", "gpuhub/api/jobs/options"),
        ("POST", "gpuhub/api/jobs"),
        ("DELETE", "gpuhub/api/jobs/x"),
    ]:
        answer = requests.request(method, standalone.url + path, json={}, timeout=10)
        assert answer.status_code == 403
        assert "Log in to this Jupyter server" in answer.json()["message"] or "_xsrf" in answer.text
    # A browser session (cookie) must also send the XSRF token on writes.
    browser = requests.Session()
    browser.get(standalone.url + "login", timeout=10)
    browser.post(
        standalone.url + "login",
        data={"password": TOKEN, "_xsrf": browser.cookies.get("_xsrf")},
        allow_redirects=False,
        timeout=10,
    )
    assert browser.get(standalone.url + "gpuhub/api/jobs", timeout=10).status_code == 200
    body = {"notebook": "exp/train.ipynb", "name": "via-browser"}
    refused = browser.post(standalone.url + "gpuhub/api/jobs", json=body, timeout=10)
    assert refused.status_code == 403 and "_xsrf" in refused.text
    accepted = browser.post(
        standalone.url + "gpuhub/api/jobs",
        json=body,
        headers={"X-XSRFToken": browser.cookies.get("_xsrf")},
        timeout=10,
    )
    assert accepted.status_code == 201
    wait_final(standalone, accepted.json()["id"])


# -- a server started by LocalGPUSpawner: the hub's policy, one A100 slice --------------------------
def test_a_spawned_server_applies_the_hubs_policy(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", "print('ok')")
    env = {
        **policy_env(DESIGN_CONFIG, ["students"]),
        "GPUHUB_GPU_TYPE": "a100-1g",
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTERHUB_USER": "ada",
    }
    with jupyter_server(root, tmp_path, env=env) as server:
        options = server.api("GET", "gpuhub/api/jobs/options").json()
        assert [t["key"] for t in options["gpu_types"]] == ["a100-1g"]
        assert [i["key"] for i in options["images"]] == ["pytorch", "cpu"]
        assert options["max_gpus"] == 1 and options["memory"]["max"] == "256G"
        assert options["local"] == {"gpus": 0, "gpu_type": "a100-1g", "gpu_memory": None}
        refused = server.api(
            "POST",
            "gpuhub/api/jobs",
            json={"notebook": "train.ipynb", "gpu_type": "a100", "gpus": 1},
        )
        assert (
            refused.status_code == 400 and "may not use the GPU type" in refused.json()["message"]
        )
        # Allowed by the policy, but this server holds no GPU: the local backend says so.
        refused = server.api("POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb", "gpus": 1})
        assert refused.status_code == 400
        assert refused.json()["message"].startswith("This server has no GPU")
        created = server.api("POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb"}).json()
        job = wait_final(server, created["id"])
        assert (job["status"], job["owner"], job["gpu"]) == ("succeeded", "ada", "CPU only")


def test_one_default_and_one_maximum_for_dialog_magic_and_api(tmp_path):
    """staff may have 4 GPUs per job, but this server was given 2: every route says 2."""
    root = tmp_path / "home"
    write_notebook(
        root / "train.ipynb", "import os\nprint('gpus', repr(os.environ['CUDA_VISIBLE_DEVICES']))"
    )
    env = {
        **policy_env(DESIGN_CONFIG, ["staff"]),
        "GPUHUB_GPU_TYPE": "a100",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "JUPYTERHUB_USER": "alice",
    }
    with jupyter_server(root, tmp_path, env=env) as server:
        options = server.api("GET", "gpuhub/api/jobs/options").json()
        assert options["max_gpus"] == 2 and options["defaults"]["gpus"] == 1
        a100 = next(t for t in options["gpu_types"] if t["key"] == "a100")
        assert a100["max_gpus"] == 2
        refused = server.api("POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb", "gpus": 3})
        assert refused.status_code == 400
        assert "at most 2" in refused.json()["message"], refused.json()
        # Left out (as %submit without --gpus sends it): the same default the dialog shows.
        created = server.api("POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb"}).json()
        job = wait_final(server, created["id"])
        assert job["status"] == "succeeded" and job["gpu"].startswith("1 x ")


# -- Kubernetes mode: the forwarding seam -----------------------------------------------------------
def test_kubernetes_mode_forwards_every_kind_to_the_remote_backend(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", "print('ok')")
    record = tmp_path / "forwarded.jsonl"
    env = {
        **policy_env(DESIGN_CONFIG, ["staff"]),
        "GPUHUB_JOBS_URL": "http://127.0.0.1:9/services/gpuhub/api",
        "JUPYTERHUB_API_TOKEN": "user-token",
        "JUPYTERHUB_USER": "ada",
        "GPUHUB_TEST_FORWARD_LOG": str(record),
    }
    config = 'c.GPUHubJobs.remote_backend_class = "tests.support.jupyter.recording_backend.RecordingBackend"\n'
    with jupyter_server(root, tmp_path, env=env, config=config) as server:
        options = server.api("GET", "gpuhub/api/jobs/options").json()
        assert options["kubernetes"] is True and options["local"] is None
        assert all(k["available"] for k in options["kinds"])
        body = {
            "notebook": "train.ipynb",
            "kind": "pytorchjob",
            "workers": 2,
            "gpus": 4,
            "gpu_type": "a100",
        }
        created = server.api("POST", "gpuhub/api/jobs", json=body)
        assert created.status_code == 201, created.text
        assert (
            server.api("GET", f"gpuhub/api/jobs/{created.json()['id']}").json()["kind"]
            == "pytorchjob"
        )
        # Policy refusals happen before anything is forwarded.
        assert server.api("POST", "gpuhub/api/jobs", json={**body, "gpus": 9}).status_code == 400
    forwarded = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(forwarded) == 1
    sent = forwarded[0]
    assert sent["url"] == "http://127.0.0.1:9/services/gpuhub/api" and sent["token"] == "user-token"
    assert sent["owner"] == "ada"
    assert sent["body"] == {
        "notebook": "train.ipynb",
        "kind": "pytorchjob",
        "name": "train",
        "workers": 2,
        "parameters": {},
        "cpu": 2,
        "memory": "8G",
        "gpus": 4,
        "image": "pytorch",
        "gpu_type": "a100",
    }


def test_kubernetes_mode_without_a_client_says_so(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", "print('ok')")
    env = {"GPUHUB_JOBS_URL": "http://127.0.0.1:9/", "JUPYTERHUB_USER": "ada"}
    config = 'c.GPUHubJobs.remote_backend_class = "gpuhub.jobs.no_such_module.Backend"\n'
    with jupyter_server(root, tmp_path, env=env, config=config) as server:
        answer = server.api("POST", "gpuhub/api/jobs", json={"notebook": "train.ipynb"})
        assert answer.status_code == 400
        assert "cannot load the client for the gpuhub hub service" in answer.json()["message"]
        assert server.api("GET", "gpuhub/api/jobs").json() == {"jobs": []}
