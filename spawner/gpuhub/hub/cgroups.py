"""CPU and memory limits for a workstation's servers, by Linux control groups.

LocalGPUSpawner's form asks for cores and memory; on a workstation only the kernel's cgroups
hold a process to them, as systemd's ``CPUQuota=`` and ``MemoryMax=`` do. Each server gets a
cgroup of its own, made by the hub, with the cores as a CPU quota (v2 ``cpu.max`` "<quota>
<period>"; v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``) and the memory as a hard limit
(v2 ``memory.max``; v1 ``memory.limit_in_bytes``: past it the kernel ends the cgroup's
largest process). The server joins it before it execs (``LocalGPUSpawner.make_preexec_fn``),
so every process it starts is held to it too, and the cgroup is removed once its last process
has ended.

Where servers' cgroups go (:func:`find`), only where the hub may write, checked by making and
removing a probe cgroup with both limits:

* cgroup v2 (cpu and memory controllers available to the hub's cgroup): the parent of the
  hub's own cgroup when it is delegated to the hub and holds no process itself (systemd
  ``Delegate=yes`` with ``DelegateSubgroup=hub``; systemd marks delegated cgroups with the
  extended attribute ``trusted.delegate``); else the hub's own cgroup when it is delegated or
  the hierarchy's root (a container's). A v2 cgroup that shares its controllers among
  children may hold no process itself, so the hub first moves its own cgroup's processes
  into a leaf, ``gpuhub-hub``, where needed. ``required`` (``enforce_limits = True``) also
  takes the hub's own cgroup undelegated.
* cgroup v1 (cpu and memory hierarchies): the hub's own cgroups there.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PERIOD_US = 100_000  # the CPU quota's period: 100 ms, as systemd's CPUQuota= uses
PREFIX = "gpuhub-"
HUB_LEAF = "gpuhub-hub"  # v2: where the hub's own processes go when its cgroup is divided
CONTROLLERS = ("cpu", "memory")


class CgroupError(RuntimeError):
    """A cgroup could not be made or joined; the message says which and why."""


def quota_us(cpu: float) -> int:
    """The CPU quota per period for ``cpu`` cores (at least 1 ms, as the kernel requires)."""
    return max(1000, round(cpu * PERIOD_US))


@dataclass(frozen=True)
class ServerCgroup:
    """One server's cgroup: one directory (v2), or its cpu and memory directories (v1)."""

    dirs: tuple[Path, ...]

    def join(self, pid: int) -> None:
        """Move process ``pid`` (with its threads) into this cgroup; raises OSError."""
        for directory in self.dirs:
            _write(directory / "cgroup.procs", str(pid))

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is in this cgroup (in each of its hierarchies)."""
        try:
            return all(str(pid) in _read(d / "cgroup.procs").split() for d in self.dirs)
        except OSError:
            return False

    def members(self) -> set[int]:
        """The processes in this cgroup now (any of its hierarchies); empty when unreadable.
        Whatever a process did to leave its parent (a double fork, a new session) it stays
        here, and only root moves it out."""
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found |= {int(p) for p in _read(directory / "cgroup.procs").split()}
            except (OSError, ValueError):
                continue
        return found

    def remove(self) -> bool:
        """Remove the cgroup; False while processes still run in it (a job that outlived its
        server keeps the server's limits until it ends)."""
        gone = True
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone


@dataclass(frozen=True)
class Place:
    """Where this hub makes its servers' cgroups."""

    version: Literal[1, 2]
    parents: tuple[Path, ...]  # v2: one; v1: the cpu and the memory hierarchy's

    def __str__(self) -> str:
        return f"cgroup v{self.version} under {', '.join(str(p) for p in self.parents)}"

    def make(self, name: str, cpu: float, memory: int) -> ServerCgroup:
        """A cgroup ``name`` holding its processes to ``cpu`` cores and ``memory`` bytes."""
        made: list[Path] = []
        try:
            if self.version == 2:
                directory = self.parents[0] / name
                directory.mkdir()
                made.append(directory)
                _write(directory / "cpu.max", f"{quota_us(cpu)} {PERIOD_US}")
                _write(directory / "memory.max", str(memory))
            else:
                cpu_dir, memory_dir = (parent / name for parent in self.parents)
                for directory in dict.fromkeys((cpu_dir, memory_dir)):
                    directory.mkdir()
                    made.append(directory)
                _write(cpu_dir / "cpu.cfs_period_us", str(PERIOD_US))
                _write(cpu_dir / "cpu.cfs_quota_us", str(quota_us(cpu)))
                _write(memory_dir / "memory.limit_in_bytes", str(memory))
        except OSError as exc:
            ServerCgroup(tuple(made)).remove()
            raise CgroupError(f"could not make the cgroup {name} ({self}): {exc}") from None
        return ServerCgroup(tuple(made))


def cgroup_name(user: str, server: str, launch: str) -> str:
    """ "gpuhub-alice-3f9c2a1b" / "gpuhub-alice-gpu2-3f9c2a1b": the user and server (as
    characters cgroup names take) and the launch, so a new launch never meets an old one's
    cgroup that its surviving processes keep."""
    who = "-".join(part for part in (user, server) if part)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", who)[:64]
    return f"{PREFIX}{safe}-{launch[:12]}"


def find(required: bool = False, proc: Path = Path("/proc/self")) -> tuple[Place | None, str]:
    """Where servers' cgroups can go, or None and why not (one sentence's worth)."""
    try:
        mounts = _mounts((proc / "mountinfo").read_text())
        own = _own_cgroups((proc / "cgroup").read_text())
    except OSError as exc:
        return None, f"this machine's cgroups cannot be read ({exc})"
    reasons = []
    for finder in (_v2, _v1):
        try:
            return finder(mounts, own, required), ""
        except CgroupError as exc:
            reasons.append(str(exc))
    return None, "; ".join(reasons)


# -- cgroup v2 ------------------------------------------------------------------------------
def _v2(mounts: list[_Mount], own: dict[str, str], required: bool) -> Place:
    mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if mount is None or "" not in own:
        raise CgroupError("no cgroup v2 hierarchy is mounted")
    hub = mount.path_of(own[""])
    if hub is None:
        raise CgroupError("the hub's cgroup v2 is outside the mounted hierarchy")
    parent = hub.parent
    ours = hub.name == HUB_LEAF or _delegated(parent)  # the hub moved itself here before
    if hub != mount.point and ours and not _read_or_empty(parent / "cgroup.procs").split():
        _offers_controllers(parent)  # systemd's Delegate= with DelegateSubgroup=: a leaf hub
        _enable(parent)
        return _probed(Place(2, (parent,)))
    _offers_controllers(hub)
    if not (required or hub == mount.point or _delegated(hub)):
        raise CgroupError(
            f"the hub's cgroup v2 ({hub}) is not delegated to it (systemd: Delegate=yes in "
            "the hub's unit), so gpuhub does not divide it"
        )
    try:
        _enable(hub)  # the hierarchy's real root takes controllers with processes in it
    except CgroupError:
        _move_into_leaf(hub)
        _enable(hub)
    return _probed(Place(2, (hub,)))


def _offers_controllers(directory: Path) -> None:
    """Refuse a v2 cgroup whose parent does not pass it the cpu and memory controllers."""
    available = set(_read_or_empty(directory / "cgroup.controllers").split())
    if not set(CONTROLLERS) <= available:
        raise CgroupError(
            f"cgroup v2 gives {directory} no cpu and memory controllers "
            f"(it has: {' '.join(sorted(available)) or 'none'})"
        )


def _enable(directory: Path) -> None:
    """Give ``directory``'s children the cpu and memory controllers."""
    control = directory / "cgroup.subtree_control"
    if set(CONTROLLERS) <= set(_read_or_empty(control).split()):
        return
    try:
        _write(control, " ".join(f"+{c}" for c in CONTROLLERS))
    except OSError as exc:
        raise CgroupError(
            f"cpu and memory cannot be enabled for {directory}'s children: {exc}"
        ) from None


def _move_into_leaf(hub: Path) -> None:
    """Move every process of the hub's cgroup (the hub, its proxy) into ``gpuhub-hub``, a
    child: a v2 cgroup whose children share controllers holds no process itself."""
    leaf = hub / HUB_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        for _ in range(5):  # a process forked meanwhile lands in the old place: again
            pids = _read(hub / "cgroup.procs").split()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                    _write(leaf / "cgroup.procs", pid)
    except OSError as exc:
        raise CgroupError(f"the hub's processes cannot move into {leaf}: {exc}") from None


def _delegated(directory: Path) -> bool:
    """Whether systemd (or an admin) marked ``directory`` as delegated: its own to divide."""
    for attribute in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(directory, attribute).strip() == b"1":
                return True
        except OSError:
            continue
    return False


# -- cgroup v1 ------------------------------------------------------------------------------
def _v1(mounts: list[_Mount], own: dict[str, str], required: bool) -> Place:
    parents = []
    for controller in CONTROLLERS:
        mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        path = own.get(controller)
        if mount is None or path is None:
            raise CgroupError(f"no cgroup v1 {controller} hierarchy is mounted")
        parent = mount.path_of(path)
        if parent is None:
            raise CgroupError(f"the hub's cgroup v1 {controller} is outside its mount")
        parents.append(parent)
    return _probed(Place(1, tuple(parents)))


# -- both -----------------------------------------------------------------------------------
def _probed(place: Place) -> Place:
    """``place``, once a cgroup with both limits was made and removed there."""
    probe = place.make(f"{PREFIX}probe-{os.getpid()}", 1.0, 1 << 30)
    probe.remove()
    return place


@dataclass(frozen=True)
class _Mount:
    point: Path
    root: str  # the part of the hierarchy this mount shows
    fstype: str
    options: frozenset[str]

    def path_of(self, cgroup: str) -> Path | None:
        """The directory of ``cgroup`` (a /proc/<pid>/cgroup path) in this mount."""
        root = self.root.rstrip("/")
        if root and cgroup != root and not cgroup.startswith(f"{root}/"):
            return None
        relative = cgroup[len(root) :].lstrip("/")
        return self.point / relative if relative else self.point


def _mounts(mountinfo: str) -> list[_Mount]:
    """The cgroup mounts of /proc/<pid>/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(_unescape(fields[4]))
        found.append(_Mount(point, _unescape(fields[3]), rest[0], frozenset(rest[2].split(","))))
    return found


def _own_cgroups(text: str) -> dict[str, str]:
    """{controller: cgroup path} of /proc/<pid>/cgroup; "" for the v2 hierarchy."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            own.setdefault(controller, path)
    return own


def _unescape(text: str) -> str:
    """mountinfo's octal escapes ("\\040" for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


def _read(path: Path) -> str:
    return path.read_text()


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    """One write of ``value``, as the kernel's cgroup files want it (no truncation games)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


# A cgroup some of whose processes outlived their server: removed once they have ended.
LEFTOVER: set[ServerCgroup] = set()


def sweep() -> None:
    """Remove the leftover cgroups whose last process has ended."""
    for cgroup in list(LEFTOVER):
        if cgroup.remove():
            LEFTOVER.discard(cgroup)


_FOUND: dict[bool, tuple[Place | None, str]] = {}


def shared_place(required: bool) -> tuple[Place | None, str]:
    """:func:`find`, once per hub process (and kind of asking)."""
    if required not in _FOUND:
        _FOUND[required] = find(required)
    return _FOUND[required]
