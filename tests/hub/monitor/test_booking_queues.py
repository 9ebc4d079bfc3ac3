"""Bookings on a Kueue hub (gpuhub.hub.monitor.booking_queues) against the test cluster's real
Kueue 0.19: for its window a booking's GPUs move from the hub's ClusterQueue into one of its
own, Kueue preempts the work borrowing them when the booker's work arrives, and at the end
(or when the booking is deleted early) the quota goes back and the booking's queues go.

The reconciler runs as the hub's monitor runs it, on a tick (here every 0.3 s, as its own
task); the test's clock can be moved on to pass a booking's end without waiting for it.
Batch Jobs on kwok's fake A100s stand for servers and jobs: Kueue treats both alike.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gpuhub.core.bookings import Booking
from gpuhub.core.policy import GPUType
from gpuhub.hub.monitor import booking_queues
from gpuhub.k8s import kueue_bookings as kb
from harness.cluster import GPU_TOLERATION, KWOK_TOLERATION, Kube
from tests.support.kueue import A100, KUEUE, kueue_queues

pytestmark = pytest.mark.e2e

QUEUE = "gpus"
TYPES = {"a100": GPUType("a100", "A100", "nvidia.com/gpu", 2, A100)}


def gpu_job(name: str, queue: str) -> dict[str, Any]:
    """A suspended batch Job asking for one A100 in Kueue's LocalQueue ``queue``."""
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "100m"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": A100,
                    "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
                    "containers": [container],
                }
            },
        },
    }


def workload_of(kube: Kube, job: str) -> dict[str, Any] | None:
    for workload in kube.list("Workload", api_version=KUEUE):
        if any(r.get("name") == job for r in workload["metadata"].get("ownerReferences") or []):
            return workload
    return None


