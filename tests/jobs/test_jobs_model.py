"""The job request parser: every bad input is one sentence naming its field, nothing created."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhub.core.env import GROUPS_ENV, POLICY_ENV
from gpuhub.core.options import FIELDS, OptionsError
from gpuhub.core.policy import Policy
from gpuhub.jobs import JobError, JobRecord, JobRequest
from gpuhub.jobs.backend import JobRouter, RemoteBackend
from gpuhub.jobs.model import JOB_FIELDS, MAX_NAME, Runtimes, default_name
from gpuhub.jobs.policy_env import policy_env, read_policy_env
from tests.support.jupyter.notebooks import write_notebook
from tests.support.policies import DESIGN_CONFIG, design_policy

POLICY = design_policy()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", "print(1)")
    write_notebook(root / "sub" / "Fine Tune (v2).ipynb", "print(2)")
    (root / "notes.txt").write_text("not a notebook")
    (root / "folder.ipynb").mkdir()
    outside = write_notebook(tmp_path / "secret.ipynb", "print('secret')")
    (root / "link.ipynb").symlink_to(outside)
    (root / "loop.ipynb").symlink_to(root / "loop.ipynb")
    return root


def parse(body, root, groups=("staff",), **kwargs) -> JobRequest:
    return JobRequest.parse(body, policy=POLICY, groups=groups, root_dir=root, **kwargs)


def snapshot(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_a_good_request_is_canonical(root):
    request = parse(
        {
            "notebook": "sub/Fine Tune (v2).ipynb",
            "gpus": 2,
            "gpu_type": "a100",
            "cpu": "4",
            "memory": "16G",
            "parameters": {"epochs": 3, "lr": 0.1, "tags": ["a"]},
        },
        root,
    )
    assert request.notebook.path == "sub/Fine Tune (v2).ipynb"
    assert request.notebook.os_path == (root / "sub" / "Fine Tune (v2).ipynb").resolve()
    assert request.name == "fine-tune-v2"
    assert (request.kind, request.workers, request.total_gpus) == ("job", 1, 2)
    assert request.resources.gpu_type is not None and request.resources.gpu_type.key == "a100"
    assert request.gpu_summary() == "2 x NVIDIA A100 80GB"
    assert request.parameters == {"epochs": 3, "lr": 0.1, "tags": ["a"]}


OFFERED = ("job", "trainjob")
RUNTIMES = Runtimes(("torch-distributed", "deepspeed"), "torch-distributed")


def test_a_trainjob_takes_nodes_and_an_offered_runtime(root):
    request = parse(
        {"notebook": "train.ipynb", "kind": "trainjob", "workers": 3, "gpus": 2},
        root,
        kinds=OFFERED,
        runtimes=RUNTIMES,
    )
    # numNodes = workers; the default runtime where none is named.
    assert (request.kind, request.workers, request.total_gpus) == ("trainjob", 3, 6)
    assert request.runtime == "torch-distributed"
    chosen = parse(
        {"notebook": "train.ipynb", "kind": "trainjob", "runtime": "deepspeed"},
        root,
        kinds=OFFERED,
        runtimes=RUNTIMES,
    )
    assert chosen.runtime == "deepspeed"
    assert parse(RemoteBackend.request_body(chosen), root, runtimes=RUNTIMES) == chosen


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (
            {"kind": "tfjob"},
            "kind",
            'Job kind "tfjob" is not offered here; the kinds offered are "job" (training job), '
            '"trainjob" (TrainJob).',
        ),
        (
            {"kind": "trainjob", "runtime": "mpi"},
            "runtime",
            'Runtime "mpi" is not offered here; the runtimes offered are "torch-distributed", '
            '"deepspeed".',
        ),
        (
            {"kind": "job", "runtime": "deepspeed"},
            "runtime",
            'A runtime applies only to a TrainJob; a training job takes none (you gave "deepspeed").',
        ),
    ],
)
def test_only_offered_kinds_and_runtimes_pass(root, body, field, message):
    with pytest.raises(JobError) as caught:
        parse({"notebook": "train.ipynb", **body}, root, kinds=OFFERED, runtimes=RUNTIMES)
    assert (caught.value.field, caught.value.status, caught.value.message) == (field, 400, message)


def test_a_trainjob_without_an_offered_runtime_is_refused(root):
    with pytest.raises(JobError) as caught:
        parse({"notebook": "train.ipynb", "kind": "trainjob"}, root, kinds=OFFERED)
    assert caught.value.field == "runtime"
    assert "No training runtime is offered for TrainJobs here" in caught.value.message


def test_absolute_path_inside_the_root_is_accepted(root):
    request = parse({"notebook": str(root / "train.ipynb")}, root)
    assert request.notebook.path == "train.ipynb"


def test_distributed_kinds_take_workers(root):
    request = parse(
        {"notebook": "train.ipynb", "kind": "pytorchjob", "workers": 4, "gpus": 2}, root
    )
    assert (request.workers, request.total_gpus) == (4, 8)
    assert request.gpu_summary() == "4 workers, 2 x NVIDIA A100 80GB each"


def nested(depth: int) -> list:
    """A list nested ``depth`` levels deep, as a hostile client would send."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD = [
    # (body, field, status, words the sentence must contain)
    ({"notebook": "../secret.ipynb"}, "notebook", 400, "outside this server's root"),
    ({"notebook": "sub/../../secret.ipynb"}, "notebook", 400, "outside"),
    ({"notebook": "/etc/passwd"}, "notebook", 400, "outside"),
    ({"notebook": "link.ipynb"}, "notebook", 400, "outside"),  # symlink out of the root
    ({"notebook": "loop.ipynb"}, "notebook", 400, "not a valid path"),
    ({"notebook": "missing.ipynb"}, "notebook", 404, "does not exist"),
    ({"notebook": "notes.txt"}, "notebook", 400, "not a notebook"),
    ({"notebook": "folder.ipynb"}, "notebook", 400, "not a file"),
    ({"notebook": ""}, "notebook", 400, "must be a path"),
    ({"notebook": 7}, "notebook", 400, "must be a path"),
    ({}, "notebook", 400, "must be a path"),
    ({"notebook": "a\0b.ipynb"}, "notebook", 400, "not a valid path"),
    ({"notebook": "train.ipynb", "name": "Train_1"}, "name", 400, "lower-case"),
    ({"notebook": "train.ipynb", "name": "-train"}, "name", 400, "starting and ending"),
    ({"notebook": "train.ipynb", "name": "x" * (MAX_NAME + 1)}, "name", 400, "at most"),
    ({"notebook": "train.ipynb", "name": ["a"]}, "name", 400, "lower-case"),
    ({"notebook": "train.ipynb", "parameters": [1, 2]}, "parameters", 400, "mapping"),
    ({"notebook": "train.ipynb", "parameters": "epochs=3"}, "parameters", 400, "mapping"),
    ({"notebook": "train.ipynb", "parameters": {"1x": 1}}, "parameters", 400, "identifier"),
    ({"notebook": "train.ipynb", "parameters": {"a b": 1}}, "parameters", 400, "identifier"),
    (
        {"notebook": "train.ipynb", "parameters": {"x": float("nan")}},
        "parameters",
        400,
        "not finite",
    ),
    # Threats: text where a count belongs, odd digits, lone surrogates, deep nesting.
    ({"notebook": "train.ipynb", "kind": "tfjob", "workers": "2"}, "workers", 400, "whole"),
    ({"notebook": "train.ipynb", "kind": "tfjob", "workers": "\u00b2"}, "workers", 400, "whole"),
    ({"notebook": "train.ipynb", "gpus": "\u00b2"}, "gpus", 400, "whole number"),
    (
        {"notebook": "train.ipynb", "parameters": {"x": "\ud800"}},
        "parameters",
        400,
        "lone surrogate",
    ),
    (
        {"notebook": "train.ipynb", "parameters": {"x": nested(40)}},
        "parameters",
        400,
        "nested more than",
    ),
    ({"notebook": "train.ipynb", "parameters": {"x": 10**40}}, "parameters", 400, "too large"),
    (
        {"notebook": "train.ipynb", "parameters": {"x": "y" * 70_000}},
        "parameters",
        400,
        "over the limit",
    ),
    (
        {"notebook": "train.ipynb", "kind": "spark"},
        "kind",
        400,
        'not one gpuhub knows; the kinds offered are "job" (training job)',
    ),
    ({"notebook": "train.ipynb", "kind": 3}, "kind", 400, "not one gpuhub knows"),
    (
        {"notebook": "train.ipynb", "workers": 2},
        "workers",
        400,
        "only to a PyTorchJob, a TFJob or a TrainJob",
    ),
    ({"notebook": "train.ipynb", "kind": "tfjob", "workers": 0}, "workers", 400, "between 1"),
    ({"notebook": "train.ipynb", "kind": "tfjob", "workers": 65}, "workers", 400, "between 1"),
    ({"notebook": "train.ipynb", "kind": "tfjob", "workers": 1.5}, "workers", 400, "whole"),
    ({"notebook": "train.ipynb", "kind": "tfjob", "workers": True}, "workers", 400, "whole"),
    # Resources: the spawn form's own messages (parse_launch_options).
    ({"notebook": "train.ipynb", "gpus": 9}, "gpus", 400, "at most 8"),
    ({"notebook": "train.ipynb", "gpus": -1}, "gpus", 400, "0 or more"),
    (
        {"notebook": "train.ipynb", "gpu_type": "h100", "gpus": 1},
        "gpu_type",
        400,
        "is not one of this hub's",
    ),
    ({"notebook": "train.ipynb", "image": "evil.io/x:1"}, "image", 400, "not offered to you"),
    ({"notebook": "train.ipynb", "cpu": 64}, "cpu", 400, "between"),
    ({"notebook": "train.ipynb", "memory": "16"}, "memory", 400, "did you mean 16G"),
    ({"notebook": "train.ipynb", "colour": "red"}, "colour", 400, "Unknown option"),
]


