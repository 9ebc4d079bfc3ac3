"""A workstation's servers held to the CPU and memory they asked for (issue 31, item 11).

The form says what holds: "at most this many" where each server gets a cgroup of its own
(``LocalGPUSpawner.enforce_limits``), "not enforced on this machine" where none can be made,
never "guaranteed". A real hub starts a real server; its process is in a cgroup whose CPU quota
and memory limit are what was asked, and the cgroup goes with the server. Where this machine
gives the hub no cgroup to divide, the tests that need one skip, saying why.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuhub.hub import cgroups
from gpuhub.hub.local_gpu_spawner import LocalGPUSpawner
from harness.hub.process import Hub, spawn_json, start_hub
from tests.support.hub.local import LOCAL_HUB_CONFIG, server_state

PLACE, WHY = cgroups.find(required=True)
needs_cgroups = pytest.mark.skipif(
    PLACE is None, reason=f"this machine gives the hub no cgroup to hold servers to: {WHY}"
)
PAGE = os.sysconf("SC_PAGE_SIZE")


def limits_of(pid: int) -> dict[str, str]:
    """The CPU quota and memory limit of the cgroup(s) process ``pid`` is in, as the kernel
    keeps them: {"cpu": "<quota> <period>", "memory": "<bytes>"}, and the directories."""
    own = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    assert PLACE is not None
    if PLACE.version == 2:
        (parent,) = PLACE.parents
        directory = parent / own[""].rsplit("/", 1)[1]
        assert own[""].endswith(f"/{directory.name}")
        return {
            "cpu": (directory / "cpu.max").read_text().strip(),
            "memory": (directory / "memory.max").read_text().strip(),
            "dirs": str(directory),
        }
    cpu_dir = PLACE.parents[0] / own["cpu"].rsplit("/", 1)[1]
    memory_dir = PLACE.parents[1] / own["memory"].rsplit("/", 1)[1]
    quota = (cpu_dir / "cpu.cfs_quota_us").read_text().strip()
    period = (cpu_dir / "cpu.cfs_period_us").read_text().strip()
    return {
        "cpu": f"{quota} {period}",
        "memory": (memory_dir / "memory.limit_in_bytes").read_text().strip(),
        "dirs": f"{cpu_dir} {memory_dir}",
    }


def form_of(hub: Hub, user: str) -> str:
    session = hub.login(user)
    page = session.get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200, page.text[-2000:]
    return page.text


def help_of(page: str, field: str) -> str:
    found = re.search(rf'id="gpuhub-{field}-help">([^<]*)<', page)
    assert found, page[-3000:]
    return found[1]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    config = LOCAL_HUB_CONFIG + "\nc.LocalGPUSpawner.enforce_limits = True\n"
    hub = start_hub(tmp_path_factory.mktemp("local-limits"), config)
    try:
        yield hub
    finally:
        hub.api("DELETE", "/users/alice/server")
        hub.stop()


@pytest.mark.e2e
@needs_cgroups
def test_a_server_runs_in_a_cgroup_with_the_cpu_and_memory_it_asked_for(hub: Hub) -> None:
    # This hub runs every server as its own account (run_as_hub_user): the server could
    # rewrite its own cgroup, so the form promises nothing (issue 39), cgroup or not.
    page = form_of(hub, "alice")
    assert help_of(page, "cpu") == "0.5 to 4 cores."
    note = re.search(r'id="gpuhub-resources-note">([^<]*)<', page)
    assert note and note[1].startswith("CPU and memory are not enforced on this machine")
    assert "guaranteed" not in page and "at most this many" not in page

    answer = spawn_json(hub, "alice", {"cpu": 1.5, "memory": "1G", "gpus": 1})
    assert answer.status_code in (201, 202), answer.text
    hub.wait_for_server("alice")
    pid = server_state(hub, "alice")["pid"]
    held = limits_of(pid)
    assert held["cpu"] == "150000 100000"  # 1.5 cores: 150 ms of every 100 ms
    assert 10**9 - PAGE < int(held["memory"]) <= 10**9  # 1G, as the kernel rounds it to pages
    # A kernel it starts is held too (same cgroup): the server's own children inherit it.
    assert str(pid) in Path(held["dirs"].split()[0], "cgroup.procs").read_text().split()
    log = hub.log()
    assert "CPU and memory enforced by cgroup v" in log

    hub.stop_server("alice")
    deadline = time.monotonic() + 30
    while any(Path(d).exists() for d in held["dirs"].split()):
        assert time.monotonic() < deadline, f"{held['dirs']} outlived alice's server"
        time.sleep(0.2)


@pytest.mark.e2e
def test_where_nothing_holds_them_the_form_says_cpu_and_memory_are_not_enforced(
    tmp_path: Path,
) -> None:
    config = LOCAL_HUB_CONFIG + "\nc.LocalGPUSpawner.enforce_limits = False\n"
    hub = start_hub(tmp_path, config)
    try:
        page = form_of(hub, "bob")
        assert help_of(page, "cpu") == "0.5 to 4 cores."
        note = re.search(r'id="gpuhub-resources-note">([^<]*)<', page)
        assert note and note[1].startswith("CPU and memory are not enforced on this machine")
        assert "guaranteed" not in page
    finally:
        hub.stop()


def test_enforce_limits_true_refuses_spawns_where_no_cgroup_can_be_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``enforce_limits = True`` on a machine without a cgroup to divide: 503 and why, before
    any GPU is taken; "auto" then says in the form that nothing is enforced."""
    from tornado import web

    monkeypatch.setitem(cgroups._FOUND, True, (None, "no cgroup v2 hierarchy is mounted"))
    monkeypatch.setitem(cgroups._FOUND, False, (None, "no cgroup v2 hierarchy is mounted"))
    spawner = LocalGPUSpawner(enforce_limits=True)
    with pytest.raises(web.HTTPError) as refused:
        spawner.limits_place()
    assert refused.value.status_code == 503
    assert "cannot hold servers to their CPU and memory (no cgroup v2" in str(
        refused.value.log_message % refused.value.args
    )
    assert LocalGPUSpawner(enforce_limits="auto").resource_enforcement() == "unenforced"
    assert LocalGPUSpawner(enforce_limits=False).resource_enforcement() == "unenforced"