def condition(kube: Kube, job: str, kind: str) -> dict[str, Any] | None:
    """The ``kind`` condition (True) of ``job``'s Workload, or None."""
    for found in ((workload_of(kube, job) or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind and found["status"] == "True":
            return found
    return None


def gpu_quota(kube: Kube, name: str) -> int | None:
    queue = kube.get("ClusterQueue", name, api_version=KUEUE)
    return None if queue is None else kb.nominal(queue, queue_flavor(kube), "nvidia.com/gpu")


def queue_flavor(kube: Kube) -> str:
    return f"{kube.namespace}-a100"


async def until(test: Callable[[], Any], timeout: float = 90) -> Any:
    """Poll ``test`` (blocking calls, in a thread) until it gives something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        found = await asyncio.to_thread(test)
        if found:
            return found
        assert time.monotonic() < deadline, f"not so within {timeout} s: {test}"
        await asyncio.sleep(0.2)


class Ticker:
    """The monitor's tick: reconcile the bookings in ``bookings`` at the test's clock."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.bookings: list[Booking] = []
        self.ahead = 0.0  # seconds the clock is moved on
        self.errors: list[BaseException] = []
        self.runs = 0
        self.takes = True  # whether the hub takes bookings (its ``bookings`` trait is set)

    def now(self) -> float:
        return time.time() + self.ahead

    async def run(self) -> None:
        while True:
            try:
                await booking_queues.reconcile(
                    self.api,
                    self.namespace,
                    QUEUE,
                    list(self.bookings),
                    TYPES,
                    self.now(),
                    self.takes,
                )
            except Exception as exc:  # kept: the test fails on it, rather than hiding it
                self.errors.append(exc)
            self.runs += 1
            await asyncio.sleep(0.3)

    async def ticked(self) -> None:
        """Wait for a whole tick after this moment (its result then reflects it)."""
        seen = self.runs
        await until(lambda: self.runs >= seen + 2, 30)
        assert not self.errors, self.errors


@pytest.fixture
async def ticker(kube: Kube, kube_api: Any) -> AsyncIterator[Ticker]:
    queues = kueue_queues(kube, gpus=2, local_queue=QUEUE, cpu=8, memory="16Gi")
    # The hub's ClusterQueue in a cohort: what a booking's queue reclaims, it reclaims there.
    kube.patch(
        "ClusterQueue",
        queues.cluster_queue,
        {"spec": {"cohort": kube.namespace}},
        api_version=KUEUE,
    )
    ticker = Ticker(kube_api, kube.namespace)
    task = asyncio.ensure_future(ticker.run())
    try:
        yield ticker
    finally:
        task.cancel()
        # Nothing stays moved: every booking's quota goes back and its queues go.
        await booking_queues.reconcile(kube_api, kube.namespace, QUEUE, [], TYPES)
        for queue in kube.list("ClusterQueue", api_version=KUEUE):
            of = (queue["metadata"].get("annotations") or {}).get(kb.BOOKING_OF_ANNOTATION)
            if of == queues.cluster_queue:
                kube.delete("ClusterQueue", queue["metadata"]["name"], api_version=KUEUE)


def booking(start: float, end: float, user: str = "ada") -> Booking:
    return Booking(f"b-{secrets.token_hex(4)}", "a100", 1, start, end, for_user=user)


async def test_a_booking_takes_its_quota_for_its_window_and_kueue_preempts_borrowers(
    kube: Kube, kube_api: Any, ticker: Ticker
) -> None:
    main = f"{kube.namespace}-gpus"
    # Before the booking: two borrowers' jobs hold both of the queue's GPUs.
    for name in ("borrower-1", "borrower-2"):
        kube.create(gpu_job(name, QUEUE))
    await until(lambda: all(condition(kube, n, "Admitted") for n in ("borrower-1", "borrower-2")))

    # A booking for ada starting in a few seconds: until then its GPU stays in the hub's
    # queue (lent), and nothing is made.
    mine = booking(time.time() + 8, time.time() + 3600)
    name = kb.queue_name(mine.id)
    ticker.bookings.append(mine)
    await ticker.ticked()
    if ticker.now() < mine.start:
        assert kube.get("ClusterQueue", name, api_version=KUEUE) is None
        assert gpu_quota(kube, main) == 2
    assert (
        await booking_queues.queue_for(
            kube_api,
            kube.namespace,
            [mine],
            lambda b, u: u == b.for_user,
            "ada",
            "a100",
            mine.start - 1,
        )
        == ""
    )

    # At the start: the booking's ClusterQueue has the GPU, the hub's has lost it.
    await until(lambda: gpu_quota(kube, name) == 1)
    assert gpu_quota(kube, main) == 1
    booked = kube.get("ClusterQueue", name, api_version=KUEUE)
    assert booked is not None and kb.cohort_of(booked) == kube.namespace
    hub_queue = kube.get("ClusterQueue", main, api_version=KUEUE)
    assert hub_queue is not None and set(kb.booked_out(hub_queue)) == {mine.id}
    await until(lambda: kube.get("LocalQueue", name, api_version=KUEUE))

    # ada's work goes to the booking's queue; someone else's does not.
    def is_for(b: Booking, user: str) -> bool:
        return user == b.for_user

    assert (
        await booking_queues.queue_for(kube_api, kube.namespace, [mine], is_for, "ada", "a100")
        == name
    )
    assert (
        await booking_queues.queue_for(kube_api, kube.namespace, [mine], is_for, "bob", "a100")
        == ""
    )
    kube.create(gpu_job("booked", name))

    # Kueue preempts one borrower (the hub's queue is over its lowered quota) and admits
    # ada's job in the booking's queue.
    await until(lambda: condition(kube, "booked", "Admitted"))
    evicted = [n for n in ("borrower-1", "borrower-2") if condition(kube, n, "Evicted")]
    assert len(evicted) == 1, evicted
    assert (condition(kube, evicted[0], "Evicted") or {}).get("reason") == "Preempted"
    still = ({"borrower-1", "borrower-2"} - set(evicted)).pop()
    assert condition(kube, still, "Admitted")

    # The booking ends (the clock moved past it): the GPU is back in the hub's queue, the
    # booking's LocalQueue goes, and its ClusterQueue, with no quota, goes once ada's job is
    # done.
    ticker.ahead = mine.end - time.time() + 1
    await until(lambda: gpu_quota(kube, main) == 2)
    hub_queue = kube.get("ClusterQueue", main, api_version=KUEUE)
    assert hub_queue is not None and kb.booked_out(hub_queue) == {}
    await until(lambda: kube.get("LocalQueue", name, api_version=KUEUE) is None)
    assert gpu_quota(kube, name) in (0, None)
    kube.delete("Job", "booked", propagationPolicy="Background")
    await until(lambda: kube.get("ClusterQueue", name, api_version=KUEUE) is None)
    # With the quota back, Kueue admits the preempted borrower again.
    await until(lambda: condition(kube, evicted[0], "Admitted"))


async def test_a_booking_deleted_early_gives_its_quota_back(
    kube: Kube, kube_api: Any, ticker: Ticker
) -> None:
    main = f"{kube.namespace}-gpus"
    mine = booking(time.time() - 1, time.time() + 3600, user="cy")
    name = kb.queue_name(mine.id)
    ticker.bookings.append(mine)
    await until(lambda: gpu_quota(kube, name) == 1)
    assert gpu_quota(kube, main) == 1
    await until(lambda: kube.get("LocalQueue", name, api_version=KUEUE))

    ticker.bookings.remove(mine)  # deleted: DELETE /hub/api/gpuhub/bookings/<id>
    await until(lambda: gpu_quota(kube, main) == 2)
    await until(lambda: kube.get("ClusterQueue", name, api_version=KUEUE) is None)
    assert kube.get("LocalQueue", name, api_version=KUEUE) is None

    # A hub restarted without bookings (the trait unset, the file gone) still gives back
    # what a booking of its last run had moved out, as the hub's ClusterQueue records it.
    again = booking(time.time() - 1, time.time() + 3600, user="cy")
    ticker.bookings.append(again)
    await until(lambda: gpu_quota(kube, main) == 1)
    ticker.takes = False
    ticker.bookings.clear()
    await until(lambda: gpu_quota(kube, main) == 2)
    await until(
        lambda: kube.get("ClusterQueue", kb.queue_name(again.id), api_version=KUEUE) is None
    )
