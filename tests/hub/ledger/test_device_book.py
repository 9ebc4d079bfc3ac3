"""The local device book directly: allocation, job holds of surviving processes, persistence."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpuhub.core.holdings import gpus_held
from gpuhub.hub.ledger.device_book import (
    GPUAllocator,
    Holder,
    NotEnoughGPUs,
    jobs_key,
    server_key,
)
from tests.support.processes import identity, sleeping_process


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process standing in for a job that outlives its server."""
    with sleeping_process() as proc:
        yield proc


def process(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    return identity(proc)


def test_allocation_is_disjoint_and_refuses_what_is_not_free() -> None:
    book = GPUAllocator()
    alice = server_key("alice", "")
    bob = server_key("bob", "")
    assert book.allocate(alice, 2, [0, 1, 2], Holder("alice", "server", "")) == [0, 1]
    assert book.allocate(bob, 1, [0, 1, 2], Holder("bob", "server", "")) == [2]
    with pytest.raises(NotEnoughGPUs) as refused:
        book.allocate(server_key("carol", ""), 1, [0, 1, 2])
    assert (refused.value.free, refused.value.total) == (0, 3)
    # A server started again gives back what it had before taking anew.
    assert book.allocate(alice, 1, [0, 1, 2], Holder("alice", "server", "")) == [0]
    assert book.free([0, 1, 2]) == [1]


def test_survivors_keep_the_gpus_they_can_see_until_they_end(
    sleeper: subprocess.Popen[bytes],
) -> None:
    book = GPUAllocator()
    key, jobs = server_key("alice", ""), jobs_key("alice", "")
    book.allocate(key, 3, [0, 1, 2, 3], Holder("alice", "server", "", "A6000"))
    pending = book.hand_to_jobs(key)
    assert pending == [0, 1, 2] and book.free([0, 1, 2, 3]) == [3]  # held while looked for
    kept = book.settle(jobs, pending, [(process(sleeper), {1})])
    assert kept == [1] and book.free([0, 1, 2, 3]) == [0, 2, 3]
    (hold,) = book.holdings("alice")
    # The sleeper is no gpuhub job: its hold is named for the server that left it.
    assert (hold.kind, hold.devices, hold.label) == ("job", (1,), "processes of server 'default'")
    assert gpus_held(book.holdings("alice")) == 1
    sleeper.kill()
    sleeper.wait()
    assert book.free([0, 1, 2, 3]) == [0, 1, 2, 3]  # the hold ended with its last process


def test_a_survivor_whose_devices_cannot_be_read_keeps_them_all(
    sleeper: subprocess.Popen[bytes],
) -> None:
    book = GPUAllocator()
    key, jobs = server_key("bob", "x"), jobs_key("bob", "x")
    book.allocate(key, 2, [0, 1], Holder("bob", "server", "x"))
    assert book.settle(jobs, book.hand_to_jobs(key), [(process(sleeper), None)]) == [0, 1]


def test_job_holds_survive_a_new_book_and_end_with_their_processes(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    store = tmp_path / "ledger.json"
    first = GPUAllocator(store)
    key, jobs = server_key("alice", ""), jobs_key("alice", "")
    first.allocate(key, 2, [0, 1], Holder("alice", "server", ""))
    first.settle(jobs, first.hand_to_jobs(key), [(process(sleeper), {0})])
    # A restarted hub reads the book again: the job's GPU is still taken.
    second = GPUAllocator(store)
    assert second.free([0, 1]) == [1]
    assert second.holdings("alice")[0].devices == (0,)
    sleeper.kill()
    sleeper.wait()
    assert second.free([0, 1]) == [0, 1]
    # A process that ended while the hub was down is not restored at all.
    assert GPUAllocator(store).free([0, 1]) == [0, 1]


def test_a_reused_pid_does_not_keep_a_hold(tmp_path: Path) -> None:
    book = GPUAllocator()
    key, jobs = server_key("alice", ""), jobs_key("alice", "")
    book.allocate(key, 1, [0], Holder("alice", "server", ""))
    me = psutil.Process()
    # Our own pid, but with another start time: a different process that got the same pid.
    book.settle(jobs, book.hand_to_jobs(key), [((me.pid, me.create_time() - 100), {0})])
    assert book.free([0]) == [0]


@pytest.mark.parametrize(("server", "other"), [("", "#jobs"), ("x", "x#jobs"), ("x", "x/jobs")])
def test_no_server_name_stands_for_another_holder(
    sleeper: subprocess.Popen[bytes], server: str, other: str
) -> None:
    """Holders are keyed by (user, kind, name): a server named like a job hold's old string
    key ("x#jobs") is just another server, and never frees the job hold's GPU."""
    book = GPUAllocator()
    key = server_key("alice", server)
    book.allocate(key, 1, [0, 1, 2], Holder("alice", "server", server))
    book.settle(jobs_key("alice", server), book.hand_to_jobs(key), [(process(sleeper), {0})])
    taken = server_key("alice", other)
    assert book.allocate(taken, 1, [0, 1, 2], Holder("alice", "server", other)) == [1]
    book.release(taken)
    book.hand_to_jobs(taken)
    assert book.free([0, 1, 2]) == [1, 2]
    assert [(h.kind, h.name, h.devices) for h in book.holdings("alice")] == [("job", server, (0,))]
