"""The ``gpuhub`` hub service's HTTP API: the user-server jobs API, one level up.

Callers are users' Jupyter servers (and anything else holding a user's JupyterHub token
with the ``access:services!service=gpuhub`` scope), authenticated by JupyterHub's
:class:`~jupyterhub.services.auth.HubAuth` (``Authorization: token ...``). The routes,
under ``JUPYTERHUB_SERVICE_PREFIX`` (``/services/gpuhub/``), answer with the same shapes as
``/gpuhub/api/jobs`` in the user's server, so its :class:`~gpuhub.jobs.remote.HubServiceBackend`
is a thin forwarder:

* ``POST jobs`` (body: the user API's body plus ``notebook_content``, the notebook's text;
  header ``Idempotency-Key``) -> ``201 {"id", "status", "url", "job"}``
* ``GET jobs`` -> ``{"jobs": [...]}``; ``GET jobs/kinds`` -> which kinds run here, and why not
* ``GET|DELETE jobs/<id>``; ``GET jobs/<id>/logs?tail=N`` -> ``{"id", "status", "logs"}``
* ``GET jobs/<id>/output`` -> the executed notebook (jobs without a shared home volume)
* ``GET jobs/<id>/pipeline.yaml``, ``POST jobs/pipeline.yaml`` (compile only) -> KFP YAML
* ``GET health`` -> ``{"ok": true}`` (no authentication; for probes)

Errors: ``{"message": one sentence, "field"}`` with a 4xx status; another user's job is a 404.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

from jupyterhub.services.auth import HubAuth, HubAuthenticated, UserNotAllowed
from jupyterhub.utils import url_path_join
from tornado import web

from gpuhub.jobs.backend import JobBackend, JobRouter
from gpuhub.jobs.http import JobsJSONMixin
from gpuhub.jobs.k8s.backend import KubernetesBackend
from gpuhub.jobs.kinds import KINDS
from gpuhub.jobs.kinds.base import WorkloadKind
from gpuhub.jobs.kinds.pipeline import PIPELINE
from gpuhub.jobs.model import JobError, JobRecord, JobRequest, parse_kind
from gpuhub.jobs.pipeline import NOT_CONFIGURED, KFPBackend
from gpuhub.service.config import ServiceConfig
from gpuhub.service.notebook import shipped_notebook
from gpuhub.service.quota import HubQuota

log = logging.getLogger("gpuhub.service")

_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# A submit body is the notebook (at most max_notebook_bytes) plus a few fields; JSON string
# escaping can grow the notebook's text, so the JSON is allowed this much on top.
BODY_SLACK = 64 * 1024


class Jobs:
    """What the handlers share: configuration and backends."""

    def __init__(self, config: ServiceConfig, kube: KubernetesBackend, kfp: KFPBackend) -> None:
        self.config = config
        self.kube = kube
        self.kfp = kfp
        self.router = JobRouter({**{k: kube for k in kube.kinds}, **{k: kfp for k in kfp.kinds}})

    @property
    def max_body_bytes(self) -> int:
        """The largest request body: the notebook cap plus :data:`BODY_SLACK`."""
        return self.config.jobs.max_notebook_bytes + BODY_SLACK

    def backend(self, kind: str) -> JobBackend:
        return self.kfp if kind in self.kfp.kinds else self.kube

    async def kinds(self) -> list[dict[str, Any]]:
        """The kinds the admin offers (``kinds``), each with its facts (what the lab needs to
        offer it, :meth:`~gpuhub.jobs.kinds.base.JobKind.facts`), whether it runs here and,
        when not, the sentence why."""
        served = await self.kube.served_custom_kinds()
        queue_problem = await self.kube.queue_problem()
        out = []
        for kind in self.config.kinds:
            reason, runs = None, KINDS[kind]
            if kind in self.kfp.kinds:
                reason = None if self.config.kfp.configured else NOT_CONFIGURED
            elif queue_problem is not None:
                reason = queue_problem
            elif isinstance(runs, WorkloadKind) and runs.operator and kind not in served:
                reason = runs.not_served()
            out.append({**runs.facts(), "available": reason is None, "reason": reason})
        return out

    def record_json(self, record: JobRecord) -> dict[str, Any]:
        data = record.to_json()
        # The executed notebook comes back through GET jobs/<id>/output when no shared home
        # volume put it next to the source; the forwarder fetches it into the user's files.
        data["output_ready"] = bool(
            record.kind not in self.kfp.kinds
            and record.status in ("succeeded", "failed")
            and not self.config.jobs.home_volume.shared
        )
        return data


@web.stream_request_body
class JobsHandler(JobsJSONMixin, HubAuthenticated, web.RequestHandler):
    """Token-authenticated JSON handler; ``self.owner`` is the caller's user name.

    The body is streamed (``stream_request_body``), so :meth:`prepare` runs on the headers
    alone: a body over the cap is refused with 413 before one byte of it is read and before
    the hub is asked about the token (the path is reachable through the proxy without one);
    an undeclared body is cut at the cap. The token is checked once the body is in.
    """

    owner: str = ""
    groups: list[str]

    def initialize(self, jobs: Jobs, hub_auth: HubAuth) -> None:
        self.jobs = jobs
        self.hub_auth = hub_auth

    def body_cap(self) -> int:
        return self.jobs.max_body_bytes

    def body_cap_reason(self) -> str:
        return "the notebook limit plus 64 KiB"

    def check_xsrf_cookie(self) -> None:
        """Token-only API (no cookies are accepted), so there is no XSRF to check."""

    def get_login_url(self) -> str:
        raise web.HTTPError(403)

    async def prepare(self) -> None:
        self.check_body_size()  # on the headers alone; the caller is known later

    async def authenticate(self) -> bool:
        # HubAuth's async path: never block the loop on the hub's API (answers are cached).
        model = None
        if self.hub_auth.get_token(self, in_cookie=False):
            model = await self.hub_auth.get_user(self, sync=False)
        if model:
            try:
                model = self.check_hub_user(model)
            except UserNotAllowed:
                model = None
        self._hub_auth_user_cache = model
        if not model:
            self.refuse(
                403,
                "auth",
                "Send a JupyterHub token of yours that may use the gpuhub service "
                "(Authorization: token ...).",
            )
            return False
        if model.get("kind", "user") != "user":
            self.refuse(403, "auth", "Only users have jobs; this token belongs to a service.")
            return False
        self.owner = model["name"]
        self.groups = list(model.get("groups") or [])
        return True

    def refusal_caller(self) -> str:
        return self.owner or "anonymous"

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json")
        message = "The jobs service failed on this request; the admin's log has the detail."
        if status_code < 500:
            message = self._reason
        self.finish(json.dumps({"message": message, "field": "request"}))

    def parse(self, body: dict[str, Any]) -> tuple[JobRequest, bytes | None]:
        """The one validation path: the user API's checks with the hub's own policy."""
        config = self.jobs.config
        kind = parse_kind(body.get("kind"), config.kinds)
        content = body.pop("notebook_content", None)
        shared = config.jobs.home_volume.shared
        limit = config.jobs.max_notebook_bytes
        if kind == "job" and not shared:
            limit = config.jobs.shipped_notebook_limit
        notebook, data = shipped_notebook(
            body.get("notebook"),
            content,
            max_bytes=limit,
            mount_path=config.jobs.home_volume.mount_path,
            required=kind in self.jobs.kfp.kinds or not shared,
        )
        request = JobRequest.parse(
            body,
            policy=config.policy,
            groups=self.groups,
            root_dir=None,
            notebook=notebook,
            max_notebook_bytes=limit,
            kinds=config.kinds,
            runtimes=config.runtimes,
        )
        return request, data

    def idempotency_key(self) -> str | None:
        key = self.request.headers.get("Idempotency-Key")
        if key is None:
            return None
        if not _KEY.fullmatch(key):
            raise JobError(
                "Idempotency-Key",
                "The Idempotency-Key header must be 1 to 128 letters, digits or . _ : -.",
            )
        return key


class JobsListHandler(JobsHandler):
    async def get(self) -> None:
        async def action() -> None:
            records = await self.jobs.router.list(self.owner)
            self.reply({"jobs": [self.jobs.record_json(r) for r in records]})

        await self.answering(action)

    async def post(self) -> None:
        async def action() -> None:
            key = self.idempotency_key()
            request, data = self.parse(self.json_object())
            backend = self.jobs.backend(request.kind)
            await backend.check(request, self.owner)
            # The hub's ledger decides, under its per-user lock (spawns and submits alike).
            own = self.jobs.kube.own_quota(self.jobs.config.quota.limit_for(self.groups))
            quota = HubQuota(self.hub_auth.api_url, self.hub_auth.api_token, own)
            record = await backend.submit(request, self.owner, notebook=data, key=key, quota=quota)
            location = url_path_join(self.request.path, record.id)
            self.set_header("Location", location)
            self.reply(
                {
                    "id": record.id,
                    "status": record.status,
                    "url": record.url,
                    "job": self.jobs.record_json(record),
                },
                201,
            )

        await self.answering(action)


class KindsHandler(JobsHandler):
    async def get(self) -> None:
        async def action() -> None:
            self.reply({"kinds": await self.jobs.kinds(), **self.jobs.config.runtimes.to_json()})

        await self.answering(action)


class CompileHandler(JobsHandler):
    async def post(self) -> None:
        async def action() -> None:
            body = self.json_object()
            body["kind"] = PIPELINE.name
            request, data = self.parse(body)
            assert data is not None
            text = await asyncio.to_thread(self.jobs.kfp.compile, request, data)
            self.set_header("Content-Type", "application/yaml")
            self.set_header(
                "Content-Disposition", f'attachment; filename="{request.name}.pipeline.yaml"'
            )
            self.finish(text)

        await self.answering(action)


class JobHandler(JobsHandler):
    async def get(self, job_id: str) -> None:
        async def action() -> None:
            self.reply(self.jobs.record_json(await self.jobs.router.get(self.owner, job_id)))

        await self.answering(action)

    async def delete(self, job_id: str) -> None:
        async def action() -> None:
            record = await self.jobs.router.cancel(self.owner, job_id)
            if self.jobs.config.jobs.kueue_queue and record.backend == self.jobs.kube.name:
                # A job cancelled while queued held a renewed grant (service/holds.py).
                own = self.jobs.kube.own_quota(None)
                quota = HubQuota(self.hub_auth.api_url, self.hub_auth.api_token, own)
                await quota.release(self.owner, record.id)
            self.reply(self.jobs.record_json(record))

        await self.answering(action)


class LogsHandler(JobsHandler):
    async def get(self, job_id: str) -> None:
        async def action() -> None:
            tail = self.tail_argument()
            record = await self.jobs.router.get(self.owner, job_id)
            logs = await self.jobs.router.logs(self.owner, job_id, tail=tail)
            self.reply({"id": record.id, "status": record.status, "logs": logs})

        await self.answering(action)


class OutputHandler(JobsHandler):
    async def get(self, job_id: str) -> None:
        async def action() -> None:
            record = await self.jobs.router.get(self.owner, job_id)
            if record.kind in self.jobs.kfp.kinds:
                raise JobError(
                    "id",
                    "A pipeline step's executed notebook is its output artifact "
                    "(executed_notebook) on the run page.",
                    404,
                )
            data = await self.jobs.kube.output(self.owner, job_id)
            self.set_header("Content-Type", "application/x-ipynb+json")
            self.set_header("Cache-Control", "no-store")
            self.finish(data)

        await self.answering(action)


class PipelineYAMLHandler(JobsHandler):
    async def get(self, job_id: str) -> None:
        async def action() -> None:
            text = await self.jobs.kfp.pipeline_yaml(self.owner, job_id)
            self.set_header("Content-Type", "application/yaml")
            self.set_header("Content-Disposition", f'attachment; filename="{job_id}.yaml"')
            self.finish(text)

        await self.answering(action)


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish('{"ok": true}')


def make_app(jobs: Jobs, hub_auth: HubAuth, prefix: str) -> web.Application:
    """The tornado application, routes under ``prefix`` (``JUPYTERHUB_SERVICE_PREFIX``)."""
    base = url_path_join(prefix, "jobs")
    job_id = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
    kwargs = {"jobs": jobs, "hub_auth": hub_auth}
    return web.Application(
        [
            (url_path_join(prefix, "health"), HealthHandler),
            (base, JobsListHandler, kwargs),
            (url_path_join(base, "kinds"), KindsHandler, kwargs),
            (url_path_join(base, "pipeline.yaml"), CompileHandler, kwargs),
            (url_path_join(base, job_id, "logs"), LogsHandler, kwargs),
            (url_path_join(base, job_id, "output"), OutputHandler, kwargs),
            (url_path_join(base, job_id, "pipeline.yaml"), PipelineYAMLHandler, kwargs),
            (url_path_join(base, job_id), JobHandler, kwargs),
        ],
        # The default cap until a handler's prepare() sets the real one: bodies are streamed.
        max_body_size=jobs.max_body_bytes,
    )