@pytest.mark.parametrize(("body", "field", "status", "words"), BAD)
def test_bad_input_is_one_sentence_naming_the_field(root, body, field, status, words):
    before = snapshot(root)
    with pytest.raises(JobError) as caught:
        parse(body, root)
    error = caught.value
    assert (error.field, error.status) == (field, status)
    assert words in error.message
    assert "\n" not in error.message and error.message.endswith((".", "?", ")"))
    assert snapshot(root) == before


def test_students_get_their_groups_limits(root):
    with pytest.raises(JobError) as caught:
        parse({"notebook": "train.ipynb", "gpus": 1, "gpu_type": "a100"}, root, groups=["students"])
    assert caught.value.field == "gpu_type"
    assert "Your groups may not use the GPU type" in caught.value.message


def test_oversized_notebook_is_413(root):
    with pytest.raises(JobError) as caught:
        parse({"notebook": "train.ipynb"}, root, max_notebook_bytes=100)
    assert caught.value.status == 413
    assert "over the" in caught.value.message and "clear large outputs" in caught.value.message


def test_body_must_be_an_object(root):
    with pytest.raises(JobError) as caught:
        parse(["train.ipynb"], root)
    assert caught.value.field == "body"


def test_default_names_are_dns_1123():
    assert default_name("Train ResNet (v2)") == "train-resnet-v2"
    assert default_name("___") == "notebook"
    assert len(default_name("a" * 200)) <= MAX_NAME


