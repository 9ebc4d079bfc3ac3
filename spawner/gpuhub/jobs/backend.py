"""Pluggable job backends (in the spirit of jupyter-scheduler's ``BaseScheduler``).

A backend runs jobs of some kinds somewhere and answers for them. The REST API in the
user's Jupyter server talks to a :class:`JobRouter`, which picks the backend per kind:

* ``local`` (:class:`gpuhub.jobs.local.LocalBackend`): kind ``job`` on a server that is not
  in Kubernetes mode; papermill in a child process with this server's GPUs.
* in Kubernetes mode (``GPUHUB_JOBS_URL`` set), every kind goes to a :class:`RemoteBackend`
  that forwards to the ``gpuhub`` hub service with the server's ``JUPYTERHUB_API_TOKEN``.
  The hub service itself hosts the Kubernetes backends (``job``, ``pytorchjob``, ``tfjob``)
  and the KFP one (``pipeline``), which implement this same interface with ``owner`` taken
  from the caller's verified token.

Implementing a backend: subclass :class:`JobBackend`, set ``name`` and ``kinds``, and
implement the five coroutines. Rules every backend keeps:

* ``owner`` scopes everything: ``list`` returns only that owner's jobs, and ``get``/
  ``logs``/``cancel`` raise :class:`JobNotFound` for a job id that exists but belongs to
  someone else (never 403: do not confirm that it exists).
* ``submit`` receives an already validated :class:`JobRequest` (policy checked), and
  keyword arguments a backend uses where they apply (the notebook's bytes, an idempotency
  key, the quota gate). It may
  refuse what cannot run *here* (quota, capacity, missing CRD) with :class:`JobError` and a
  4xx status, and must then leave nothing behind. It returns the new record (usually
  ``pending``) without waiting for the job to start.
* Never block the event loop: do file and process work in a thread, use async clients.
* Records are :class:`JobRecord`; statuses are ``pending|running|succeeded|failed|cancelled``,
  ``error`` is one sentence and ``failed_cell`` says where a notebook failed.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import ClassVar, Protocol

from gpuhub.jobs.model import KIND_NAMES, KINDS, JobError, JobNotFound, JobRecord, JobRequest, Kind


class QuotaGate(Protocol):
    """The GPU quota as a cluster backend's ``submit`` asks it: after the idempotency check
    (a retried submit is not refused) and before anything is created. ``reserve`` raises
    :class:`JobError` (403) over quota; ``created`` says which object (kind and uid; a
    pipeline: its run id) the reservation is for, once it exists, so the hub's ledger
    matches its pods by that, never by name (``queued``: the object waits in Kueue's queue,
    so the hub shows it as waiting, not holding); ``release`` forgets a reservation whose
    objects could not be created. See :mod:`gpuhub.hub.ledger.ledger`."""

    async def reserve(self, owner: str, job_id: str, request: JobRequest) -> None: ...

    async def created(
        self, owner: str, job_id: str, request: JobRequest, uid: str, *, queued: bool = False
    ) -> None: ...

    async def release(self, owner: str, job_id: str) -> None: ...


class JobBackend(abc.ABC):
    """One place jobs run. Subclasses set ``name`` and ``kinds``."""

    name: ClassVar[str] = "abstract"
    kinds: ClassVar[frozenset[str]] = frozenset()

    def request_defaults(self) -> dict[str, object]:
        """Values for fields the body leaves out, before validation (e.g. the local
        backend's ``gpu_type`` is the server's own). The default adds none."""
        return {}

    async def check(self, request: JobRequest, owner: str) -> None:  # noqa: B027 (optional hook)
        """Refuse (raise :class:`JobError`) what is valid but cannot run on this backend.

        Called by the router before :meth:`submit`; the default accepts everything.
        """

    @abc.abstractmethod
    async def submit(
        self,
        request: JobRequest,
        owner: str,
        *,
        notebook: bytes | None = None,
        key: str | None = None,
        quota: QuotaGate | None = None,
    ) -> JobRecord:
        """Start ``request`` for ``owner`` and return its record (status ``pending``).

        What the caller knows beyond the request, each ignored by a backend with no use
        for it: ``notebook``, the notebook's bytes for a backend that cannot read the
        user's files (the jobs service's); ``key``, the idempotency key: a retried submit
        with the same key returns the job the first one made; ``quota``, the
        :class:`QuotaGate` a backend that creates GPU workloads asks after its idempotency
        check and before it creates anything.
        """

    @abc.abstractmethod
    async def list(self, owner: str) -> list[JobRecord]:
        """``owner``'s jobs, newest first."""

    @abc.abstractmethod
    async def get(self, owner: str, job_id: str) -> JobRecord:
        """One job of ``owner``'s, with fresh status. Raises :class:`JobNotFound`."""

    @abc.abstractmethod
    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        """The job's log text so far (the last ``tail`` lines when given)."""

    @abc.abstractmethod
    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        """Stop the job and everything it started; return the record (``cancelled``).

        Cancelling a job that already finished returns it unchanged.
        """

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release clients and background tasks when the server stops."""


class RemoteBackend(JobBackend):
    """The forwarding seam for Kubernetes mode: every kind, run by the ``gpuhub`` hub service.

    The user's Jupyter server holds no cluster credentials; it forwards the already
    validated request to ``jobs_url`` (env ``GPUHUB_JOBS_URL``) authenticated with
    ``api_token`` (env ``JUPYTERHUB_API_TOKEN``, sent as ``Authorization: token ...``).
    The hub service validates again with the hub's own policy, so this side's validation is
    for fast, friendly errors only.

    A subclass fills in the HTTP client: implement the five coroutines with
    :meth:`request_body` as the body of ``POST {jobs_url}/jobs`` and
    :meth:`JobRecord.from_json` for the answers; map the service's 4xx ``{"message"}`` to
    :class:`JobError` with the same status (404 to :class:`JobNotFound`). Point
    :data:`gpuhub_lab.jobs_config.GPUHubJobs.remote_backend_class` (config) at the subclass;
    ``gpuhub.jobs.remote.HubServiceBackend`` is the default it looks for.
    """

    name = "remote"
    kinds = frozenset(KINDS)

    def __init__(
        self,
        jobs_url: str,
        api_token: str,
        *,
        kinds: Iterable[str] | None = None,
        root_dir: str | None = None,
    ):
        self.jobs_url = jobs_url.rstrip("/")
        self.api_token = api_token
        self.root_dir = root_dir  # the server's root, where fetched outputs are written
        if kinds is not None:
            self.kinds = frozenset(kinds)  # type: ignore[misc]  # narrowed per deployment

    @staticmethod
    def request_body(request: JobRequest) -> dict[str, object]:
        """The canonical REST body for a validated request (what the hub service parses)."""
        body: dict[str, object] = {
            "notebook": request.notebook.path,
            "kind": request.kind,
            "name": request.name,
            "workers": request.workers,
            "parameters": dict(request.parameters),
            **request.resources.as_user_options(),
        }
        if request.runtime:
            body["runtime"] = request.runtime
        return body


class JobRouter:
    """Chooses the backend for each kind and merges answers across backends.

    ``unavailable`` maps kinds that no backend serves here to the sentence that says why
    (e.g. "PyTorchJob needs the cluster: this server is not in Kubernetes mode.").
    """

    def __init__(
        self,
        backends: Mapping[str, JobBackend],
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        self.backends = dict(backends)
        self.unavailable = dict(unavailable or {})

    @property
    def kinds(self) -> list[str]:
        return [k for k in KINDS if k in self.backends]

    def distinct(self) -> list[JobBackend]:
        seen: list[JobBackend] = []
        for backend in self.backends.values():
            if all(backend is not other for other in seen):
                seen.append(backend)
        return seen

    def backend_for(self, kind: Kind) -> JobBackend:
        backend = self.backends.get(kind)
        if backend is None:
            reason = self.unavailable.get(kind, f"This server cannot run a {KIND_NAMES[kind]}.")
            raise JobError("kind", reason)
        return backend

    async def submit(self, request: JobRequest, owner: str) -> JobRecord:
        backend = self.backend_for(request.kind)
        await backend.check(request, owner)
        return await backend.submit(request, owner)

    async def list(self, owner: str) -> list[JobRecord]:
        records: list[JobRecord] = []
        for backend in self.distinct():
            records.extend(await backend.list(owner))
        records.sort(key=lambda r: r.created, reverse=True)
        return records

    async def _find(self, owner: str, job_id: str) -> tuple[JobBackend, JobRecord]:
        for backend in self.distinct():
            try:
                return backend, await backend.get(owner, job_id)
            except JobNotFound:
                continue
        raise JobNotFound(job_id)

    async def get(self, owner: str, job_id: str) -> JobRecord:
        return (await self._find(owner, job_id))[1]

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        backend, _ = await self._find(owner, job_id)
        return await backend.logs(owner, job_id, tail=tail)

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        backend, _ = await self._find(owner, job_id)
        return await backend.cancel(owner, job_id)

    async def close(self) -> None:
        for backend in self.distinct():
            await backend.close()
