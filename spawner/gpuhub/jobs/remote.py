"""The user's server side of Kubernetes mode: forward jobs to the ``gpuhub`` hub service.

:class:`HubServiceBackend` is the :class:`~gpuhub.jobs.backend.RemoteBackend` the jobs API
loads when ``GPUHUB_JOBS_URL`` is set. It sends the already validated request, plus the
notebook's text (the service cannot read the user's files), with the server's
``JUPYTERHUB_API_TOKEN``; the service validates again with the hub's policy. Its refusals
come back as the same :class:`~gpuhub.jobs.model.JobError` sentences and statuses.

A submit carries an ``Idempotency-Key``, and is retried once with the same key when the
service cannot be reached or answers 502/503/504, so a flaky network never makes two jobs.
When a job that ran without a shared home volume finishes, its executed notebook is fetched
once into ``<notebook dir>/gpuhub-runs/<id>/<name>.ipynb``, where "open result" finds it (the
same place the local backend and a shared home volume use).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse

from gpuhub.jobs.backend import QuotaGate, RemoteBackend
from gpuhub.jobs.model import JobError, JobNotFound, JobRecord, JobRequest, Runtimes, check_job_id
from gpuhub.jobs.paths import output_path
from gpuhub.jobs.run_notebook import write_json

log = logging.getLogger(__name__)

_RETRY_CODES = frozenset({599, 502, 503, 504})
UNREACHABLE = "The gpuhub jobs service cannot be reached right now; try again in a moment."


@dataclass(frozen=True)
class Offer:
    """The kinds a cluster offers (``[{"kind", "label", "available", "reason"}]``) and its
    TrainJob runtimes."""

    kinds: list[dict[str, Any]]
    runtimes: Runtimes

    @property
    def offered(self) -> list[str]:
        return [str(k.get("kind")) for k in self.kinds]


class HubServiceBackend(RemoteBackend):
    """Every kind, run by the hub service; answers are the service's own."""

    timeout = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fetched: set[str] = set()
        self._not_notebooks: set[str] = set()  # fetched outputs that were no notebook
        self._offer: tuple[float, Offer] | None = None

    # -- HTTP -----------------------------------------------------------------------------
    async def _fetch(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        job_id: str | None = None,
    ) -> HTTPResponse:
        request = HTTPRequest(
            f"{self.jobs_url}/{path}",
            method=method,
            headers={
                "Authorization": f"token {self.api_token}",
                "Accept": "application/json",
                **({"Content-Type": "application/json"} if body is not None else {}),
                **(headers or {}),
            },
            body=None if body is None else json.dumps(body),
            request_timeout=self.timeout,
            follow_redirects=False,
        )
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
        if response.code >= 400 or response.code == 599:
            raise self._error(response, job_id)
        return response

    @staticmethod
    def _error(response: HTTPResponse, job_id: str | None) -> JobError:
        if response.code == 599:
            log.warning("gpuhub jobs service unreachable: %s", response.error)
            return JobError("service", UNREACHABLE, 503)
        try:
            detail = json.loads(response.body or b"{}")
        except ValueError:
            detail = {}
        message = detail.get("message") if isinstance(detail, dict) else None
        field = detail.get("field") if isinstance(detail, dict) else None
        if response.code == 404 and job_id is not None and field in (None, "id"):
            error: JobError = JobNotFound(job_id)
            if message:
                error.message = message
                error.args = (message,)
            return error
        if 400 <= response.code < 500 and message:
            errors = detail.get("errors") if isinstance(detail, dict) else None
            problems = [
                (str(e.get("field") or "request"), str(e["message"]))
                for e in errors or []
                if isinstance(e, dict) and isinstance(e.get("message"), str)
            ]
            return JobError(field or "request", message, response.code, problems)
        log.error("gpuhub jobs service answered %s: %s", response.code, response.body[:500])
        if response.code in _RETRY_CODES:
            return JobError("service", UNREACHABLE, 503)
        return JobError(
            "service", "The gpuhub jobs service failed on this request; tell your admin.", 502
        )

    async def _json(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        response = await self._fetch(method, path, body, **kw)
        return json.loads(response.body)

    # -- the interface ------------------------------------------------------------------
    async def _body(self, request: JobRequest) -> dict[str, Any]:
        body = self.request_body(request)
        body["notebook_content"] = await asyncio.to_thread(
            request.notebook.os_path.read_text, encoding="utf-8"
        )
        return body

    async def submit(
        self,
        request: JobRequest,
        owner: str,
        *,
        notebook: bytes | None = None,  # read from this server's disk and sent along
        key: str | None = None,
        quota: QuotaGate | None = None,  # the service asks the hub's ledger itself
    ) -> JobRecord:
        body = await self._body(request)
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        try:
            answer = await self._json("POST", "jobs", body, headers=headers)
        except JobError as exc:
            if exc.status != 503:
                raise
            await asyncio.sleep(1.0)  # once, with the same key: no second job
            answer = await self._json("POST", "jobs", body, headers=headers)
        return await self._local(answer["job"])

    async def list(self, owner: str) -> list[JobRecord]:
        answer = await self._json("GET", "jobs")
        return [await self._local(job) for job in answer.get("jobs") or []]

    async def get(self, owner: str, job_id: str) -> JobRecord:
        check_job_id(job_id)
        return await self._local(await self._json("GET", f"jobs/{job_id}", job_id=job_id))

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        check_job_id(job_id)
        query = f"?tail={tail}" if tail else ""
        answer = await self._json("GET", f"jobs/{job_id}/logs{query}", job_id=job_id)
        return str(answer.get("logs") or "")

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        check_job_id(job_id)
        return await self._local(await self._json("DELETE", f"jobs/{job_id}", job_id=job_id))

    async def offer(self) -> Offer:
        """What the cluster offers, as the service says (``GET jobs/kinds``), kept for a
        minute (the submit dialog asks each time it opens): the kinds the admin offers, each
        with ``available`` and, when not, the sentence why; the TrainJob runtimes."""
        now = time.monotonic()
        if self._offer is None or now - self._offer[0] > 60:
            answer = await self._json("GET", "jobs/kinds")
            runtimes = Runtimes(
                tuple(str(r) for r in answer.get("runtimes") or []),
                answer.get("default_runtime") or None,
            )
            self._offer = (now, Offer(list(answer.get("kinds") or []), runtimes))
        return self._offer[1]

    async def kinds_available(self) -> builtins.list[dict[str, Any]]:
        """``[{"kind", "label", "available", "reason"}]``: the kinds offered (:meth:`offer`)."""
        return [dict(k) for k in (await self.offer()).kinds]

    async def pipeline_yaml(self, job_id: str) -> str:
        """The compiled pipeline of a submitted pipeline step."""
        check_job_id(job_id)
        response = await self._fetch("GET", f"jobs/{quote(job_id)}/pipeline.yaml", job_id=job_id)
        return response.body.decode("utf-8")

    async def compile_pipeline(self, request: JobRequest) -> str:
        """Compile only: the pipeline YAML of ``request``, nothing submitted."""
        response = await self._fetch("POST", "jobs/pipeline.yaml", await self._body(request))
        return response.body.decode("utf-8")

    # -- the executed notebook ------------------------------------------------------------
    def _output_path(self, record: JobRecord) -> Path | None:
        """Where this server keeps a job's executed notebook (inside its root), or None."""
        if self.root_dir is None or not record.notebook:
            return None
        source = PurePosixPath(record.notebook)
        if source.is_absolute() or ".." in source.parts or source.suffix != ".ipynb":
            return None
        root = Path(self.root_dir).resolve()
        path = (root / output_path(record.notebook, record.id)).resolve()
        return path if root in path.parents else None

    async def _local(self, data: dict[str, Any]) -> JobRecord:
        record = JobRecord.from_json(data)
        if not data.get("output_ready") or record.output:
            return record
        path = self._output_path(record)
        if path is None:
            return record
        root = Path(self.root_dir or ".").resolve()
        if record.id not in self._fetched and not await asyncio.to_thread(path.exists):
            try:
                response = await self._fetch("GET", f"jobs/{record.id}/output", job_id=record.id)
            except JobError as exc:
                log.info("gpuhub: no executed notebook for %s: %s", record.id, exc.message)
                self._fetched.add(record.id)  # do not ask again on every poll
                return record
            notebook = _notebook(response.body)
            self._fetched.add(record.id)
            if notebook is None:  # what the job printed is the user's code's to decide
                log.info("gpuhub: the output of %s is not a notebook; not saved", record.id)
                self._not_notebooks.add(record.id)
            else:
                await asyncio.to_thread(_write, path, notebook)
        if record.id in self._not_notebooks:
            record.message = record.message or NOT_A_NOTEBOOK
            return record
        if await asyncio.to_thread(path.exists):
            record.output = path.relative_to(root).as_posix()
        return record


NOT_A_NOTEBOOK = (
    "The executed notebook that came back from the cluster is not a notebook, so it was not "
    "saved; the job's log has the cells' output."
)


def _notebook(body: bytes) -> dict[str, Any] | None:
    """The fetched output if it is a notebook (a JSON object with cells), else None."""
    try:
        notebook = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return None
    return notebook


def _write(path: Path, notebook: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, notebook)
    os.chmod(path, 0o644)