def test_record_round_trips_through_json(root):
    request = parse({"notebook": "train.ipynb", "gpus": 1}, root)
    record = JobRecord.new("train-abc123", request, backend="local", owner="ada")
    data = json.loads(json.dumps(record.to_json()))
    assert data["status"] == "pending" and data["created"].endswith("Z")
    assert data["gpu"] == "1 x NVIDIA A100 80GB" and data["gpus"] == 1
    assert JobRecord.from_json(data) == record


def test_policy_travels_from_spawner_env_to_server():
    env = policy_env({**DESIGN_CONFIG, "unrelated": 1}, ["students", "staff"])
    assert set(env) == {POLICY_ENV, GROUPS_ENV}
    config, groups = read_policy_env(env)
    assert groups == ["staff", "students"]
    assert Policy.from_config(**config) == POLICY
    assert list(config["images"]) == ["pytorch", "cpu"]  # the first image is the default
    with pytest.raises(ValueError, match=POLICY_ENV):
        read_policy_env({POLICY_ENV: "{not json"})
    with pytest.raises(ValueError, match=GROUPS_ENV):
        read_policy_env({GROUPS_ENV: '"staff"'})


async def test_router_refuses_unavailable_kinds_with_the_reason(root):
    router = JobRouter({}, {"tfjob": "This cluster does not run TFJobs."})
    request = parse({"notebook": "train.ipynb", "kind": "tfjob"}, root)
    with pytest.raises(JobError, match="does not run TFJobs"):
        await router.submit(request, "ada")
    with pytest.raises(JobError, match="cannot run a pipeline step"):
        router.backend_for("pipeline")
    with pytest.raises(JobError) as caught:
        await router.get("ada", "nope")
    assert caught.value.status == 404


