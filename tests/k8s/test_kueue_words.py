"""What a spawn page and a queued job say while they wait in Kueue's queue: what is in use
of the queue's GPUs and by how many, the place in line and what is in front, Kueue's reasons
read structurally; and when Kueue holds a pod back (pure functions of gpuhub.k8s.kueue; the
real queues are in tests/hub/test_kube_kueue_servers.py and tests/jobs/test_jobs_kueue.py)."""

from __future__ import annotations

from gpuhub.k8s.kueue import (
    ADMISSION_GATE,
    Pending,
    QueueUse,
    Shortage,
    gated,
    in_front,
    queue_use,
    shortages,
    waiting_words,
)


def pending(position: int, kind: str) -> Pending:
    return Pending(f"w{position}", position, ((kind, f"o{position}", f"u{position}"),))


def test_in_front_names_what_waits_ahead_servers_first() -> None:
    line = [
        pending(1, "PyTorchJob"),
        pending(2, "Pod"),
        pending(3, "Job"),
        pending(4, "Pod"),
        pending(5, "Pod"),
    ]
    assert in_front(line, 1) == ""
    assert in_front(line, 2) == "1 job"
    assert in_front(line, 4) == "1 server and 2 jobs"
    assert in_front(line, 6) == "3 servers and 2 jobs"
    odd = [*line[:2], Pending("w9", 3, (("RayCluster", "r", "u"),)), Pending("w8", 4, ())]
    assert in_front(odd, 5) == "1 server, 1 job and 2 workloads"


def test_gated_reads_kueues_admission_gate_only() -> None:
    assert gated({"spec": {"schedulingGates": [{"name": ADMISSION_GATE}]}})
    assert not gated({"spec": {"schedulingGates": [{"name": "example.com/other"}]}})
    assert not gated({"spec": {}})
    assert not gated(None)


# -- what a queue's ClusterQueue has and what is taken of it ------------------------------------
CLUSTER_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "team-gpus"},
    "spec": {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": "default",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "64"},
                            {"name": "memory", "nominalQuota": "256Gi"},
                        ],
                    }
                ],
            },
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]},
                    {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]},
                ],
            },
        ]
    },
    "status": {
        "reservingWorkloads": 3,
        "admittedWorkloads": 3,
        "flavorsReservation": [
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "4"}]},
            {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "1"}]},
            {"name": "default", "resources": [{"name": "cpu", "total": "3500m"}]},
        ],
    },
}
GPU = "nvidia.com/gpu"


def test_a_cluster_queues_quota_and_what_is_taken() -> None:
    use = queue_use(CLUSTER_QUEUE)
    assert use.cluster_queue == "team-gpus" and use.workloads == 3
    assert use.of(GPU, "a100") == (4.0, 4.0)
    assert use.of(GPU) == (5.0, 6.0)  # every flavor of it
    assert use.of(GPU, "unknown-flavor") == (5.0, 6.0)
    assert use.of("cpu") == (3.5, 64.0)
    assert use.of("nvidia.com/mig-1g.10gb") is None  # no quota for it here
    empty = queue_use({"metadata": {"name": "new"}, "spec": {}})
    assert empty.of(GPU) is None and empty.workloads == 0


# -- Kueue's reasons, read structurally -----------------------------------------------------------
def test_kueues_reasons_are_read_by_pod_set() -> None:
    one = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor a100, 1 more needed"
    )
    assert shortages(one) == [Shortage(GPU, "a100", 1)]
    two = (
        "couldn't assign flavors to pod set master: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 2 more needed; couldn't assign flavors to pod set "
        "worker: insufficient quota for nvidia.com/gpu in flavor a100, request > maximum "
        "capacity (16 > 4)"
    )
    assert shortages(two) == [
        Shortage(GPU, "a100", 2),
        Shortage(GPU, "a100", None, never=True),
    ]
    assert shortages("LocalQueue gpus doesn't exist") == []
    assert shortages("") == []


# -- one builder of the words, for the spawn page and for jobs ------------------------------------
def test_the_spawn_page_says_what_is_in_use_and_the_place() -> None:
    use = queue_use(CLUSTER_QUEUE)
    line = [pending(1, "PyTorchJob"), pending(2, "Pod")]
    said = waiting_words(
        "gpus", gpus=1, gpu_name="NVIDIA A100", resource=GPU, use=use, place=2, line=line
    )
    assert said == (
        'Waiting in queue "gpus" for 1 NVIDIA A100 GPU: 5 of 6 NVIDIA A100 GPUs in use by '
        "3 jobs and servers (1 free); you are 2nd in line, behind 1 job."
    )
    full = QueueUse("q", {("f", GPU): 4.0}, {("f", GPU): 4.0}, 3)
    assert waiting_words("gpus", gpus=1, resource=GPU, use=full, place=1, line=[]) == (
        'Waiting in queue "gpus" for 1 GPU: 4 of 4 GPUs in use by 3 jobs and servers; '
        "you are 1st in line."
    )
    one = QueueUse("q", {("f", GPU): 1.0}, {("f", GPU): 1.0}, 1)
    assert waiting_words(
        "servers", gpus=1, gpu_name="Simulated GPU", resource=GPU, use=one, line=None
    ) == (
        'Waiting in queue "servers" for 1 Simulated GPU: 1 of 1 Simulated GPU in use by 1 job '
        "or server; its place in line cannot be read."
    )
    assert waiting_words("servers", gpus=1, resource=GPU, line=[]) == (
        'Waiting in queue "servers" for 1 GPU: Kueue has not given it a place in line yet.'
    )


def test_a_queued_jobs_words_leave_the_place_to_its_status() -> None:
    full = QueueUse("q", {("a100", GPU): 8.0}, {("a100", GPU): 8.0}, 2)
    said = waiting_words(
        "gpu-jobs", gpus=4, gpu_name="A100", resource=GPU, use=full, say_place=False
    )
    assert (
        said
        == 'Waiting in queue "gpu-jobs" for 4 A100 GPUs: 8 of 8 A100 GPUs in use by 2 jobs and servers.'
    )
    never = Shortage(GPU, "a100", None, never=True)
    assert waiting_words(
        "gpu-jobs",
        gpus=16,
        gpu_name="A100",
        resource=GPU,
        use=full,
        shortage=never,
        say_place=False,
    ) == (
        'Waiting in queue "gpu-jobs" for 16 A100 GPUs: the queue has 8 A100 GPUs in all, fewer '
        "than asked for, so it cannot start: ask for fewer, or ask your admin for more quota."
    )
    # The queue's figures unreadable (not allowed): what Kueue said it lacks, in words.
    more = Shortage(GPU, "a100", 4)
    assert (
        waiting_words(
            "gpu-jobs", gpus=4, gpu_name="A100", resource=GPU, shortage=more, say_place=False
        )
        == 'Waiting in queue "gpu-jobs" for 4 A100 GPUs: 4 A100 GPUs more must come free first.'
    )
    assert waiting_words("gpu-jobs", gpus=0, say_place=False) == 'Waiting in queue "gpu-jobs".'
