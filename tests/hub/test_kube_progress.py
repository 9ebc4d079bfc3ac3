"""gpuhub.hub.progress: Kubernetes events in words (no cluster needed)."""

from __future__ import annotations

import pytest

from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.progress import SpawnRequest, describe, parse_fit_error, timeout_message

A100 = SpawnRequest(
    image="PyTorch 2 + CUDA 12",
    gpus=2,
    gpu_name="NVIDIA A100 80GB",
    gpu_resource="nvidia.com/gpu",
    cpu=4,
    memory=16 * 2**30,
)
CPU_ONLY = SpawnRequest(image="SciPy (CPU)", cpu=2, memory=8 * 2**30)
PREEMPT = " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."


def event(reason: str, message: str, type_: str = "Normal") -> dict:
    return {"reason": reason, "message": message, "type": type_, "metadata": {"uid": "u"}}


def test_parse_fit_error():
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 Insufficient nvidia.com/gpu."
        + PREEMPT
    )
    assert parse_fit_error(message) == (
        3,
        {
            "node(s) had untolerated taint {nvidia.com/gpu: present}": 1,
            "Insufficient nvidia.com/gpu": 2,
        },
    )
    assert parse_fit_error("no nodes available to schedule pods") == (0, {})
    real = (  # as a 2024 cluster printed it, double period included
        "0/36 nodes are available: 3 node(s) were unschedulable, 33 Insufficient nvidia.com/gpu. "
        "preemption: 0/36 nodes are available: 1 Insufficient nvidia.com/gpu, 3 Preemption is not "
        "helpful for scheduling, 32 No preemption victims found for incoming pod.."
    )
    assert parse_fit_error(real) == (
        36,
        {"node(s) were unschedulable": 3, "Insufficient nvidia.com/gpu": 33},
    )
    assert parse_fit_error("something else") is None


def test_waiting_for_gpus_with_free_count():
    step = describe(
        event(
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." + PREEMPT,
            "Warning",
        ),
        A100,
        GPUCapacity(free=1, total=16, largest_free=1),
    )
    assert step is not None
    assert step.message == "Waiting for 2 free NVIDIA A100 80GB GPUs (1 free now)"
    assert step.waiting_for_gpus and not step.fatal


def test_waiting_for_gpus_spread_over_nodes():
    step = describe(
        event(
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." + PREEMPT,
            "Warning",
        ),
        A100,
        GPUCapacity(free=3, total=16, largest_free=1),
    )
    assert step is not None
    assert (
        step.message
        == "Waiting for 2 free NVIDIA A100 80GB GPUs on one node (3 free now, at most 1 on one node)"
    )


def test_waiting_for_gpus_without_figures():
    step = describe(
        event(
            "FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.", "Warning"
        ),
        A100,
        None,
    )
    assert step is not None and step.message == "Waiting for 2 free NVIDIA A100 80GB GPUs"


def test_waiting_for_cpu_and_memory():
    step = describe(
        event(
            "FailedScheduling",
            "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory." + PREEMPT,
            "Warning",
        ),
        CPU_ONLY,
    )
    assert step is not None and step.message == "Waiting for a node with 2 CPU and 8Gi memory free"
    assert not step.fatal


def test_unresolvable_is_fatal_and_explained():
    message = "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    step = describe(event("FailedScheduling", message, "Warning"), A100)
    assert step is not None and step.fatal
    assert step.message == (
        "No node in the cluster can run this server: 1 node without NVIDIA A100 80GB GPUs, "
        "2 nodes reserved ({nvidia.com/gpu: present}) for other work."
    )
    assert describe(
        event("FailedScheduling", "no nodes available to schedule pods", "Warning"), A100
    ).fatal  # type: ignore[union-attr]


def test_mixed_reasons_keep_waiting():
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {x: }, 2 Insufficient nvidia.com/gpu."
        + PREEMPT
    )
    step = describe(event("FailedScheduling", message, "Warning"), A100, GPUCapacity(0, 16, 0))
    assert (
        step is not None
        and not step.fatal
        and step.message == "Waiting for 2 free NVIDIA A100 80GB GPUs (0 free now)"
    )