def test_remote_body_is_what_the_parser_accepts(root):
    request = parse(
        {"notebook": "train.ipynb", "kind": "pytorchjob", "workers": 2, "gpus": 1, "memory": "9G"},
        root,
    )
    body = RemoteBackend.request_body(request)
    assert body["memory"] == "9G" and body["gpu_type"] == "a100" and body["image"] == "pytorch"
    assert parse(body, root) == request


# -- hypothesis: the parser never lets anything else escape --------------------------------------
NOTEBOOKS = st.sampled_from(
    [
        "train.ipynb",
        "sub/Fine Tune (v2).ipynb",
        "../secret.ipynb",
        "/etc/hosts",
        "notes.txt",
        "link.ipynb",
        "missing.ipynb",
        "",
        None,
        3,
        "sub/../train.ipynb",
        "./train.ipynb",
    ]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = st.sampled_from([*FIELDS, *JOB_FIELDS, "other"]) | st.text(max_size=10)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    notebook=NOTEBOOKS,
    extra=st.dictionaries(KEYS, JSON_VALUES, max_size=6),
    kind=st.sampled_from(["job", "pytorchjob", "tfjob", "pipeline", "other", None]),
)
def test_parser_answers_a_request_or_one_sentence(root, notebook, extra, kind):
    body = {**extra, "notebook": notebook}
    if kind is not None:
        body["kind"] = kind
    before = snapshot(root)
    try:
        request = parse(body, root)
    except OptionsError as exc:  # JobError is one
        assert isinstance(exc, JobError)
        assert isinstance(exc.field, str) and exc.message and "\n" not in exc.message
        assert 400 <= exc.status < 500
    else:
        assert request.notebook.os_path.is_file()
        assert (
            Path(os.path.commonpath([request.notebook.os_path, root.resolve()])) == root.resolve()
        )
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", request.name)
        assert json.loads(json.dumps(dict(request.parameters))) == request.parameters
        assert request.workers == 1 or request.kind in ("pytorchjob", "tfjob")
    assert snapshot(root) == before


def test_job_logs_lose_transport_warnings_and_rulers() -> None:
    from gpuhub.jobs.model import without_noise

    raw = (
        "[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All "
        "communication (including code and outputs) is sent in plain text.\n"
        "18:37:31 Executing Cell 1---------------------------------------\n"
        "loss 0.25\n"
        "----------\n"
    )
    assert without_noise(raw) == "18:37:31 Executing Cell 1\nloss 0.25\n----------\n"