def test_a_server_that_runs_as_the_hubs_account_is_promised_no_caps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each user's own account: the server's cgroup holds it ("capped"). The hub's own
    account (``run_as_hub_user``): the server can rewrite its cgroup and the hub's record of
    its GPU-hours, so neither is promised; the form and the budget's text say why."""
    monkeypatch.setitem(cgroups._FOUND, False, (cgroups.Place(2, (tmp_path,)), ""))
    own = LocalGPUSpawner(enforce_limits="auto")
    assert (own.resource_enforcement(), own.caps_not_enforced()) == ("capped", "")
    shared = LocalGPUSpawner(enforce_limits="auto", run_as_hub_user=True)
    assert shared.resource_enforcement() == "unenforced"
    assert "can rewrite its own limits" in shared.caps_not_enforced()


@needs_cgroups
def test_the_kernel_holds_a_cgroups_processes_to_its_limits() -> None:
    """What the limits do: a process over its memory is ended; one over its cores waits."""
    assert PLACE is not None
    cgroup = PLACE.make(cgroups.cgroup_name("test", "", f"{os.getpid():x}"), 0.1, 64 << 20)
    try:

        def run(code: str) -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(
                [sys.executable, "-c", code],
                preexec_fn=lambda: cgroup.join(os.getpid()),
                capture_output=True,
                timeout=120,
            )

        hog = run("x = bytearray(512 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1")
        assert hog.returncode == -9, hog  # ended by the kernel's OOM killer: 512M > 64M
        busy = run(
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
        )
        assert busy.returncode == 0, busy
        cpu_dir = cgroup.dirs[0]
        throttled = re.search(r"nr_throttled (\d+)", (cpu_dir / "cpu.stat").read_text())
        assert throttled and int(throttled[1]) > 0  # 0.3 s of work at 0.1 cores: held back
    finally:
        assert cgroup.remove()


# -- where the hub divides cgroup v2 (a cgroupfs of plain files: the decisions, not the kernel)
V2_MOUNT = "30 23 0:27 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = (
    "32 31 0:29 / {root}/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
    "33 31 0:30 / {root}/memory rw - cgroup cgroup rw,memory\n"
)


