"""The ``local`` backend: papermill runs the notebook in a child process on this machine.

What kind ``job`` means on a Jupyter server that is not in Kubernetes mode (standalone
``jupyter lab``, or a server started by ``LocalGPUSpawner``). Each job:

* runs :mod:`gpuhub.jobs.run_notebook` (by file) in its own session (process group), so it
  outlives the request, the browser and the sidebar, and cancel can kill its whole tree
  (runner, kernel, and whatever the notebook started);
* sees this server's GPUs only (the first ``gpus`` of the server's ``CUDA_VISIBLE_DEVICES``,
  none for a CPU-only job), never more than the server has; on a server given a share of a
  GPU (:mod:`gpuhub.core.sharing`) it runs within that share (at most the server's memory, by
  default all of it), with the CUDA MPS daemon's limit for its own;
* writes ``<notebook dir>/gpuhub-runs/<job id>/``: the executed notebook (same file name as
  the source), ``job.log`` (papermill's log with cell output), ``progress.json`` and
  ``result.json``. The directory is deliberately not hidden: Jupyter's contents API refuses
  hidden paths by default, and "open result" must work;
* is remembered in ``<root>/.gpuhub/jobs.json``, so a restarted server still lists it, keeps
  following one that is still running, and marks one that died without a result failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhub.core import words
from gpuhub.core.devices import visible_devices
from gpuhub.core.env import (
    GPU_TYPE_ENV,
    GPU_TYPE_NAME_ENV,
    JOB_ID_ENV,
    MACHINERY_ENV,
    MPS_MEMORY_LIMIT_ENV,
    SERVER_PID_ENV,
    SHARE_ENV,
    SHARE_MEMORY_ENV,
)
from gpuhub.core.holder_env import holder_env
from gpuhub.core.hub_client import cancel_notice_for_job
from gpuhub.core.options import GPU_MEMORY
from gpuhub.core.process_tree import KILL_GRACE, end_process_trees
from gpuhub.core.quantity import format_memory, human_memory
from gpuhub.core.sharing import share_from_env
from gpuhub.jobs import paths, run_notebook
from gpuhub.jobs.backend import JobBackend, QuotaGate
from gpuhub.jobs.model import (
    FailedCell,
    JobError,
    JobNotFound,
    JobRecord,
    JobRequest,
    check_job_id,
    new_job_id,
    output_name,
    parse_iso,
    utcnow,
    without_noise,
)
from gpuhub.jobs.run_notebook import write_json

log = logging.getLogger(__name__)

STORE = Path(".gpuhub") / "jobs.json"
MAX_LOG_BYTES = 1024 * 1024  # the end of the log the API returns
# Run by file, not ``-m gpuhub...``: it imports nothing from gpuhub, so it works whatever
# Python path the server was started with.
RUNNER = run_notebook.__file__


def server_gpu_ids(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this server may use: its ``CUDA_VISIBLE_DEVICES``, else what NVML sees.

    Entries stay strings: they may be indices, ``GPU-<uuid>`` or ``MIG-<uuid>``.
    """
    environ = os.environ if environ is None else environ
    visible = visible_devices(environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        return [str(v) for v in visible]
    from gpuhub.core.devices import discover

    return [str(d.index) for d in discover().devices]


@dataclass
class _LocalJob:
    record: JobRecord
    run_dir: Path
    pid: int | None = None
    create_time: float | None = None  # psutil's, to tell our pid from a reused one
    cancelled: bool = False
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)
    waiter: asyncio.Task[None] | None = field(default=None, repr=False)

    def to_store(self) -> dict[str, Any]:
        return {
            "record": self.record.to_json(),
            "run_dir": str(self.run_dir),
            "pid": self.pid,
            "create_time": self.create_time,
            "cancelled": self.cancelled,
        }

    @classmethod
    def from_store(cls, data: Mapping[str, Any]) -> _LocalJob:
        return cls(
            record=JobRecord.from_json(data["record"]),
            run_dir=Path(data["run_dir"]),
            pid=data.get("pid"),
            create_time=data.get("create_time"),
            cancelled=bool(data.get("cancelled")),
        )


