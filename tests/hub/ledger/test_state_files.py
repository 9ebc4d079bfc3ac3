"""The files the hub keeps (``ledger_file``, ``gpu_usage_file``), directly: written atomically
and durably, and a damaged one kept aside while what can be read of it is kept.

The same promises through a real hub are in test_state_files_hub.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuhub.hub.ledger import statefile
from gpuhub.hub.ledger.device_book import GPUAllocator, Holder, jobs_key, server_key
from gpuhub.hub.ledger.launches import LAUNCH_ENV, Launch, Proof, launch_key, sign, verify
from gpuhub.hub.monitor.usage import UsageStore
from tests.support.processes import identity, sleeping_process


def test_a_write_is_fsynced_renamed_and_its_folder_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gpuhub-ledger.json"
    path.write_text('{"old": true}')
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    statefile.write_json(path, {"new": True})
    assert json.loads(path.read_text()) == {"new": True}
    # The temporary file (then renamed over the old one), then the folder holding the name.
    assert len(synced) == 2 and synced[0].startswith(str(tmp_path / ".gpuhub-ledger.json."))
    assert synced[1] == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuhub-ledger.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gpuhub-usage.json"
    path.write_text('{"old": true}')

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        statefile.write_json(path, {"new": True})
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["gpuhub-usage.json"]


@pytest.mark.parametrize(
    "damage",
    [b"[]", b'{"version": 2, "jobs": [{"user": "al', b"\x00\xff garbage", b"", b'{"jobs": 7}'],
)
def test_a_damaged_ledger_is_kept_aside_and_never_stops_the_book(
    tmp_path: Path, damage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gpuhub-ledger.json"
    path.write_bytes(damage)
    with caplog.at_level(logging.ERROR, logger="gpuhub.hub.ledger.device_book"):
        book = GPUAllocator(path, Proof(b"k" * 32, shared_account=True))
    [aside] = tmp_path.glob("gpuhub-ledger.json.damaged-*")
    assert aside.read_bytes() == damage
    [line] = [r.getMessage() for r in caplog.records]
    assert str(path) in line and str(aside) in line and "rebuilt the job holds" in line
    assert book.free([0, 1]) == [0, 1]
    assert json.loads(path.read_text()) == {"version": 2, "jobs": []}  # a good file again


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    with sleeping_process() as proc:
        yield proc


def test_a_hold_with_wrong_types_is_skipped_and_the_good_ones_kept(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    _, started = identity(sleeper)
    good = {
        "user": "alice",
        "name": "",
        "gpu_type": "A6000",
        "since": 1.0,
        "devices": [1],
        "processes": [[sleeper.pid, started, "python", "L1"]],
    }
    wrong = [
        {**good, "devices": ["0"]},
        {**good, "devices": [True]},
        {**good, "user": 3},
        {**good, "processes": [["1", started]]},
        "a string",
    ]
    path = tmp_path / "gpuhub-ledger.json"
    path.write_text(json.dumps({"version": 2, "jobs": [good, *wrong]}))
    book = GPUAllocator(path)
    assert book.free([0, 1, 2]) == [0, 2]
    (hold,) = book.holdings("alice")
    assert (hold.kind, hold.devices, hold.processes) == ("job", (1,), ((sleeper.pid, "python"),))
    assert len(list(tmp_path.glob("gpuhub-ledger.json.damaged-*"))) == 1


def test_a_lost_ledger_is_rebuilt_from_the_grants_live_processes_carry(tmp_path: Path) -> None:
    """Processes carry the grant of their server's launch, signed by the hub: with no file
    (or a damaged one) their GPUs stay held for their user; a forged grant holds nothing."""
    key = launch_key(b"cookie secret")
    grant = Launch("alice", "train", "L1", (1, 2), "A6000")
    forged = sign(launch_key(b"another hub"), Launch("mallory", "", "L9", (0,), ""))
    env = {**os.environ, LAUNCH_ENV: sign(key, grant), "CUDA_VISIBLE_DEVICES": "2"}
    with sleeping_process(env) as ours, sleeping_process({**env, LAUNCH_ENV: forged}):
        book = GPUAllocator(tmp_path / "gpuhub-ledger.json", Proof(key, shared_account=True))
        # The process sees GPU 2 of the 1 and 2 it was given: 2 stays held, for alice.
        assert book.free([0, 1, 2]) == [0, 1]
        (hold,) = book.holdings()
        assert (hold.user, hold.kind, hold.name, hold.devices) == ("alice", "job", "train", (2,))
        assert [pid for pid, _ in hold.processes] == [ours.pid]
        # Written down at once, so a later restart reads it from the file.
        assert GPUAllocator(tmp_path / "gpuhub-ledger.json").free([0, 1, 2]) == [0, 1]
        # When the server itself comes back from JupyterHub's state, its processes are its
        # own again, not a job hold.
        book.claim(
            server_key("alice", "train"),
            [1, 2],
            Holder("alice", "server", "train", "A6000", launch="L1"),
        )
        assert [h.kind for h in book.holdings()] == ["server"]
        assert book.holder(jobs_key("alice", "train")) is None
    assert verify(key, forged) is None


NOBODY = 65534  # the OS's unprivileged account, as another user's server would run


def another_account(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process of another OS account, with ``env`` (a grant copied into it)."""
    if os.geteuid() != 0:
        pytest.skip("starting a process as another OS account needs root")
    return subprocess.Popen(
        ["/usr/bin/python3", "-c", "import time; time.sleep(120)"], env=env, user=NOBODY, cwd="/"
    )


