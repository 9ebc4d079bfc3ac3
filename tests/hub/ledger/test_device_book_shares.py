"""The workstation's device book with GPUs shared by memory: one device for several holders
while their memory fits, job holds of a share, and a share coming back after a restart
(from the ledger file, and from the grant its processes carry)."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import pytest

from gpuhub.core.holdings import gpus_counted, gpus_held
from gpuhub.hub.ledger.device_book import (
    GPUAllocator,
    Holder,
    NotEnoughGPUs,
    jobs_key,
    server_key,
)
from gpuhub.hub.ledger.launches import LAUNCH_ENV, Launch, Proof, launch_key, sign, verify
from tests.support.processes import identity, sleeping_process

G = 10**9
DEVICE = 16 * G


def share(user: str, name: str, memory: int) -> Holder:
    return Holder(user, "server", name, "T4, shared", gpu_memory=memory, device_memory=DEVICE)


def test_a_device_holds_shares_while_their_memory_fits() -> None:
    book = GPUAllocator()
    alice, bob, carol = (server_key(u, "") for u in ("alice", "bob", "carol"))
    # Each share goes where the most memory is left: alice and bob get a GPU each.
    assert book.allocate(alice, 1, [3, 4], share("alice", "", 10 * G)) == [3]
    assert book.allocate(bob, 1, [3, 4], share("bob", "", 8 * G)) == [4]
    # Carol's 6G fits on GPU 3 (6 left) as well as 4 (8 left): GPU 4 has more.
    assert book.allocate(carol, 1, [3, 4], share("carol", "", 6 * G)) == [4]
    assert book.room([3, 4], DEVICE) == {3: 6 * G, 4: 2 * G}
    with pytest.raises(NotEnoughGPUs):
        book.allocate(server_key("dan", ""), 1, [3, 4], share("dan", "", 7 * G))
    # A shared device is never handed out whole, and a whole device never shared.
    assert book.free([3, 4, 5]) == [5]
    book.allocate(server_key("erin", ""), 1, [5], Holder("erin", "server", ""))
    with pytest.raises(NotEnoughGPUs):
        book.allocate(server_key("dan", ""), 1, [5], share("dan", "", G))
    # What the ledger reads: the device, the share of a GPU it counts as, and its memory.
    (held,) = book.holdings("alice")
    assert (held.devices, held.share, held.memory) == ((3,), Fraction(10, 16), 10 * G)
    assert gpus_held(book.holdings()) == Fraction(24, 16) + 1
    # Stopping a server gives its memory back to the device.
    book.release(alice)
    assert book.room([3, 4], DEVICE) == {3: DEVICE, 4: 2 * G}
    assert book.free([3, 4]) == [3]


def test_a_share_its_processes_outlive_stays_held_and_comes_back_with_the_book(
    tmp_path: Path,
) -> None:
    store = tmp_path / "ledger.json"
    book = GPUAllocator(store)
    key, jobs = server_key("alice", "nb"), jobs_key("alice", "nb")
    book.allocate(key, 1, [0, 1], share("alice", "nb", 8 * G))
    book.allocate(server_key("bob", ""), 1, [0, 1], share("bob", "", 4 * G))
    with sleeping_process() as job:
        pending = book.hand_to_jobs(key)
        assert pending == [0]
        assert book.settle(jobs, pending, [(identity(job), {0})]) == [0]
        (hold,) = book.holdings("alice")
        assert (hold.kind, hold.devices, hold.share, hold.memory) == (
            "job",
            (0,),
            Fraction(1, 2),
            8 * G,
        )
        # The job hold keeps its memory on GPU 0: only 8 of its 16 are left to share.
        assert book.room([0, 1], DEVICE) == {0: 8 * G, 1: 12 * G}
        again = GPUAllocator(store)  # a hub restart reads the file
        assert again.room([0, 1], DEVICE)[0] == 8 * G
        assert again.holdings("alice")[0].share == Fraction(1, 2)
    # The job ended: its share is free again.
    assert book.room([0, 1], DEVICE) == {0: DEVICE, 1: 12 * G}


def test_a_lost_ledger_rebuilds_a_share_from_the_grant_its_process_carries(
    tmp_path: Path,
) -> None:
    key = launch_key(b"cookie secret")
    grant = Launch("alice", "nb", "L1", (2,), "T4, shared", 8 * G, DEVICE)
    assert verify(key, sign(key, grant)) == grant
    # A grant of whole devices signed before shares existed still reads the same.
    whole = Launch("bob", "", "L2", (1,), "A6000")
    assert verify(key, sign(key, whole)) == whole
    env = {**os.environ, LAUNCH_ENV: sign(key, grant), "CUDA_VISIBLE_DEVICES": "2"}
    with sleeping_process(env):
        book = GPUAllocator(tmp_path / "gpuhub-ledger.json", Proof(key, shared_account=True))
        (hold,) = book.holdings()
        assert (hold.user, hold.kind, hold.devices, hold.memory) == ("alice", "job", (2,), 8 * G)
        assert book.room([2], DEVICE) == {2: 8 * G}


def test_a_share_waiting_in_line_counts_as_its_fraction_until_it_is_served() -> None:
    """The wait line counts a waiting share as what it asked for (its quota), not a whole
    GPU, and serves it once enough memory is free on its GPU."""
    import asyncio

    from gpuhub.hub.ledger.line import GPULine, Ticket

    async def scenario() -> None:
        book = GPUAllocator()
        line = GPULine(book)
        alice = server_key("alice", "")
        assert line.take_now(alice, 1, "t4", [3], share("alice", "", 12 * G)) == [3]
        bob, holder = server_key("bob", ""), share("bob", "", 8 * G)
        assert line.take_now(bob, 1, "t4", [3], holder) is None  # 4 GB left: bob waits
        ticket = Ticket(bob, holder, "t4", "T4, shared", 1, [3])
        line.join(ticket)
        [waiting] = line.holdings("bob")
        assert (waiting.share, waiting.memory) == (Fraction(1, 2), 8 * G)
        # It counts against the quota as its fraction, and is waiting, not held.
        assert waiting.waiting_words == "waiting in line" and gpus_held([waiting]) == 0
        assert gpus_counted([waiting]) == Fraction(1, 2)
        book.release(alice)
        line.serve()
        assert await asyncio.wait_for(ticket.granted, 5) == [3]
        line.leave(ticket)

    asyncio.run(scenario())