@pytest.mark.parametrize(
    ("reason", "message", "expected"),
    [
        (
            "Scheduled",
            "Successfully assigned default/jupyter-ada to a100-1",
            "2 NVIDIA A100 80GB GPUs reserved on node a100-1",
        ),
        (
            "Pulling",
            'Pulling image "quay.io/jupyter/pytorch-notebook:cuda12"',
            "Pulling image PyTorch 2 + CUDA 12 (this can take a few minutes the first time)",
        ),
        (
            "Pulled",
            'Successfully pulled image "x" in 1m3.2s (1m3.2s including waiting). Image size: 5 bytes.',
            "Pulled image PyTorch 2 + CUDA 12 in 1 min 3 s",
        ),
        (
            "Pulled",
            'Successfully pulled image "x" in 12.4s (12.4s including waiting). Image size: 5 bytes.',
            "Pulled image PyTorch 2 + CUDA 12 in 12 s",
        ),
        (
            "Pulled",
            'Container image "x" already present on machine',
            "Image PyTorch 2 + CUDA 12 is already on the node",
        ),
        ("Created", "Created container notebook", "Creating your server's container"),
        ("Started", "Started container notebook", "Server started; waiting for Jupyter to answer"),
    ],
)
def test_kubelet_steps(reason, message, expected):
    step = describe(event(reason, message), A100)
    assert step is not None and step.message == expected and not step.fatal


def test_progress_increases_through_a_normal_spawn():
    steps = [
        describe(event("Scheduled", "Successfully assigned a/b to n"), A100),
        describe(event("Pulling", "Pulling image"), A100),
        describe(event("Pulled", "Successfully pulled image"), A100),
        describe(event("Created", "Created container notebook"), A100),
        describe(event("Started", "Started container notebook"), A100),
    ]
    values = [s.progress for s in steps if s]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_cpu_only_scheduled():
    step = describe(event("Scheduled", "Successfully assigned default/x to cpu-0"), CPU_ONLY)
    assert step is not None and step.message == "Assigned to node cpu-0"


def test_image_pull_failure_is_fatal():
    step = describe(
        event("Failed", 'Failed to pull image "x": rpc error: not found', "Warning"), A100
    )
    assert step is not None and step.fatal
    assert (
        step.message
        == "Could not pull image PyTorch 2 + CUDA 12: it does not exist or this cluster may not read it."
    )


def test_quiet_events_and_unknown_warnings():
    assert describe(event("Killing", "Stopping container notebook"), A100) is None
    assert describe(event("SomethingNormal", "fine"), A100) is None
    step = describe(event("FailedMount", "MountVolume.SetUp failed", "Warning"), A100)
    assert step is not None and step.message == "FailedMount: MountVolume.SetUp failed"


def test_kueues_events_on_a_queued_pod_are_not_the_containers():
    """Kueue's pod integration reports on the pods it queues: its "Started" is the admission
    (the container has not started), and its words ("Created Workload: ns/pod-jupyter-…")
    are the admin's."""
    kueue = {"source": {"component": "pod-kueue-controller"}}
    admitted = {**event("Started", "Admitted by clusterQueue team-gpus"), **kueue}
    step = describe(admitted, A100)
    assert step is not None and step.progress < 30 and not step.fatal
    assert step.message == "Admitted by Kueue; placing your server on a node"
    created = {**event("CreatedWorkload", "Created Workload: ns/pod-jupyter-ada-85c29"), **kueue}
    assert describe(created, A100) is None
    stopped = {**event("Stopped", "Preempted to accommodate a workload", "Warning"), **kueue}
    assert describe(stopped, A100) is None
    reporting = {**event("Started", "Admitted"), "reportingComponent": "kueue-admission"}
    assert describe(reporting, A100) == step
    kubelet = {**event("Started", "Started container notebook"), "source": {"component": "kubelet"}}
    assert describe(kubelet, A100).progress == 90  # type: ignore[union-attr]


def test_timeout_messages():
    waiting = describe(
        event(
            "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "Warning"
        ),
        A100,
        GPUCapacity(1, 16, 1),
    )
    assert timeout_message(waiting, 300) == (
        "Your server did not start within 5 minutes: waiting for 2 free NVIDIA A100 80GB GPUs (1 free now). "
        "Try fewer GPUs or another GPU type, or try again later."
    )
    pulling = describe(event("Pulling", "Pulling image"), A100)
    assert "the image was still being pulled" in timeout_message(pulling, 600)
    assert (
        timeout_message(None, 90)
        == "Your server did not start within 90 seconds, and the cluster reported no progress."
    )


def test_waiting_when_gpus_just_became_free():
    step = describe(
        event(
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." + PREEMPT,
            "Warning",
        ),
        A100,
        GPUCapacity(free=7, total=16, largest_free=6),
    )
    assert (
        step is not None and step.message == "2 NVIDIA A100 80GB GPUs free now; placing your server"
    )
