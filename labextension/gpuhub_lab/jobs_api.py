"""``/gpuhub/api/jobs``: submit and follow jobs from the user's own Jupyter server.

Every route needs Jupyter's authentication (token, cookie + XSRF for browsers). Errors are
JSON ``{"message": one sentence, "field": what was wrong}`` with a 4xx status. Bodies:

* ``POST /gpuhub/api/jobs`` (docs/architecture.md body) -> ``201 {"id", "status", "url", "job"}``,
  plus ``"note"``: why a cluster job that left out ``gpus`` runs without a GPU (the user's
  quota, which servers and jobs share, leaves none)
* ``GET /gpuhub/api/jobs`` -> ``{"jobs": [job, ...]}``, newest first
* ``GET /gpuhub/api/jobs/options`` -> the choices the submit dialog offers (see
  :func:`job_options`): the same images, GPU types and ranges as the spawn form
* ``GET /gpuhub/api/jobs/<id>`` -> job (see :meth:`gpuhub.jobs.JobRecord.to_json`)
* ``GET /gpuhub/api/jobs/<id>/logs?tail=N`` -> ``{"id", "status", "logs"}``
* ``DELETE /gpuhub/api/jobs/<id>`` -> the job, cancelled (unchanged if it had finished)
* ``POST /gpuhub/api/jobs/pipeline.yaml`` (submit body) -> the KFP pipeline YAML, nothing run;
  ``GET /gpuhub/api/jobs/<id>/pipeline.yaml`` -> the pipeline a pipeline step ran
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jupyter_server.auth.utils import HTTP_METHOD_TO_AUTH_ACTION
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from gpuhub.core.policy import GPUType, Policy, PolicyConfigError
from gpuhub.core.quantity import format_cpu, format_memory
from gpuhub.jobs.backend import JobRouter
from gpuhub.jobs.http import JobsJSONMixin
from gpuhub.jobs.local import server_gpu_ids
from gpuhub.jobs.model import (
    KINDS,
    MAX_NAME,
    MAX_PARAMETERS_BYTES,
    JobError,
    JobRequest,
    Runtimes,
    parse_kind,
)
from gpuhub.jobs.parameters_cell import unapplied_parameters
from gpuhub.jobs.remote import HubServiceBackend, Offer

from . import holdings
from .jobs_config import GPUHubJobs

SETTINGS_KEY = "gpuhub_jobs"


class JobsContext:
    """What the handlers share, built once per server: policy, router, settings."""

    def __init__(self, config: GPUHubJobs, root_dir: str) -> None:
        self.config = config
        self.root_dir = root_dir
        self.local_gpu_ids = [] if config.kubernetes_mode else server_gpu_ids()
        self.policy_error: str | None = None
        self._policy: Policy | None = None
        try:
            self._policy = config.policy(self.local_gpu_ids)
        except PolicyConfigError as exc:
            config.log.error("gpuhub jobs: invalid policy: %s", exc)
            self.policy_error = (
                "Jobs are unavailable because this server's gpuhub settings are invalid; "
                "tell your admin."
            )
        self.router: JobRouter = config.router(root_dir, self.local_gpu_ids)

    def parse_request(self, body: dict[str, Any], offer: Offer | None = None) -> JobRequest:
        """A submit body as a validated request, under this server's policy and limits, and
        on a cluster, its offer (the kinds and TrainJob runtimes the admin offers)."""
        return JobRequest.parse(
            body,
            policy=self.policy,
            groups=self.config.groups,
            root_dir=self.root_dir,
            max_notebook_bytes=self.config.max_notebook_size,
            max_workers=self.config.max_workers,
            kinds=offer.offered if offer is not None else None,
            runtimes=offer.runtimes if offer is not None else Runtimes(),
        )

    async def offer(self) -> Offer | None:
        """The cluster's offer through the hub service (Kubernetes mode), else None."""
        remote = next(iter(self.router.backends.values()), None)
        if isinstance(remote, HubServiceBackend):
            return await remote.offer()
        return None

    @property
    def has_policy(self) -> bool:
        """Whether the policy loaded; when not, :attr:`policy_error` says why and
        :attr:`policy` raises it as a 503."""
        return self._policy is not None

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            raise JobError("policy", self.policy_error or "Jobs are unavailable.", 503)
        return self._policy


Handler = Callable[..., Awaitable[None]]


def _json_errors(method: Handler) -> Handler:
    """Authenticate, then turn refusals into ``{"message", "field"}`` with their status."""

    @functools.wraps(method)
    async def wrapper(self: JobsHandlerBase, *args: Any, **kwargs: Any) -> None:
        await self.answering(lambda: method(self, *args, **kwargs))

    return wrapper