class LocalBackend(JobBackend):
    """Papermill jobs on this machine, owned by this server's user."""

    name = "local"
    kinds = frozenset({"job"})

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        owner: str,
        gpu_ids: list[str] | None = None,
        gpu_type: str | None = None,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = Path(root_dir).resolve()
        self.owner = owner
        self.gpu_ids = server_gpu_ids() if gpu_ids is None else list(gpu_ids)
        self.gpu_type = gpu_type or None  # the type LocalGPUSpawner gave this server
        self.python = python
        self.env = dict(os.environ if env is None else env)
        # A share of a GPU's memory this server was given (bytes; None: whole GPUs).
        self.share_memory = share_from_env(self.env)[1] or None
        self.store_path = self.root / STORE
        self._jobs: dict[str, _LocalJob] = {}
        self._loaded = False
        self._lock = asyncio.Lock()

    # -- the store ----------------------------------------------------------------------------
    async def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        async with self._lock:
            if not self._loaded:
                self._jobs = await asyncio.to_thread(self._read_store)
                self._loaded = True

    def _read_store(self) -> dict[str, _LocalJob]:
        try:
            data = json.loads(self.store_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Keep the unreadable file for the admin and start afresh rather than fail.
            log.error("gpuhub jobs: cannot read %s (%s); starting a new one", self.store_path, exc)
            with contextlib.suppress(OSError):
                self.store_path.replace(self.store_path.with_suffix(".json.broken"))
            return {}
        jobs = {}
        for entry in data.get("jobs", []):
            try:
                job = _LocalJob.from_store(entry)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("gpuhub jobs: skipping a bad entry in %s: %s", self.store_path, exc)
                continue
            jobs[job.record.id] = job
        return jobs

    async def _save(self) -> None:
        data = {"version": 1, "jobs": [job.to_store() for job in self._jobs.values()]}

        def write() -> None:
            self.store_path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.store_path, data)

        await asyncio.to_thread(write)

    # -- the interface ------------------------------------------------------------------------
    def request_defaults(self) -> dict[str, object]:
        """A local job's GPUs are this server's: default to the type the server has, and to
        all of its share of a GPU's memory."""
        defaults: dict[str, object] = {"gpu_type": self.gpu_type} if self.gpu_type else {}
        if self.share_memory:
            defaults["gpu_memory"] = format_memory(self.share_memory)
        return defaults

    async def check(self, request: JobRequest, owner: str) -> None:
        wanted, have = request.resources.gpus, len(self.gpu_ids)
        if wanted > have:
            if have == 0:
                raise JobError(
                    "gpus",
                    f"This server has no GPU, and a job on it runs on this server's GPUs; "
                    f"ask for 0 GPUs (you asked for {wanted}).",
                )
            raise JobError(
                "gpus",
                f"This server has {words.plural(have, 'GPU')}, and a job on it runs on "
                f"this server's GPUs; ask for at most {have} (you asked for {wanted}).",
            )
        asked = request.resources.gpu_memory
        if wanted and asked is not None and self.share_memory and asked > self.share_memory:
            raise JobError(
                "gpu_memory",
                f"A job on this server runs within its share of a GPU "
                f"({human_memory(self.share_memory)}); ask for at most "
                f"{format_memory(self.share_memory)} of {GPU_MEMORY} (you asked for "
                f"{format_memory(asked)}).",
            )
        gpu_type = request.resources.gpu_type
        if wanted and self.gpu_type and gpu_type is not None and gpu_type.key != self.gpu_type:
            raise JobError(
                "gpu_type",
                f'A job on this server runs on its GPUs of type "{self.gpu_type}"; ask for that '
                f'type, or start a server with GPUs of type "{gpu_type.key}".',
            )

    async def submit(
        self,
        request: JobRequest,
        owner: str,
        *,
        notebook: bytes | None = None,  # read from this server's disk instead
        key: str | None = None,  # each submit is a new job; nothing retries one
        quota: QuotaGate | None = None,  # a local job runs on this server's own GPUs
    ) -> JobRecord:
        self._check_owner(owner)
        await self._ensure_loaded()
        job_id = new_job_id(request.name[:40])  # the shape of every job id: train-1e9fe9
        while job_id in self._jobs:  # pragma: no cover - 16M to one
            job_id = new_job_id(request.name[:40])
        notebook_dir = request.notebook.os_path.parent
        run_dir = paths.run_dir(notebook_dir, job_id, self.root)
        output = run_dir / output_name(job_id)
        record = JobRecord.new(job_id, request, backend=self.name, owner=owner)
        record.image = None  # a local job runs in this server's own environment
        record.message = "Starting the kernel."
        spec = {
            "input": str(request.notebook.os_path),
            "output": str(output),
            "cwd": str(notebook_dir),
            "parameters": dict(request.parameters),
            "progress": str(run_dir / "progress.json"),
            "result": str(run_dir / "result.json"),
        }
        env = dict(self.env)
        for name in (SHARE_ENV, SHARE_MEMORY_ENV, MPS_MEMORY_LIMIT_ENV):
            env.pop(name, None)
        gpus = request.resources.gpus
        server_share = share_from_env(self.env)[0]
        asked = request.resources.gpu_memory
        share = gpu_memory = None
        if gpus and asked and self.share_memory and server_share is not None:
            # Its own part of the server's share: what it counts as, and the MPS daemon's
            # limit for it.
            share, gpu_memory = server_share * asked / self.share_memory, asked
        # The first ``gpus`` of this server's GPUs, of the server's own type.
        env.update(
            holder_env(
                gpus,
                self.env.get(GPU_TYPE_ENV, ""),
                self.env.get(GPU_TYPE_NAME_ENV, ""),
                devices=self.gpu_ids[:gpus],
                share=share,
                gpu_memory=gpu_memory,
            )
        )
        env[JOB_ID_ENV] = job_id
        # The runner is machinery (simulated GPUs do not count it), its kernel is the job; and
        # the magics in the job's kernel reach this server by its pid (gpuhub_lab.jobs_client).
        env[MACHINERY_ENV] = "1"
        env[SERVER_PID_ENV] = str(os.getpid())
        # Nothing caps a local job's CPU or memory (nor the server's: LocalGPUSpawner only
        # advertises them), but libraries size their thread pools from these, and
        # jupyter-resource-usage shows the request against what the job uses.
        env["CPU_LIMIT"] = f"{request.resources.cpu:g}"
        env["MEM_LIMIT"] = str(request.resources.memory)
        env.setdefault("OMP_NUM_THREADS", str(max(1, int(request.resources.cpu))))
        env.pop("JPY_SESSION_NAME", None)
        try:
            await asyncio.to_thread(_prepare_run_dir, run_dir, spec)
            log_file = await asyncio.to_thread(open, run_dir / "job.log", "ab")
            try:
                process = await asyncio.create_subprocess_exec(
                    self.python,
                    "-P",  # the runner needs only papermill; keep its folder off sys.path
                    RUNNER,
                    str(run_dir / "spec.json"),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=asyncio.subprocess.STDOUT,
                    cwd=str(notebook_dir),
                    env=env,
                    start_new_session=True,  # its own process group: survives us, killable as one
                )
            finally:
                log_file.close()
        except OSError as exc:
            log.error("gpuhub jobs: could not start %s: %s", job_id, exc)
            await asyncio.to_thread(shutil.rmtree, run_dir, True)
            raise JobError(
                "notebook", f"The job could not start on this server: {exc.strerror or exc}.", 500
            ) from None
        job = _LocalJob(record=record, run_dir=run_dir, pid=process.pid, process=process)
        job.create_time = _create_time(process.pid)
        record.status, record.started = "running", utcnow()
        record.output = _relative(output, self.root)
        self._jobs[job_id] = job
        job.waiter = asyncio.create_task(self._wait(job))
        await self._save()
        log.info(
            "gpuhub jobs: started %s (%s, pid %s, GPUs %r)",
            job_id,
            request.notebook.path,
            process.pid,
            env["CUDA_VISIBLE_DEVICES"],
        )
        return record

    async def list(self, owner: str) -> list[JobRecord]:
        if owner != self.owner:
            return []
        await self._ensure_loaded()
        for job in list(self._jobs.values()):
            await self._refresh(job)
        return sorted(
            (j.record for j in self._jobs.values()), key=lambda r: r.created, reverse=True
        )

    async def get(self, owner: str, job_id: str) -> JobRecord:
        job = await self._job(owner, job_id)
        await self._refresh(job)
        return job.record

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        job = await self._job(owner, job_id)
        return await asyncio.to_thread(_read_log, job.run_dir / "job.log", tail)

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        job = await self._job(owner, job_id)
        await self._refresh(job)
        if job.record.is_final:
            return job.record
        job.cancelled = True
        if job.pid is not None:
            await asyncio.to_thread(_kill_tree, job.pid, job.create_time)
        if job.waiter is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(job.waiter), KILL_GRACE * 2)
        else:
            await self._finish(job, returncode=None)
        return job.record

    async def close(self) -> None:
        """Stop following; the jobs themselves keep running (the store remembers them)."""
        for job in self._jobs.values():
            if job.waiter is not None:
                job.waiter.cancel()

    # -- internals ------------------------------------------------------------------------------
    def _check_owner(self, owner: str) -> None:
        if owner != self.owner:
            raise JobError("owner", "Local jobs run only for this server's own user.", 403)

    async def _job(self, owner: str, job_id: str) -> _LocalJob:
        check_job_id(job_id)
        await self._ensure_loaded()
        job = self._jobs.get(job_id)
        if job is None or owner != self.owner:
            raise JobNotFound(job_id)
        return job

    async def _wait(self, job: _LocalJob) -> None:
        assert job.process is not None
        code = await job.process.wait()
        await self._finish(job, returncode=code)

    async def _refresh(self, job: _LocalJob) -> None:
        """Bring a running job's record up to date (progress, or its end if it ended)."""
        if job.record.is_final:
            return
        if job.process is not None:
            if job.process.returncode is not None:
                await self._finish(job, job.process.returncode)
                return
        elif not await asyncio.to_thread(_alive, job.pid, job.create_time):
            # Started by an earlier run of this server and gone since.
            await self._finish(job, returncode=None)
            return
        progress = await asyncio.to_thread(_read_json, job.run_dir / "progress.json")
        if isinstance(progress, dict) and {"done", "total"} <= progress.keys():
            job.record.progress = {"done": int(progress["done"]), "total": int(progress["total"])}
            job.record.message = f"Ran {progress['done']} of {progress['total']} cells."

    async def _finish(self, job: _LocalJob, returncode: int | None) -> None:
        if job.record.is_final:
            return
        record = job.record
        result = await asyncio.to_thread(_read_json, job.run_dir / "result.json")
        progress = await asyncio.to_thread(_read_json, job.run_dir / "progress.json")
        if isinstance(progress, dict) and {"done", "total"} <= progress.keys():
            record.progress = {"done": int(progress["done"]), "total": int(progress["total"])}
        record.finished = utcnow()
        record.message = None
        admin = None
        if not job.cancelled and (returncode is None or returncode < 0):
            # Ended by a signal, or while nobody followed it: was it an admin's cancel?
            admin = await asyncio.to_thread(cancel_notice_for_job, record.id, self.env)
        if job.cancelled:
            record.status = "cancelled"
            record.message = "Cancelled; the output notebook holds the cells that ran."
        elif admin is not None:
            record.status = "cancelled"
            record.message = f"Cancelled by {admin[0]} from the GPU fleet page: {admin[1]}"
        elif isinstance(result, dict) and result.get("status") in ("succeeded", "failed"):
            record.status = result["status"]
            if returncode is None:
                # Nobody followed it (this server was down): when the runner says it ended.
                # Followed, it ended when this server saw it end, on the clock of its start
                # and of every run time it reported while it ran: the run time never goes
                # back as it ends (the runner writes its result a moment before it exits).
                record.finished = parse_iso(result.get("finished")) or record.finished
            record.error = result.get("error")
            cell = result.get("failed_cell")
            record.failed_cell = FailedCell(**cell) if isinstance(cell, dict) else None
        else:
            record.status = "failed"
            if returncode is None:
                record.error = (
                    "The job's process ended without reporting a result "
                    "(was the machine or this server restarted?)."
                )
            elif returncode < 0:
                record.error = f"The job's process was killed by signal {-returncode}."
            else:
                record.error = (
                    f"The job's process exited with code {returncode} before it finished."
                )
        output = job.run_dir / output_name(record.id)
        if not await asyncio.to_thread(output.is_file):
            record.output = None
        job.process = None
        await self._save()
        log.info(
            "gpuhub jobs: %s %s%s",
            record.id,
            record.status,
            f": {record.error}" if record.error else "",
        )


# -- helpers run in threads ------------------------------------------------------------------------
def _prepare_run_dir(run_dir: Path, spec: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=False)
    write_json(run_dir / "spec.json", spec)


def _relative(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root).as_posix()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_log(path: Path, tail: int | None) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - MAX_LOG_BYTES))
            data = f.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > MAX_LOG_BYTES:
        text = text.split("\n", 1)[-1]  # drop the partial first line
    text = without_noise(text)
    if tail is not None:
        text = "\n".join(text.splitlines()[-tail:]) + ("\n" if text.endswith("\n") else "")
    return text


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _alive(pid: int | None, create_time: float | None) -> bool:
    import psutil

    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        if create_time is not None and abs(process.create_time() - create_time) > 1:
            return False  # the pid was reused by something else
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill_tree(pid: int, create_time: float | None) -> None:
    """End the job's process tree (:func:`gpuhub.core.process_tree.end_process_trees`), if
    the pid is still the job's."""
    import psutil

    if not _alive(pid, create_time):
        return
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    end_process_trees([root])
