"""Every refusal and progress message gpuhub writes, swept for the mistakes users saw.

Messages are produced for real (bad options through the one validation path, job requests,
the spawner's progress, the cluster's events), for GPU types whose names do and do not end in
"GPU", then each is checked for doubled words ("NVIDIA GPU GPUs"), raw keys and environment
variables ("gpus: …", "no GPUHUB_JOBS_URL"), Python literals ("got True", "'gpu'"), wrong
plurals ("1 cores") and sentences that do not start with a capital. Quoted text ("…") is what
the user typed or must type, so it is not held against the sentence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuhub.core import words
from gpuhub.core.holdings import Holding
from gpuhub.core.options import LaunchOptions, OptionsError, parse_launch_options
from gpuhub.core.policy import Policy
from gpuhub.hub.form import (
    RESOURCES,
    QuotaView,
    capacity_text,
    options_from_formdata,
    render_form,
    resource_words,
    sentences,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.local_gpu_spawner import LocalGPUSpawner
from gpuhub.hub.monitor.usage import HUB_SHUTDOWN, SHARE_OVERUSE, Notice
from gpuhub.hub.progress import SpawnRequest, describe, timeout_message, waiting_for_gpus
from gpuhub.hub.web.notices import notice_text, warning_text
from gpuhub.jobs.local import LocalBackend
from gpuhub.jobs.model import MAX_NAME, JobError, JobNotFound, JobRequest
from tests.support.messages import loose_stop, problems, visible_text

NAMES = ["NVIDIA GPU", "Simulated GPU", "NVIDIA A100 80GB", "A100 MIG 1g.10gb slice"]


def test_the_checker_catches_what_users_saw() -> None:
    for bad in [
        "You may use at most 2 NVIDIA GPU GPUs per job.",
        "gpus: you may use at most 4.",
        "A pipeline step runs on the cluster (no GPUHUB_JOBS_URL).",
        "cpu must be a number (got True).",
        "Unknown option 'gpu'.",
        "Asked for 1 cores.",
    ]:
        assert problems(bad), bad
    assert not problems('GPU type "h100" is not one of this hub\'s (yours: "a100").')


def policy(name: str) -> Policy:
    return Policy.from_config(
        images={"default": {"display_name": "PyTorch", "image": "pytorch:1"}},
        custom_image_pattern="",
        gpu_types={
            "gpu": {"display_name": name, "max_gpus": 2},
            "other": {"display_name": "Tesla T4", "max_gpus": 1},
        },
        cpu_range={"min": 0.5, "max": 4, "default": 1},
        memory_range={"min": "512Mi", "max": "8G", "default": "1G"},
        group_limits={"staff": {"max_gpus": 2}, "students": {"max_gpus": 1, "gpu_types": ["gpu"]}},
        default_limits={"max_gpus": 0},
    )


BAD_OPTIONS: list[tuple[dict[str, Any], list[str]]] = [
    ({"cpu": 64}, ["staff"]),
    ({"cpu": True}, ["staff"]),
    ({"cpu": "lots"}, ["staff"]),
    ({"memory": "1T"}, ["staff"]),
    ({"memory": "16"}, ["staff"]),
    ({"memory": "16 GB"}, ["staff"]),
    ({"gpus": -1}, ["staff"]),
    ({"gpus": True}, ["staff"]),
    ({"gpus": "two"}, ["staff"]),
    ({"gpus": 3}, ["staff"]),
    ({"gpus": 2}, ["students"]),
    ({"gpus": 1}, ["nobody"]),
    ({"gpus": 1, "gpu_type": "other"}, ["students"]),
    ({"gpus": 1, "gpu_type": "h100"}, ["staff"]),
    ({"gpus": 1, "gpu_type": None, "image": "evil.io/x:1"}, ["staff"]),
    ({"image": ["pytorch"]}, ["staff"]),
    ({"profile": "nope"}, ["staff"]),
    ({"gpu": 1}, ["staff"]),
]


def option_refusals() -> Iterator[str]:
    for name in NAMES:
        for raw, groups in BAD_OPTIONS:
            for subject in ("server", "job"):
                with pytest.raises(OptionsError) as info:
                    parse_launch_options(raw, policy(name), groups, subject=subject)
                yield info.value.message
    with pytest.raises(OptionsError) as info:
        options_from_formdata({"image": ["__custom__"], "custom_image": [""]})
    yield info.value.message
    empty = Policy.from_config(
        images={}, custom_image_pattern="", gpu_types={}, cpu_range={}, memory_range={},
        group_limits={}, default_limits={"max_gpus": 1},
    )  # fmt: skip
    with pytest.raises(OptionsError) as info:
        parse_launch_options({"gpus": 1}, empty)
    yield info.value.message


def job_refusals(root: Path) -> Iterator[str]:
    (root / "train.ipynb").write_text("{}")
    (root / "notes.txt").write_text("")
    (root / "folder.ipynb").mkdir()
    bad: list[dict[str, Any]] = [
        {"notebook": "../x.ipynb"},
        {"notebook": "notes.txt"},
        {"notebook": "folder.ipynb"},
        {"notebook": "nope.ipynb"},
        {"notebook": 7},
        {"notebook": "train.ipynb", "name": "Bad_Name"},
        {"notebook": "train.ipynb", "name": "x" * (MAX_NAME + 1)},
        {"notebook": "train.ipynb", "parameters": [1]},
        {"notebook": "train.ipynb", "parameters": {"a b": 1}},
        {"notebook": "train.ipynb", "parameters": {"x": float("nan")}},
        {"notebook": "train.ipynb", "kind": "spark"},
        {"notebook": "train.ipynb", "kind": True},
        {"notebook": "train.ipynb", "workers": 2},
        {"notebook": "train.ipynb", "kind": "tfjob", "workers": True},
        {"notebook": "train.ipynb", "kind": "tfjob", "workers": 99},
        {"notebook": "train.ipynb", "gpus": 3},
    ]
    for name in NAMES:
        for raw in bad:
            with pytest.raises(JobError) as info:
                JobRequest.parse(raw, policy=policy(name), groups=["staff"], root_dir=str(root))
            yield info.value.message


async def local_backend_refusals(root: Path) -> list[str]:
    messages = []
    for gpu_ids, raw in [
        ([], {"gpus": 1}),
        (["0", "1"], {"gpus": 1, "gpu_type": "other"}),
        (["0"], {"gpus": 2}),
    ]:
        backend = LocalBackend(root, owner="ada", gpu_ids=gpu_ids, gpu_type="gpu")
        request = JobRequest.parse(
            {"notebook": "train.ipynb", **raw},
            policy=policy("NVIDIA GPU"),
            groups=["staff"],
            root_dir=str(root),
        )
        with pytest.raises(JobError) as info:
            await backend.check(request, "ada")
        messages.append(info.value.message)
    return messages


EVENTS = [
    {"reason": "FailedScheduling", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
    {"reason": "FailedScheduling", "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."},
    {"reason": "FailedScheduling", "message": "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."},
    {"reason": "Scheduled", "message": "Successfully assigned ns/pod to a100-1"},
    {"reason": "Pulling", "message": "Pulling image"},
    {"reason": "Pulled", "message": "Successfully pulled image in 12.5s (12.5s including waiting)"},
    {"reason": "Failed", "message": "Failed to pull image"},
    {"reason": "Created", "message": ""},
    {"reason": "Started", "message": ""},
    {"reason": "BackOff", "message": "Back-off restarting failed container"},
]  # fmt: skip


# What is free of a type: some, none, none with nodes, no node at all, spread over nodes.
CAPACITIES = (
    GPUCapacity(1, 4, 1),
    GPUCapacity(3, 4, 3),
    GPUCapacity(0, 4, 0, waiting=1),
    GPUCapacity(0, 0, 0),
    GPUCapacity(0, 0, None),
    GPUCapacity(3, 8, 1, waiting=2),
)


def progress_messages() -> Iterator[str]:
    for name in [*NAMES, ""]:
        for gpus in (0, 1, 2):
            request = SpawnRequest(
                image="PyTorch", gpus=gpus, gpu_name=name, gpu_resource="nvidia.com/gpu",
                cpu=1.0, memory=2**30,
            )  # fmt: skip
            for capacity in (None, *CAPACITIES):
                for event in EVENTS:
                    step = describe(event, request, capacity)
                    if step is not None:
                        yield step.message
                        yield timeout_message(step, 300)
                if gpus:
                    yield waiting_for_gpus(request, capacity)
    yield timeout_message(None, 60)


class _Spawner(LocalGPUSpawner):
    """A LocalGPUSpawner whose devices the test sets (no allocator, no hub)."""

    allocated_gpus: list[int] = []  # type: ignore[assignment]


def starting_messages() -> Iterator[str]:
    for name in NAMES:
        gpu_type = policy(name).gpu_types["gpu"]
        for devices in ([0], [0, 1]):
            spawner = _Spawner()
            spawner.allocated_gpus = devices
            spawner.launch_options = LaunchOptions(
                image=None, image_key=None, cpu=1, memory=2**30, gpus=len(devices),
                gpu_type=gpu_type,
            )  # fmt: skip
            yield spawner.starting_message()
    spawner = _Spawner()
    spawner.launch_options = LaunchOptions(None, None, 1, 2**30, 0, None)
    yield spawner.starting_message()
    yield spawner.progress_ready_hook(spawner, {"message": "Server ready at /user/a/"})["message"]


def test_every_message_reads_right(tmp_path: Path) -> None:
    import asyncio

    messages = [
        *option_refusals(),
        *job_refusals(tmp_path),
        *asyncio.run(local_backend_refusals(tmp_path)),
        *progress_messages(),
        *starting_messages(),
        *(words.gpus(n, name) for name in [*NAMES, ""] for n in (0, 1, 2)),
        JobNotFound("train-1e9fe9").message,
    ]
    assert len(messages) > 300
    bad = {m: problems(m) for m in set(messages) if problems(m)}
    assert not bad, "\n".join(f"{m}\n    -> {', '.join(p)}" for m, p in sorted(bad.items()))


def form_sentences() -> Iterator[str]:
    """What the spawn form builds in words: quota, what is free, limits, shares, and its whole
    text for types and images whose admin descriptions end in a full stop or do not."""
    for name in NAMES:
        for held in ((), (Holding("a", "server", "", 2, name, (0, 1)),)):
            for limit in (1, 2, 4):
                yield QuotaView(limit, held).sentence
        for capacity in CAPACITIES:
            yield capacity_text(capacity)
    for resources in RESOURCES:  # what the CPU and memory fields promise, on each platform
        words_ = resource_words(resources, {"min": "0.5", "max": "4"}, {"min": "1G", "max": "8G"})
        yield from (said for said in words_.values() if said)
    yield sentences("Up to 2 per server", "Fast GPUs.")
    yield sentences("Up to 2 per server.", "Fast GPUs")
    for description in ("Fast GPUs.", "Fast GPUs", "Shared by all. ", ""):
        config = {
            "images": {"py": {"display_name": "PyTorch", "image": "p:1", "description": description}},
            "gpu_types": {
                "a100": {"display_name": "A100", "max_gpus": 2, "description": description},
                "gone": {"display_name": "H100", "max_gpus": 1, "description": description},
                "shared": {
                    "display_name": "T4", "max_gpus": 1, "description": description,
                    "sharing": {"memory": "16G", "min": "1G"}, "resource_name": "nvidia.com/gpu",
                },
                "sliced": {"display_name": "L4", "max_gpus": 2, "sharing": {"replicas": 4}},
            },
            "default_limits": {"max_gpus": 2},
        }  # fmt: skip
        capacity = {
            "a100": GPUCapacity(0, 8, 0, waiting=1),
            "gone": GPUCapacity(0, 0, 0),
            "shared": GPUCapacity(0, 0, devices=0, memory_free=0, memory_total=0, largest_share=0),
            "sliced": GPUCapacity(0, 0, devices=0),
        }
        page = render_form(Policy.from_config(**config), [], capacity=capacity)
        yield from visible_text(page)


def notice_sentences() -> Iterator[str]:
    """What a user reads about their stopped servers and ended jobs: for the reasons gpuhub
    gives (a clause after "because"), and those an admin typed, ending in a full stop or not."""
    reasons = {
        "idle": ["its GPUs stayed below 5% for 2 hours"],
        SHARE_OVERUSE: ["its processes used 9 GB of GPU 3, more than its 8 GB share"],
        HUB_SHUTDOWN: ["1st in line for 1 A100 GPU"],
        "alice": ["Maintenance tonight", "Maintenance tonight."],
    }
    for by, said in reasons.items():
        for reason in said:
            for kind, jobs in (("server", ()), ("job", ("train-1",)), ("job", ())):
                notice = Notice("gpu", 1e9, reason, 1, "A100", by=by, kind=kind, jobs=jobs)
                yield notice_text(notice)["text"]
    hold = Holding("a", "job", "gpu", 1, "A100", (0,), processes=((4242, "python x.py"),))
    yield warning_text(hold, 2e9)["text"]


def test_no_sentence_gpuhub_builds_ends_twice_or_after_a_space(tmp_path: Path) -> None:
    """Issue 31: "..", or " ." where words were joined, in any sentence gpuhub builds: the
    refusals, progress, the spawn form (its whole text) and the notices."""
    messages = [
        *option_refusals(),
        *job_refusals(tmp_path),
        *progress_messages(),
        *starting_messages(),
        *form_sentences(),
        *notice_sentences(),
    ]
    assert len(messages) > 400
    bad = sorted({m for m in messages if loose_stop(m)})
    assert not bad, "\n".join(bad)


def test_the_form_and_progress_say_plainly_when_a_type_has_no_gpu() -> None:
    """Never "at most 0 together on one node": a type with no device says so, and a node's
    figure is said only where it adds to what is free."""
    said = [*form_sentences(), *progress_messages()]
    assert not [m for m in said if "at most 0" in m]
    ranges = {"min": "1", "max": "2"}
    assert [r for r in RESOURCES if "guaranteed" in str(resource_words(r, ranges, ranges))] == [
        "guaranteed"  # only where the platform reserves them (Kubernetes: request = limit)
    ]
    assert capacity_text(GPUCapacity(0, 0, 0)) == "No GPU of this type is online now"
    assert capacity_text(GPUCapacity(0, 8, 0, waiting=1)) == "0 of 8 free now; 1 person waiting"
    assert capacity_text(GPUCapacity(3, 8, 3)) == "3 of 8 free now"
    assert capacity_text(GPUCapacity(3, 8, 2)) == "3 of 8 free now; at most 2 together on one node"
    request = SpawnRequest(image="PyTorch", gpus=1, gpu_name="A100", gpu_resource="nvidia.com/gpu")
    assert waiting_for_gpus(request, GPUCapacity(0, 0, 0)) == (
        "Waiting for 1 free A100 GPU: no node has these GPUs now"
    )


def test_the_progress_page_names_the_gpus_assigned() -> None:
    spawner = _Spawner()
    spawner.allocated_gpus = [0, 1]
    spawner.launch_options = LaunchOptions(
        None, None, 1, 2**30, 2, policy("RTX A6000").gpu_types["gpu"]
    )
    assert spawner.starting_message() == "GPUs 0, 1 (RTX A6000) assigned; starting your server"
    spawner.allocated_gpus = [3]
    assert spawner.starting_message().startswith("GPU 3 (RTX A6000) assigned")
    # The ready event JupyterHub shows last says it too (its hook, escaped in HTML).
    spawner.allocated_gpus = [0, 1]
    hook = spawner.progress_ready_hook
    event = hook(spawner, {"message": "Server ready at /user/a/", "html_message": "Server ready"})
    assert event["message"] == "Server ready at /user/a/ with GPUs 0, 1 (RTX A6000)"
    # On a cluster the indices are the device plugin's business: the count and type.
    spawner.allocated_gpus = []
    assert spawner.starting_message() == "2 RTX A6000 GPUs assigned; starting your server"


@pytest.mark.parametrize(
    ("count", "name", "said"),
    [
        (2, "NVIDIA A100 80GB", "2 NVIDIA A100 80GB GPUs"),
        (1, "NVIDIA GPU", "1 NVIDIA GPU"),
        (2, "NVIDIA GPU", "2 NVIDIA GPUs"),
        (2, "Simulated GPU", "2 Simulated GPUs"),
        (1, "", "1 GPU"),
    ],
)
def test_gpu_counts_never_double_the_word(count: int, name: str, said: str) -> None:
    assert words.gpus(count, name) == said