def fake_machine(tmp_path: Path, own: str, procs: dict[str, str], v1: bool = False) -> Path:
    """A /proc/self and a cgroup v2 tree where the hub is in ``own``; ``procs``: the
    processes each cgroup (by path) holds; every cgroup offers cpu and memory."""
    root = tmp_path / "cgroup"
    for path in {own, *procs, str(Path(own).parent)}:
        directory = root / path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (directory / "cgroup.subtree_control").write_text("")
        (directory / "cgroup.procs").write_text(procs.get(path, ""))
    proc = tmp_path / "proc"
    proc.mkdir()
    mounts = V2_MOUNT.format(root=root) + (V1_MOUNTS.format(root=root) if v1 else "")
    (proc / "mountinfo").write_text(mounts)
    (proc / "cgroup").write_text(f"0::{own}\n")
    return proc


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Path]]:
    """What find() did: the cgroups it enabled cpu and memory in, and moved the hub out of.
    A cgroup with processes refuses to enable them (as the kernel does, but for the root)."""
    done: dict[str, list[Path]] = {"enabled": [], "moved": [], "delegated": []}

    def enable(directory: Path) -> None:
        if (directory / "cgroup.procs").read_text().split():
            raise cgroups.CgroupError(f"{directory} holds processes")
        done["enabled"].append(directory)

    def move(hub: Path) -> None:
        (hub / "cgroup.procs").write_text("")
        done["moved"].append(hub)

    monkeypatch.setattr(cgroups, "_enable", enable)
    monkeypatch.setattr(cgroups, "_move_into_leaf", move)
    monkeypatch.setattr(cgroups, "_probed", lambda place: place)
    monkeypatch.setattr(cgroups, "_delegated", lambda d: d in done["delegated"])
    return done


def test_v2_systemd_delegate_subgroup_puts_servers_beside_the_hub(
    tmp_path: Path, decisions: dict[str, list[Path]]
) -> None:
    unit = "/system.slice/jupyterhub.service"
    proc = fake_machine(tmp_path, f"{unit}/hub", {f"{unit}/hub": "100\n101\n"})
    decisions["delegated"].append(tmp_path / "cgroup" / unit.lstrip("/"))
    place, why = cgroups.find(proc=proc)
    assert (place, why) == (cgroups.Place(2, (tmp_path / "cgroup" / unit.lstrip("/"),)), "")
    assert decisions["moved"] == []  # the hub stays where systemd put it


def test_v2_delegated_hub_cgroup_moves_the_hub_into_a_leaf_first(
    tmp_path: Path, decisions: dict[str, list[Path]]
) -> None:
    unit = "/system.slice/jupyterhub.service"
    proc = fake_machine(tmp_path, unit, {unit: "100\n"})
    hub = tmp_path / "cgroup" / unit.lstrip("/")
    decisions["delegated"].append(hub)
    assert cgroups.find(proc=proc) == (cgroups.Place(2, (hub,)), "")
    assert decisions["moved"] == [hub] and decisions["enabled"] == [hub]


@pytest.mark.parametrize("required", [False, True])
def test_v2_a_cgroup_not_delegated_is_divided_only_when_required(
    tmp_path: Path, decisions: dict[str, list[Path]], required: bool
) -> None:
    """A root shell's session scope under systemd: "auto" leaves it alone and says why;
    ``enforce_limits = True`` divides it."""
    scope = "/user.slice/user-0.slice/session-3.scope"
    proc = fake_machine(tmp_path, scope, {scope: "100\n"})
    place, why = cgroups.find(required=required, proc=proc)
    if required:
        assert place == cgroups.Place(2, (tmp_path / "cgroup" / scope.lstrip("/"),))
    else:
        assert place is None and decisions["moved"] == []
        assert "is not delegated to it (systemd: Delegate=yes" in why
        assert "no cgroup v1 cpu hierarchy is mounted" in why


def test_v2_without_cpu_and_memory_falls_back_to_v1(
    tmp_path: Path, decisions: dict[str, list[Path]]
) -> None:
    """A hybrid machine (as some CI hosts): v2 mounted with no controllers, v1 has them."""
    proc = fake_machine(tmp_path, "/", {"/": "1\n"}, v1=True)
    (tmp_path / "cgroup" / "cgroup.controllers").write_text("hugetlb\n")
    (proc / "cgroup").write_text("4:memory:/box\n3:cpu,cpuacct:/\n0::/\n")
    place, _ = cgroups.find(proc=proc)
    root = tmp_path / "cgroup"
    assert place == cgroups.Place(1, (root / "cpu", root / "memory" / "box"))
