"""A booking's Kueue objects (gpuhub.k8s.kueue_bookings): the hub's ClusterQueue with quota
moved out and recorded, the booking's ClusterQueue and LocalQueue. Pure: no cluster."""

from __future__ import annotations

import json
from typing import Any

from gpuhub.k8s import kueue_bookings as kb


def main_queue(gpus: Any = 4, cohort: str = "team", version: str = "v1beta1") -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpus", "resourceVersion": "7", "managedFields": [{}]},
        "spec": {
            kb.cohort_key(version): cohort,
            "namespaceSelector": {"matchLabels": {"team": "ml"}},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "256Gi"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": gpus, "lendingLimit": 2}
                            ],
                        },
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                        },
                    ],
                },
            ],
        },
        "status": {"admittedWorkloads": 3},
    }


def test_queue_names_are_dns_labels() -> None:
    assert kb.queue_name("b-1a2b3c4d") == "gpuhub-booking-b-1a2b3c4d"
    odd = kb.queue_name("B_1/../x")
    assert odd.startswith("gpuhub-booking-") and kb._NAME.fullmatch(odd)
    assert odd != kb.queue_name("B_1/../y")
    assert kb.label_value("b-1a2b3c4d") == "b-1a2b3c4d"


def test_cohort_in_either_version() -> None:
    assert kb.cohort_of(main_queue(version="v1beta1")) == "team"
    assert kb.cohort_of(main_queue(version="v1beta2")) == "team"
    assert kb.cohort_of(main_queue(cohort="")) == ""


def test_nominal_and_flavors() -> None:
    queue = main_queue(gpus="4")
    assert kb.nominal(queue, "a100", "nvidia.com/gpu") == 4
    assert kb.nominal(queue, "h100", "nvidia.com/gpu") == 8
    assert kb.nominal(queue, "a100", "amd.com/gpu") is None
    assert kb.nominal(main_queue(gpus="1500m"), "a100", "nvidia.com/gpu") is None
    assert kb.flavors_with(queue, "nvidia.com/gpu") == ["a100", "h100"]


def test_pick_flavor_by_the_types_node_labels() -> None:
    queue = main_queue()
    labels = {"a100": {"gpu": "a100"}, "h100": {"gpu": "h100"}}
    assert kb.pick_flavor(queue, "nvidia.com/gpu", {"gpu": "h100"}, labels) == "h100"
    # Two flavors and nothing to tell them apart: none is guessed.
    assert kb.pick_flavor(queue, "nvidia.com/gpu", {}, labels) is None
    assert kb.pick_flavor(queue, "nvidia.com/gpu", {"gpu": "h100"}, {}) is None
    assert kb.pick_flavor(queue, "cpu", {}, {}) == "default"
    assert kb.pick_flavor(queue, "amd.com/gpu", {}, {}) is None


