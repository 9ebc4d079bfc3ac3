"""A workstation server's processes and the GPUs they keep (:mod:`gpuhub.hub.ledger.device_book`):
a part of :class:`gpuhub.hub.local_gpu_spawner.LocalGPUSpawner`.

Its launch id, its stop, the look for processes that outlive it on its GPUs (found by the
hub itself: descendants, cgroup, sessions, proven grants), and its state across hub restarts.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gpuhub.core.env import JOB_ID_ENV, LAUNCH_ENV, SERVER_ID_ENV
from gpuhub.hub import cgroups
from gpuhub.hub.ledger.device_book import HeldProcess, Holder, jobs_key
from gpuhub.hub.ledger.launches import Process, Proof, command_line, device_set
from gpuhub.hub.local_line import LINE
from gpuhub.hub.monitor.gpu_monitor import holdings_changed
from gpuhub.hub.refusals import log_name
from gpuhub.hub.spawner_parts import LocalPart


class ServerProcesses(LocalPart):
    """A launch's id, its stop, the processes that outlive it, and its saved state."""

    _gpuhub_stopping = False
    _gpuhub_server_id = ""  # this launch's id; "" until the first use after a launch ends
    _gpuhub_pending: list[int] | None = None  # the devices a gone server left to settle
    # Where a gone server's work may still run, for the look for survivors: its sessions
    # (the server's own, its kernels'), and its cgroup.
    _gpuhub_sessions: frozenset[int] = frozenset()
    _gpuhub_left_cgroup: cgroups.ServerCgroup | None = None

    @property
    def _server_id(self) -> str:
        """A random id per server launch (kept in the hub's state across restarts)."""
        if not self._gpuhub_server_id:
            self._gpuhub_server_id = secrets.token_hex(12)
        return self._gpuhub_server_id

    async def stop(self, now: bool = False) -> None:
        if (ticket := self._gpuhub_ticket) is not None:  # stopped while waiting in line
            if ticket.awaited:
                self._tell_the_line_ended(ticket)
            LINE.leave(ticket)
            self._gpuhub_ticket = None
        descendants: list[Process] = []
        if self.pid and self.allocated_gpus:
            descendants = await asyncio.to_thread(_server_processes, self.pid)
            # While they run: a kernel leads a session of its own, which outlives it.
            sessions = await asyncio.to_thread(_sessions_of, descendants)
            self._gpuhub_sessions = self._gpuhub_sessions | sessions
        self._gpuhub_stopping = True
        try:
            await super().stop(now=now)
        finally:
            self._gpuhub_stopping = False
            if await self.poll() is not None:
                await self._settle_gpus(descendants)
                self._remove_cgroup()
                holdings_changed()

    def _server_gone(self) -> None:
        """The server process has ended: its GPUs wait, held, for the look for survivors."""
        held = self._book.hand_to_jobs(self._holder_key)
        if held:
            self._gpuhub_pending = held
            if not self._gpuhub_stopping:  # died by itself: stop() will not settle it
                try:
                    asyncio.get_running_loop()
                except RuntimeError:  # no event loop (a script using the spawner): settle now
                    asyncio.run(self._settle_gpus([]))
                else:
                    self._gpuhub_settling = asyncio.ensure_future(self._settle_gpus([]))

    async def _settle_gpus(self, descendants: list[Process]) -> None:
        """Give the server's GPUs back, except those its surviving processes still use."""
        held, self._gpuhub_pending = self._gpuhub_pending, None
        sessions, self._gpuhub_sessions = self._gpuhub_sessions, frozenset()
        cgroup, self._gpuhub_left_cgroup = self._gpuhub_left_cgroup, None
        if not held:
            return
        survivors = await asyncio.to_thread(
            _survivors,
            descendants,
            self._launch_proof(),
            self._server_id,
            held,
            sessions | _sessions_of(descendants),
            cgroup,
        )
        self._gpuhub_server_id = ""  # the next launch gets a new one
        kept = self._book.settle(jobs_key(self.user.name, self.name), held, survivors)
        if kept:
            self.log.info(
                "GPUs %s of %s stay held: processes %s outlived the server",
                kept,
                log_name(self),
                [process.pid for process, _ in survivors],
            )

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.pid and self._gpuhub_cgroup is not None:
            state["cgroup"] = [str(d) for d in self._gpuhub_cgroup.dirs]
        if self.pid and self.allocated_gpus:
            state["gpus"] = self.allocated_gpus
            state["server_id"] = self._server_id
            options = self.launch_options
            if options is not None and options.gpu_type is not None:
                state["gpu_type"] = options.gpu_type.display_name
            holder = self._book.holder(self._holder_key)
            if holder is not None and holder.shared:
                state["gpu_memory"] = holder.gpu_memory
                state["device_memory"] = holder.device_memory
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        if state.get("server_id"):
            self._gpuhub_server_id = str(state["server_id"])
        if state.get("pid") and isinstance(state.get("cgroup"), list):
            self._gpuhub_cgroup = cgroups.ServerCgroup(tuple(Path(d) for d in state["cgroup"]))
        if state.get("pid") and state.get("gpus"):
            holder = Holder(
                self.user.name,
                "server",
                self.name,
                state.get("gpu_type", ""),
                launch=str(state.get("server_id") or ""),
                gpu_memory=int(state.get("gpu_memory") or 0),
                device_memory=int(state.get("device_memory") or 0),
            )
            self._book.claim(self._holder_key, state["gpus"], holder)

    def clear_state(self) -> None:
        if self.pid:  # the server's session (JupyterHub starts it in one of its own)
            self._gpuhub_sessions = self._gpuhub_sessions | {self.pid}
        if self._gpuhub_cgroup is not None:
            self._gpuhub_left_cgroup = self._gpuhub_cgroup
        super().clear_state()
        # Called once the server process is gone (poll, stop): its own hold ends, and what
        # its surviving processes may still use is held for them; its cgroup goes with it.
        self._server_gone()
        self._remove_cgroup()