def test_a_grant_proves_a_process_only_in_its_users_os_account(tmp_path: Path) -> None:
    """A grant copied into another OS account's process proves nothing: with servers run as
    the hub's account (``run_as_hub_user``) or as their users' own, the book holds nothing
    for it, and :class:`Proof` says whose a process is the same way everywhere."""
    key = launch_key(b"cookie secret")
    grant = sign(key, Launch("alice", "", "L1", (0,), "A6000"))
    copied = another_account({LAUNCH_ENV: grant, "CUDA_VISIBLE_DEVICES": "0"})
    try:
        shared = Proof(key, shared_account=True)
        book = GPUAllocator(tmp_path / "gpuhub-ledger.json", shared)
        assert book.free([0, 1]) == [0, 1] and book.holdings() == []
        assert shared.launch(grant, NOBODY) is None
        assert shared.launch(grant, os.getuid()) == verify(key, grant)
        # Each user's own account: the grant of "nobody" proves a process of that account,
        # alice's does not (she has no account here), whatever runs it.
        own = Proof(key)
        mine = sign(key, Launch("nobody", "", "L2", (1,), "A6000"))
        assert own.launch(mine, NOBODY) == verify(key, mine)
        assert own.launch(mine, os.getuid()) is None and own.launch(grant, NOBODY) is None
    finally:
        copied.kill()
        copied.wait()


def test_a_damaged_usage_file_keeps_what_can_be_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gpuhub-usage.json"
    data = {
        "version": 2,
        "totals": [["ann", "A100", 7200.0], ["bob", "A100", "lots"], "row"],
        "hourly": [[3600, "ann", "A100", 3600.0]],
        "notices": {"ann": [{"server": "", "when": "yesterday"}]},
        "reclaims": {"A100": 2, "T4": -1},
    }
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.ERROR, logger="gpuhub.hub.monitor.usage"):
        store = UsageStore(path)
    assert store.totals == {("ann", "A100"): 7200.0}
    assert store.reclaims == {"A100": 2}
    assert store.notices_for("ann") == []
    [aside] = tmp_path.glob("gpuhub-usage.json.damaged-*")
    assert json.loads(aside.read_text()) == data
    [line] = [r.getMessage() for r in caplog.records]
    assert str(path) in line and str(aside) in line and "kept what could be read" in line
    # The good part is on disk again, whole.
    assert UsageStore(path).totals == {("ann", "A100"): 7200.0}
    for bad in (b"[]", b"{", b"\xff"):
        path.write_bytes(bad)
        assert UsageStore(path).totals == {}  # never raises