def test_moving_quota_out_and_back_is_recorded_on_the_queue() -> None:
    queue = main_queue()
    move = kb.Move("b-1", "a100", "nvidia.com/gpu", 3)
    moved = kb.moved_main(queue, {"b-1": move})
    assert moved is not None
    assert kb.nominal(moved, "a100", "nvidia.com/gpu") == 1
    # Its lendingLimit (2) may not stay above the nominal quota: lowered by what it can, 2.
    assert moved["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["lendingLimit"] == 0
    taken = {(t.flavor, t.resource): t for t in kb.booked_out(moved)["b-1"].taken}
    assert taken[("a100", "nvidia.com/gpu")].lent == 2
    # The booked GPUs' share (3 of 4) of what is no GPU goes with them: the booking's queue
    # holds all its work asks for (Kueue reclaims only for work that fits there).
    assert taken[("default", "cpu")].quota == 48
    assert taken[("default", "memory")].quota == 192 * 2**30
    assert ("h100", "nvidia.com/gpu") not in taken
    cpu = moved["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert cpu == [
        {"name": "cpu", "nominalQuota": 16},
        {"name": "memory", "nominalQuota": 64 * 2**30},
    ]
    assert kb.nominal(moved, "h100", "nvidia.com/gpu") == 8  # another flavor: untouched
    assert moved["metadata"]["resourceVersion"] == "7"  # an update, refused if changed since
    assert "status" not in moved and "managedFields" not in moved["metadata"]
    assert kb.booked_out(moved) == {"b-1": move}
    assert json.loads(moved["metadata"]["annotations"][kb.BOOKED_OUT])["b-1"]["gpus"] == 3
    assert kb.booked_out(moved)["b-1"].taken == kb.booked_out(moved)["b-1"].taken  # read back
    assert kb.nominal(queue, "a100", "nvidia.com/gpu") == 4  # the input is not changed

    # Run again with the same wish: nothing to write (idempotent).
    assert kb.moved_main(moved, {"b-1": move}) is None

    # A second booking; then the first ends: only its GPUs come back.
    other = kb.Move("b-2", "h100", "nvidia.com/gpu", 5)
    both = kb.moved_main(moved, {"b-1": move, "b-2": other})
    assert both is not None
    assert kb.nominal(both, "a100", "nvidia.com/gpu") == 1
    assert kb.nominal(both, "h100", "nvidia.com/gpu") == 3
    second = kb.moved_main(both, {"b-2": other})
    assert second is not None
    assert kb.nominal(second, "a100", "nvidia.com/gpu") == 4
    assert kb.booked_out(second) == {"b-2": other}

    # All back: the queue is as it was, the record gone.
    back = kb.moved_main(second, {})
    assert back is not None
    assert kb.nominal(back, "h100", "nvidia.com/gpu") == 8
    assert kb.BOOKED_OUT not in back["metadata"]["annotations"]
    assert back["spec"] == queue["spec"]


def test_a_damaged_record_is_read_as_nothing_moved() -> None:
    queue = main_queue()
    lent_more = {"flavor": "a", "resource": "r", "quota": "1", "lent": "2"}
    bad = [
        {"b-1": {"gpus": "3"}},
        {"b-1": 7},
        {"b-1": {"flavor": "a", "resource": "r", "gpus": 1, "taken": [lent_more]}},
        {
            "b-1": {
                "flavor": "a",
                "resource": "r",
                "gpus": 1,
                "taken": [{**lent_more, "quota": "x"}],
            }
        },
    ]
    for raw in ("{", "[]", *(json.dumps(b) for b in bad)):
        queue["metadata"]["annotations"] = {kb.BOOKED_OUT: raw}
        assert kb.booked_out(queue) == {}, raw


def test_booking_cluster_queue_has_only_the_booked_gpus_and_reclaims_them() -> None:
    for version in ("v1beta1", "v1beta2"):
        main = main_queue(version=version)
        moved = kb.moved_main(main, {"b-1": kb.Move("b-1", "a100", "nvidia.com/gpu", 2)})
        assert moved is not None
        move = kb.booked_out(moved)["b-1"]
        queue = kb.booking_cluster_queue(main, move, version)
        assert queue["apiVersion"] == f"kueue.x-k8s.io/{version}"
        assert queue["metadata"]["name"] == "gpuhub-booking-b-1"
        assert queue["metadata"]["labels"][kb.BOOKING_LABEL] == "b-1"
        assert queue["metadata"]["annotations"][kb.BOOKING_OF_ANNOTATION] == "gpus"
        spec = queue["spec"]
        assert spec[kb.cohort_key(version)] == "team"
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"
        assert spec["namespaceSelector"] == {"matchLabels": {"team": "ml"}}
        quotas = {
            (f["name"], r["name"]): r
            for g in spec["resourceGroups"]
            for f in g["flavors"]
            for r in f["resources"]
        }
        assert quotas[("a100", "nvidia.com/gpu")] == {"name": "nvidia.com/gpu", "nominalQuota": 2}
        assert quotas[("h100", "nvidia.com/gpu")]["nominalQuota"] == 0
        # Half the GPUs: half the CPU and memory, in the booking's queue.
        assert quotas[("default", "cpu")]["nominalQuota"] == 32
        assert quotas[("default", "memory")]["nominalQuota"] == 128 * 2**30
        assert kb.has_quota(queue)
        assert not kb.has_quota(kb.without_quota(queue))

    local = kb.booking_local_queue("b-1", "hub", "v1beta2", for_user="Ada", gpu_type="a100")
    assert local["metadata"] == {
        "name": "gpuhub-booking-b-1",
        "namespace": "hub",
        "labels": {"app.kubernetes.io/managed-by": "gpuhub", kb.BOOKING_LABEL: "b-1"},
        "annotations": {kb.BOOKING_USER: "Ada", kb.BOOKING_GPU_TYPE: "a100"},
    }
    assert local["spec"] == {"clusterQueue": "gpuhub-booking-b-1"}
    group = kb.booking_local_queue("b-2", "hub", "v1beta2", for_group="staff", gpu_type="a100")
    assert group["metadata"]["annotations"][kb.BOOKING_GROUP] == "staff"


def test_a_jobs_queue_is_its_owners_booking_of_its_type() -> None:
    queues = [
        kb.booking_local_queue("b-2", "hub", "v1beta2", for_user="ada", gpu_type="h100"),
        kb.booking_local_queue("b-1", "hub", "v1beta2", for_user="ada", gpu_type="a100"),
        kb.booking_local_queue("b-3", "hub", "v1beta2", for_group="staff", gpu_type="a100"),
    ]
    assert kb.job_queue(queues, "ada", "a100") == "gpuhub-booking-b-1"
    assert kb.job_queue(queues, "ada", "h100") == "gpuhub-booking-b-2"
    assert kb.job_queue(queues, "ada", "v100") == ""
    assert kb.job_queue(queues, "bob", "a100") == ""  # a group's booking: not from here yet
    going = kb.booking_local_queue("b-1", "hub", "v1beta2", for_user="ada", gpu_type="a100")
    going["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert kb.job_queue([going], "ada", "a100") == ""
    assert kb.job_queue([{"metadata": {"name": "team", "annotations": {}}}], "ada", "a100") == ""