def _server_processes(pid: int) -> list[Process]:
    """The server's descendants (kernels, jobs, terminals' children), taken before it stops:
    the processes that may outlive it on its GPUs."""
    import psutil

    try:
        return [(p.pid, p.create_time()) for p in psutil.Process(pid).children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _survivors(
    descendants: list[Process],
    proof: Proof | None,
    server_id: str,
    devices: Sequence[int] = (),
    sessions: Iterable[int] = (),
    cgroup: cgroups.ServerCgroup | None = None,
) -> list[tuple[HeldProcess, frozenset[int] | None]]:
    """Processes of a just-stopped server that still run, with the GPUs each keeps held.

    Found by the hub itself, so that no work escapes charging by leaving the server's process
    tree: the server's descendants taken before the stop; every process still in the
    server's ``cgroup`` (a double fork or a new session stays in it); every process in one of
    the server's ``sessions`` or process groups (its own and its kernels': where there is no
    cgroup, a double fork stays in its session, and Linux gives no new process a pid still in
    use as a session's or a group's id); and processes that prove this launch's grant
    (``proof``: the grant signed for this ``GPUHUB_SERVER_ID``, and the server's OS account),
    such as a job that detached from its parent. What a process merely says
    (``GPUHUB_SERVER_ID`` alone) never makes it the server's: another user's process could
    say it and have this user's GPUs kept for it.

    The GPUs a survivor keeps: those of ``devices`` its ``CUDA_VISIBLE_DEVICES`` lists where
    it names some of them and nothing else (a local job given part of the server's GPUs);
    ``None``, all of them, where it names none of them, others, or cannot be read: a process
    can set it to "" or another GPU and use any it can open, so what it says can narrow its
    charge but never drop it.
    """
    import psutil

    from gpuhub.hub.ledger.device_book import alive

    found: dict[int, Process] = {p[0]: p for p in descendants if alive(p)}
    members = cgroup.members() if cgroup is not None else set()
    sessions = frozenset(sessions) - {os.getsid(0)}  # never the hub's own session
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "create_time", "uids", "environ"]):
        info = proc.info
        pid = info["pid"]
        if pid == me or pid in found:
            continue
        if pid in members or (sessions and _in_sessions(pid, sessions)):
            found[pid] = (pid, info["create_time"])
            continue
        env = info.get("environ") or {}
        if proof is None or env.get(SERVER_ID_ENV) != server_id:
            continue  # cheap first: most processes are no server's
        uids = info.get("uids")
        launch = proof.launch(env.get(LAUNCH_ENV), uids.real if uids is not None else None)
        if launch is not None and launch.launch == server_id:
            found[pid] = (pid, info["create_time"])
    survivors = []
    own = frozenset(devices)
    for pid, started in found.values():
        command, job = "", ""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            environ = proc.environ()
            visible = device_set(environ.get("CUDA_VISIBLE_DEVICES"))
            job = environ.get(JOB_ID_ENV, "")  # a local job's runner and kernel: its id
            command = command_line(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            visible = None
        if visible is not None and (not visible or not visible <= own):
            visible = None  # says none of the server's GPUs, or others: keeps them all
        held = HeldProcess(pid, started, command, server_id, job)
        survivors.append((held, visible))
    return survivors


def _in_sessions(pid: int, sessions: frozenset[int]) -> bool:
    """Whether process ``pid`` is in one of ``sessions`` (as a session or process group)."""
    try:
        return os.getsid(pid) in sessions or os.getpgid(pid) in sessions
    except OSError:
        return False


def _sessions_of(processes: Iterable[Process]) -> frozenset[int]:
    """The sessions ``processes`` (the server's descendants) run in: a kernel has its own."""
    found = set()
    for pid, _ in processes:
        try:
            found.add(os.getsid(pid))
        except OSError:
            continue
    return frozenset(found)