@web.stream_request_body
class JobsHandlerBase(JobsJSONMixin, APIHandler):
    """Bodies are streamed, so a body over the cap is refused (413) on its headers alone,
    before Jupyter's authentication and before any of it is read; Jupyter's own prepare()
    (authentication, XSRF, origin) runs once the capped body is in."""

    async def prepare(self) -> None:  # type: ignore[override]
        self.check_body_size()

    auth_resource = "gpuhub"

    async def authenticate(self) -> bool:
        """Jupyter's authentication, then its authorizer (resource ``gpuhub``: reading jobs,
        or writing them: submit and cancel), as for every other gpuhub handler here."""
        await APIHandler.prepare(self)  # raises 403 for a write without its XSRF token
        if self._finished:
            return False
        if not self.current_user:
            self.refuse(
                403, "auth", "Log in to this Jupyter server, or send its token, to use jobs."
            )
            return False
        action = HTTP_METHOD_TO_AUTH_ACTION.get(self.request.method or "", "write")
        if not self.authorizer.is_authorized(self, self.current_user, action, self.auth_resource):
            self.refuse(
                403, "auth", f"This Jupyter server does not let you {action} gpuhub's jobs."
            )
            return False
        return True

    def body_cap(self) -> int:
        return MAX_PARAMETERS_BYTES + 64 * 1024

    @property
    def jobs(self) -> JobsContext:
        context: JobsContext = self.settings[SETTINGS_KEY]
        return context

    @property
    def owner(self) -> str:
        return self.jobs.config.owner

    async def quota_room(self) -> tuple[int | None, str | None]:
        """What the user's quota leaves for a cluster job, and why nothing when it leaves
        nothing (:func:`holdings.quota_room`); ``(None, None)`` off a cluster (a job here runs
        on this server's GPUs, which count already) or when the hub does not say."""
        source = self.settings.get(holdings.SETTINGS_KEY)
        if not self.jobs.config.kubernetes_mode or not isinstance(source, holdings.HubHoldings):
            return None, None
        return holdings.quota_room(await source.get())

    async def with_estimates(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``jobs`` with each waiting one's estimated start, from the shared holdings answer
        (one hub request per few seconds, whatever the number of callers); unchanged when no
        job waits or this server has no hub to ask."""
        source = self.settings.get(holdings.SETTINGS_KEY)
        if not isinstance(source, holdings.HubHoldings) or not any(
            job.get("status") in holdings.WAITING_STATUSES for job in jobs
        ):
            return jobs
        return holdings.with_job_estimates(jobs, await source.get())


class JobsHandler(JobsHandlerBase):
    @_json_errors
    async def get(self) -> None:
        records = await self.jobs.router.list(self.owner)
        self.reply({"jobs": await self.with_estimates([r.to_json() for r in records])})

    @_json_errors
    async def post(self) -> None:
        body = self.json_object()
        router = self.jobs.router
        offer = await self.jobs.offer()
        kind = parse_kind(body.get("kind"), offer.offered if offer is not None else None)
        backend = router.backend_for(kind)
        defaults = self.jobs.config.request_defaults(
            self.jobs.policy, backend, self.jobs.local_gpu_ids
        )
        note = None
        if body.get("gpus") in (None, ""):
            # Start from what the quota leaves, as the dialog does, and say why it is none.
            left, why = await self.quota_room()
            wanted = defaults.get("gpus")
            if left is not None and isinstance(wanted, int) and left < wanted:
                defaults["gpus"], note = left, why
        for key, value in defaults.items():
            # A server's share of GPU memory is the default of a job that asks for a GPU.
            if key == "gpu_memory" and body.get("gpus") == 0:
                continue
            if body.get(key) in (None, ""):
                body[key] = value
        request = self.jobs.parse_request(body, offer)
        # Parameters the notebook has no cell for are neither run nor recorded: said instead.
        warning = await asyncio.to_thread(
            unapplied_parameters,
            request.notebook.os_path,
            request.notebook.path,
            request.parameters,
        )
        if warning is not None:
            request = dataclasses.replace(request, parameters={})
        record = await router.submit(request, self.owner)
        self.set_header("Location", url_path_join(self.base_url, "gpuhub/api/jobs", record.id))
        reply = {"id": record.id, "status": record.status, "url": record.url}
        said = {**({"note": note} if note else {}), **({"warning": warning} if warning else {})}
        self.reply({**reply, "job": record.to_json(), **said}, 201)


class JobOptionsHandler(JobsHandlerBase):
    @_json_errors
    async def get(self) -> None:
        options = job_options(self.jobs)
        left, why = await self.quota_room()
        # What the quota leaves (servers and jobs share it): the dialog starts from it and
        # says why it is none.
        options["quota"] = None if left is None else {"left": left, "note": why}
        defaults = options.get("defaults")
        if left is not None and isinstance(defaults, dict):
            defaults["gpus"] = min(int(defaults.get("gpus", 0)), left)
        if self.jobs.config.kubernetes_mode:
            # On a cluster the admin offers the kinds and runtimes, and the cluster decides
            # which of them run (Training Operator, Trainer, KFP).
            try:
                offer = await self.jobs.offer()
            except JobError as exc:
                for kind in options["kinds"]:
                    kind.update(available=False, reason=exc.message)
            else:
                if offer is not None:
                    options["kinds"] = [kind_facts(k) for k in offer.kinds]
                    options.update(offer.runtimes.to_json())
        self.reply(options)


class JobHandler(JobsHandlerBase):
    @_json_errors
    async def get(self, job_id: str) -> None:
        record = await self.jobs.router.get(self.owner, job_id)
        self.reply((await self.with_estimates([record.to_json()]))[0])

    @_json_errors
    async def delete(self, job_id: str) -> None:
        record = await self.jobs.router.cancel(self.owner, job_id)
        self.reply(record.to_json())


class JobLogsHandler(JobsHandlerBase):
    @_json_errors
    async def get(self, job_id: str) -> None:
        tail = self.tail_argument()
        router = self.jobs.router
        record = await router.get(self.owner, job_id)
        logs = await router.logs(self.owner, job_id, tail=tail)
        self.reply({"id": record.id, "status": record.status, "logs": logs})


class PipelineYAMLHandler(JobsHandlerBase):
    """KFP pipeline YAML: ``POST jobs/pipeline.yaml`` compiles a submit body without running
    it (the Kubeflow docs' "compile, then upload" way); ``GET jobs/<id>/pipeline.yaml`` is
    the pipeline a submitted pipeline step ran."""

    @_json_errors
    async def post(self) -> None:
        body = self.json_object()
        body["kind"] = "pipeline"
        request = self.jobs.parse_request(body)
        backend = self.jobs.router.backends.get("pipeline")
        if isinstance(backend, HubServiceBackend):
            text = await backend.compile_pipeline(request)
        else:
            text = await compile_here(request)
        self._yaml(text, f"{request.name}.pipeline.yaml")

    @_json_errors
    async def get(self, job_id: str) -> None:
        backend = self.jobs.router.backends.get("pipeline")
        if not isinstance(backend, HubServiceBackend):
            raise JobError("id", "Pipeline steps run on the cluster; this server has none.", 404)
        self._yaml(await backend.pipeline_yaml(job_id), f"{job_id}.pipeline.yaml")

    def _yaml(self, text: str, filename: str) -> None:
        self.set_header("Content-Type", "application/yaml")
        self.set_header("Content-Disposition", f'attachment; filename="{filename}"')
        self.finish(text)


async def compile_here(request: JobRequest) -> str:
    """Compile on this server (no cluster): the image is the one chosen, else this server's."""
    image = request.resources.image or os.environ.get("JUPYTER_IMAGE_SPEC") or ""
    if not image:
        raise JobError("image", "Choose an image for the pipeline step (image).")
    try:
        from gpuhub.jobs.pipeline import compile_pipeline
    except ImportError:  # pragma: no cover - kfp is in the lab images
        raise JobError(
            "kind", "Compiling pipelines needs kfp: pip install 'gpuhub[kfp]'.", 501
        ) from None
    notebook = await asyncio.to_thread(request.notebook.os_path.read_bytes)
    return await asyncio.to_thread(compile_pipeline, request, notebook, image=image)


def job_options(context: JobsContext) -> dict[str, Any]:
    """The submit dialog's choices for this user: what the spawn form would offer.

    ``kinds`` lists every kind with its facts (:meth:`gpuhub.jobs.kinds.base.JobKind.facts`),
    ``available`` and, when not, the sentence why, and ``here``: whether it runs on this
    server, whose GPUs ``local`` describes. The handler adds ``quota``: ``{"left", "note"}``
    on a cluster, what the user's quota leaves for a job.
    """
    router = context.router
    local = not context.config.kubernetes_mode
    kinds = [
        {
            **KINDS[kind].facts(),
            "available": kind in router.backends,
            "reason": None if kind in router.backends else router.unavailable.get(kind),
            "here": local and kind in router.backends,
        }
        for kind in KINDS
    ]
    options: dict[str, Any] = {
        "kinds": kinds,
        "available": context.has_policy,
        "reason": context.policy_error,
        "kubernetes": context.config.kubernetes_mode,
        "max_workers": context.config.max_workers,
        # TrainJob runtimes (ClusterTrainingRuntimes) the cluster offers: none off a cluster.
        **Runtimes().to_json(),
        "max_name_length": MAX_NAME,  # the dialog's default-name placeholder is cut there
        "local": None
        if context.config.kubernetes_mode
        else {
            "gpus": len(context.local_gpu_ids),
            "gpu_type": router.backends["job"].request_defaults().get("gpu_type")
            if "job" in router.backends
            else None,
            # This server's share of a GPU's memory ("8G"), which its local jobs run within.
            "gpu_memory": router.backends["job"].request_defaults().get("gpu_memory")
            if "job" in router.backends
            else None,
        },
    }
    if not context.has_policy:
        return options
    policy = context.policy
    choices = policy.choices_for(context.config.groups)
    job_backend = router.backends.get("job")
    options.update(
        {
            # The same defaults POST applies to what a request leaves out.
            "defaults": context.config.request_defaults(policy, job_backend, context.local_gpu_ids)
            if job_backend is not None
            else {"gpus": 0},
            "images": [
                {"key": i.key, "display_name": i.display_name, "description": i.description}
                for i in choices.images
            ],
            "custom_images": choices.custom_images,
            "gpu_types": [
                {
                    "key": c.gpu_type.key,
                    "display_name": c.gpu_type.display_name,
                    "description": c.gpu_type.description,
                    "max_gpus": c.max_gpus,
                    "mig": c.gpu_type.is_mig,
                    # Claimed through DRA: the kinds with ``no_claims`` cannot have it.
                    "dra": c.gpu_type.dra is not None,
                    "sharing": sharing_json(c.gpu_type),
                }
                for c in choices.gpu_types
            ],
            "max_gpus": choices.max_gpus,
            "cpu": {
                "min": float(choices.cpu.min),
                "max": float(choices.cpu.max),
                "default": format_cpu(choices.cpu.default),
            },
            "memory": {
                "min": format_memory(int(choices.memory.min)),
                "max": format_memory(int(choices.memory.max)),
                "default": format_memory(int(choices.memory.default)),
            },
        }
    )
    return options


def kind_facts(offered: Mapping[str, Any]) -> dict[str, Any]:
    """A kind the cluster offers (the jobs service's ``kinds``) with its facts: the service's
    own, else this server's registry's (a service older than the facts); none runs here."""
    known = KINDS.get(str(offered.get("kind")))
    return {**(known.facts() if known is not None else {}), **offered, "here": False}


def sharing_json(gpu_type: GPUType) -> dict[str, Any] | None:
    """How a GPU type shares its devices, for the jobs dialog: by memory (the range one job
    may ask for), or by time (no memory isolation); None for whole GPUs."""
    sharing = gpu_type.sharing
    if sharing is None:
        return None
    if sharing.memory is None:
        return {"kind": "time", "replicas": sharing.replicas}
    return {
        "kind": "memory",
        "memory": format_memory(sharing.memory),
        "min": format_memory(sharing.min),
        "max": format_memory(sharing.max),
        "default": format_memory(sharing.default),
    }


def setup_jobs(server_app: Any) -> None:
    """Register the jobs routes on a Jupyter server (called by the server extension)."""
    config = GPUHubJobs(parent=server_app)
    web_app = server_app.web_app
    context = JobsContext(config, server_app.root_dir)
    web_app.settings[SETTINGS_KEY] = context
    base = url_path_join(web_app.settings["base_url"], "gpuhub/api/jobs")
    job_id = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
    web_app.add_handlers(
        ".*$",
        [
            (base, JobsHandler),
            (url_path_join(base, "options"), JobOptionsHandler),
            (url_path_join(base, "pipeline.yaml"), PipelineYAMLHandler),
            (url_path_join(base, job_id, "logs"), JobLogsHandler),
            (url_path_join(base, job_id, "pipeline.yaml"), PipelineYAMLHandler),
            (url_path_join(base, job_id), JobHandler),
        ],
    )
    mode = f"Kubernetes mode via {config.jobs_url}" if config.kubernetes_mode else "local mode"
    server_app.log.info(
        "gpuhub jobs: %s; kinds %s", mode, ", ".join(context.router.kinds) or "none"
    )
