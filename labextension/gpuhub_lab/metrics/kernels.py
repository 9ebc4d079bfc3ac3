"""Which of this server's kernels (and notebooks) a GPU process belongs to.

NVML reports GPU memory per process id. A notebook's CUDA work runs in its kernel process or
in a child of it (DataLoader workers, ``multiprocessing``), so a GPU process belongs to the
kernel whose process is its nearest ancestor. Walking up a few parents per GPU process is
cheaper than listing every kernel's process tree.

:class:`KernelPids` runs where the sampler reads (its thread, or the event loop when reads
are quick, :mod:`.sampler`); :class:`SessionPaths` runs on the event loop (the sessions
database is not thread-safe) and caches kernel id -> notebook path.
"""

from __future__ import annotations

import time
from typing import Any

import psutil


class KernelPids:
    """Maps process ids to the id of this server's kernel that owns them."""

    def __init__(self, kernel_manager: Any) -> None:
        self.kernel_manager = kernel_manager
        # (pid, process start time) -> kernel id or None; start time guards against pid reuse
        self._cache: dict[tuple[int, float], str | None] = {}
        self._roots_seen: dict[int, str] = {}

    def roots(self) -> dict[int, str]:
        """Kernel process id -> kernel id, for kernels this server started locally."""
        roots: dict[int, str] = {}
        try:
            kernel_ids = list(self.kernel_manager.list_kernel_ids())
        except RuntimeError:  # the dict changed while copying; next sample will do
            return self._roots_seen
        for kernel_id in kernel_ids:
            try:
                km = self.kernel_manager.get_kernel(kernel_id)
            except KeyError:
                continue
            pid = _kernel_pid(km)
            if pid:
                roots[pid] = kernel_id
        return roots

    def __call__(self, pids: set[int]) -> dict[int, str]:
        roots = self.roots()
        if roots != self._roots_seen:
            self._cache.clear()  # a kernel started or stopped: earlier answers may be wrong
            self._roots_seen = roots
        if not roots:
            return {}
        owners: dict[int, str] = {}
        for pid in pids:
            kernel_id = self._owner(pid, roots)
            if kernel_id is not None:
                owners[pid] = kernel_id
        return owners

    def _owner(self, pid: int, roots: dict[int, str]) -> str | None:
        try:
            proc = psutil.Process(pid)
            key = (pid, proc.create_time())
        except (psutil.Error, OSError):
            return None  # gone, or another PID namespace (a container seeing host pids)
        if key in self._cache:
            return self._cache[key]
        owner = roots.get(pid)
        if owner is None:
            try:
                for parent in proc.parents():
                    owner = roots.get(parent.pid)
                    if owner is not None:
                        break
            except (psutil.Error, OSError):
                owner = None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = owner
        return owner


def _kernel_pid(km: Any) -> int | None:
    """The OS pid of a kernel started by a local provisioner (None for remote kernels)."""
    provisioner = getattr(km, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    if pid is None:
        process = getattr(provisioner, "process", None)
        pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


class SessionPaths:
    """kernel id -> notebook path from the sessions manager, refreshed at most every ``ttl``."""

    def __init__(self, session_manager: Any, ttl: float = 5.0) -> None:
        self.session_manager = session_manager
        self.ttl = ttl
        self.paths: dict[str, str] = {}
        self.version = 0
        self._fetched = 0.0

    async def lookup(self, kernel_ids: set[str]) -> dict[str, str]:
        now = time.monotonic()
        if self._due(kernel_ids, now):
            self._fetched = now
            await self._refresh()
        return self.paths

    def cached(self, kernel_ids: set[str]) -> dict[str, str] | None:
        """What :meth:`lookup` would answer without fetching, or None when it must fetch."""
        return None if self._due(kernel_ids, time.monotonic()) else self.paths

    def _due(self, kernel_ids: set[str], now: float) -> bool:
        age = now - self._fetched
        # A kernel without a session (e.g. started through the kernels API) stays missing,
        # so refresh on misses at most once per second rather than on every request.
        return age > self.ttl or (age > 1.0 and not kernel_ids <= self.paths.keys())

    async def _refresh(self) -> None:
        try:
            sessions = await self.session_manager.list_sessions()
        except Exception:
            return
        paths = {
            s["kernel"]["id"]: s.get("path") or s.get("name") or ""
            for s in sessions
            if s.get("kernel")
        }
        if paths != self.paths:
            self.paths = paths
            self.version += 1
