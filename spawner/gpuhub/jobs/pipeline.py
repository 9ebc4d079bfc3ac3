"""Kind ``pipeline``: the notebook as a one-step Kubeflow Pipelines v2 pipeline.

:func:`compile_pipeline` builds the pipeline with the kfp SDK (a ``dsl.container_component``
running papermill, GPUs through ``set_accelerator_type``/``set_accelerator_limit``, node
selector and tolerations through ``kfp-kubernetes``) and compiles it to the IR YAML that
the Kubeflow UI uploads, so a pipeline is always downloadable, with or without a KFP
endpoint. The YAML is self-contained: the notebook (gzip + base64) and its parameters are
the pipeline's default arguments, nothing is fetched at run time, and the executed notebook
is the step's output artifact (``executed_notebook``) in KFP's artifact store.

:class:`KFPBackend` submits it with ``kfp.Client(host=endpoint)`` and keeps the job's record
as a ConfigMap (owner, run id, run URL, the YAML) in the service's namespace, because KFP
runs carry no notion of a JupyterHub user.

Imports kfp lazily (it is heavy): importing this module costs nothing until a compile.
"""

# No "from __future__ import annotations": kfp reads the component signature's real types.

import asyncio
import base64
import gzip
import json
import logging
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from gpuhub.core.options import GPU_MEMORY
from gpuhub.core.quantity import format_cpu, format_memory
from gpuhub.jobs.backend import JobBackend, QuotaGate
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.kinds.pipeline import PIPELINE
from gpuhub.jobs.model import (
    JobError,
    JobNotFound,
    JobRecord,
    JobRequest,
    check_job_id,
    parse_iso,
    utcnow,
)
from gpuhub.k8s.labels import (
    CANCELLED_ANNOTATION,
    IDEMPOTENCY_KEY_ANNOTATION,
    KIND_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RECORD_ANNOTATION,
    RUN_ID_ANNOTATION,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from gpuhub.k8s.pods import gpu_env, placement
from gpuhub.k8s.rawapi import request_json

log = logging.getLogger(__name__)

# A container argument is limited to 128 KiB by Linux (MAX_ARG_STRLEN); the notebook travels
# as one, compressed. Beyond this, use a kind that mounts or ships it (kind job).
MAX_EMBEDDED_BYTES = 96 * 1024
OUTPUT_ARTIFACT = "executed_notebook"
_KFP_STATUS = {
    "PENDING": "pending",
    "RUNTIME_STATE_UNSPECIFIED": "pending",
    "PAUSED": "pending",
    "RUNNING": "running",
    "CANCELING": "running",
    "SUCCEEDED": "succeeded",
    "SKIPPED": "succeeded",
    "FAILED": "failed",
    "CANCELED": "cancelled",
}
_BOOT = """\
import base64, gzip, os, sys
os.makedirs("/tmp/gpuhub", exist_ok=True)
with open("/tmp/gpuhub/notebook.ipynb", "wb") as f:
    f.write(gzip.decompress(base64.b64decode(sys.argv[1])))
with open("/tmp/gpuhub/parameters.json", "w") as f:
    f.write(sys.argv[2])
os.environ.update(
    GPUHUB_INPUT="/tmp/gpuhub/notebook.ipynb",
    GPUHUB_OUTPUT=sys.argv[3],
    GPUHUB_PARAMETERS="/tmp/gpuhub/parameters.json",
    GPUHUB_CWD="/tmp/gpuhub",
    GPUHUB_PRINT_OUTPUT="0",
)
"""


def step_script() -> str:
    """``python -c`` source of the step: unpack the arguments, then the job pod's runner."""
    runner = m.runner_source().replace("from __future__ import annotations\n", "")
    return _BOOT + runner


def embed_notebook(notebook: bytes, path: str) -> str:
    """The notebook as the pipeline's argument (gzip + base64), or a 413 if it cannot be."""
    encoded = base64.b64encode(gzip.compress(notebook, mtime=0)).decode("ascii")
    if len(encoded) > MAX_EMBEDDED_BYTES:
        raise JobError(
            "notebook",
            f'Notebook "{path}" is {format_memory(len(notebook))} and too large to travel '
            f"inside a pipeline ({format_memory(MAX_EMBEDDED_BYTES)} compressed at most); "
            "clear large outputs, or submit it as a training job.",
            413,
        )
    return encoded


def refuse_memory_share(request: JobRequest) -> None:
    """A pipeline step cannot hold a share of GPU memory: KFP's SDK sets a GPU count on a
    step, never another extended resource (HAMi's memory), so the share would not be
    enforced nor counted. Time-sliced replicas are whole units and fine."""
    gpu_type = request.resources.gpu_type
    if request.resources.gpu_memory is not None and gpu_type is not None:
        raise JobError(
            "gpu_memory",
            f"A pipeline step cannot have a share of {GPU_MEMORY} ({gpu_type.display_name} is "
            "shared by memory, which Kubeflow Pipelines cannot ask for); run it as a training "
            "job, or choose a GPU type with whole GPUs.",
        )


def compile_pipeline(
    request: JobRequest,
    notebook: bytes,
    *,
    image: str,
    pipeline_name: str | None = None,
    owner: str | None = None,
) -> str:
    """The one-step pipeline of ``request`` as KFP v2 IR YAML (the kfp compiler's output).

    With ``owner``, the step's pod carries gpuhub's job labels, so the hub's GPU ledger
    counts the run's GPUs against the owner's quota while its pod runs."""
    from kfp import compiler, dsl, kubernetes

    refuse_memory_share(request)
    options = request.resources
    embedded = embed_notebook(notebook, request.notebook.path)
    step_image = options.image or image
    script = step_script()

    @dsl.container_component
    def run_notebook(
        notebook: str, parameters: str, executed_notebook: dsl.Output[dsl.Artifact]
    ) -> dsl.ContainerSpec:
        """Run a notebook with papermill."""
        return dsl.ContainerSpec(
            image=step_image,
            command=["python", "-c", script],
            args=[notebook, parameters, executed_notebook.path],
        )

    name = pipeline_name or request.name

    @dsl.pipeline(
        name=name, description=f"gpuhub: {request.notebook.path} ({request.gpu_summary()})"
    )
    def notebook_pipeline(
        notebook: str = embedded, parameters: str = json.dumps(dict(request.parameters))
    ) -> None:
        task = run_notebook(notebook=notebook, parameters=parameters)
        task.set_display_name(request.notebook.path)
        task.set_caching_options(False)  # a training run is not a pure function of its inputs
        # As job pods: never root. KFP's compiler and backend add the rest of the restricted
        # profile (no privilege escalation, all capabilities dropped, RuntimeDefault seccomp).
        kubernetes.set_security_context(task, run_as_non_root=True)
        task.set_cpu_request(format_cpu(options.cpu)).set_cpu_limit(format_cpu(options.cpu))
        memory = format_memory(options.memory)
        task.set_memory_request(memory).set_memory_limit(memory)
        for key, value in gpu_env(options).items():
            task.set_env_variable(key, value)
        if owner is not None and pipeline_name is not None:
            for key, value in m.labels(owner, pipeline_name, PIPELINE.name).items():
                kubernetes.add_pod_label(task, label_key=key, label_value=value)
            kubernetes.add_pod_annotation(
                task, annotation_key=USERNAME_ANNOTATION, annotation_value=owner
            )
        if options.gpu_type is not None and options.gpus:
            task.set_accelerator_type(options.gpu_type.resource_name)
            task.set_accelerator_limit(options.gpus)
            selector, tolerations = placement(options)
            for key, value in selector.items():
                kubernetes.add_node_selector(task, label_key=key, label_value=value)
            for toleration in tolerations:
                kubernetes.add_toleration(
                    task,
                    key=toleration.get("key"),
                    operator=toleration.get("operator"),
                    value=toleration.get("value"),
                    effect=toleration.get("effect"),
                    toleration_seconds=toleration.get("tolerationSeconds"),
                )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pipeline.yaml")
        compiler.Compiler().compile(notebook_pipeline, package_path=path)
        with open(path) as f:
            return f.read()


@dataclass(frozen=True)
class KFPSettings:
    endpoint: str = ""
    ui_url: str = ""
    namespace: str = "kubeflow"
    # The Kubernetes service account pipeline steps run under ("" = KFP's own, which holds
    # permissions and a mounted token); the chart's kfp.serviceAccount has none.
    service_account: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.endpoint)

    def run_url(self, run_id: str) -> str | None:
        base = (self.ui_url or self.endpoint).rstrip("/")
        return f"{base}/#/runs/details/{run_id}" if base else None


NOT_CONFIGURED = (
    "Kubeflow Pipelines is not configured on this cluster; download the pipeline YAML "
    "instead and upload it in the Kubeflow Pipelines UI."
)


def _configmap_name(job_id: str) -> str:
    return f"{job_id}-pipeline"


class KFPBackend(JobBackend):
    """Pipeline steps on Kubeflow Pipelines; records as ConfigMaps in the service namespace."""

    name = "kfp"
    kinds = frozenset({PIPELINE.name})

    def __init__(self, api: Any, settings: m.KubeJobSettings, kfp: KFPSettings) -> None:
        from kubernetes_asyncio import client

        self.settings = settings
        self.kfp = kfp
        self.core: Any = client.CoreV1Api(api)
        self._client: Any = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._state_cache: dict[str, tuple[float, dict[str, Any]]] = {}

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def kfp_client(self) -> Any:
        """One kfp.Client for the service (built on first use, in a worker thread)."""
        if self._client is None:
            import kfp

            self._client = kfp.Client(host=self.kfp.endpoint, namespace=self.kfp.namespace)
        return self._client

    async def check(self, request: JobRequest, owner: str) -> None:
        refuse_memory_share(request)
        if not self.kfp.configured:
            raise JobError("kind", NOT_CONFIGURED, 422)

    def compile(
        self,
        request: JobRequest,
        notebook: bytes,
        job_id: str | None = None,
        owner: str | None = None,
    ) -> str:
        return compile_pipeline(
            request, notebook, image=self.settings.job_image, pipeline_name=job_id, owner=owner
        )

    async def submit(
        self,
        request: JobRequest,
        owner: str,
        *,
        notebook: bytes | None = None,
        key: str | None = None,
        quota: QuotaGate | None = None,
    ) -> JobRecord:
        await self.check(request, owner)
        if notebook is None:
            raise JobError("notebook", "The notebook's content did not reach the jobs service.")
        key = key or secrets.token_hex(16)
        job_id = m.make_job_id(request.name, owner, key, PIPELINE.name)
        async with self._locks.setdefault(owner, asyncio.Lock()):
            existing = await self._read(job_id)
            if existing is not None:
                notes = existing["metadata"].get("annotations") or {}
                if (
                    notes.get(USERNAME_ANNOTATION) != owner
                    or notes.get(IDEMPOTENCY_KEY_ANNOTATION) != key
                ):
                    raise JobError("name", f'A job named "{job_id}" already exists.', 409)
                if notes.get(RUN_ID_ANNOTATION):
                    return await self._record(existing)
                # A first attempt died between the record and the run: finish it below.
                configmap = existing
            elif quota is not None:
                await quota.reserve(owner, job_id, request)
            if existing is None:
                try:
                    configmap = await self._create_record(request, notebook, job_id, owner, key)
                except BaseException:
                    if quota is not None:
                        await quota.release(owner, job_id)
                    raise
            try:
                run_id = await asyncio.to_thread(
                    self._create_run, configmap["data"]["pipeline.yaml"], job_id, owner
                )
                configmap = await request_json(
                    self.core.patch_namespaced_config_map(
                        _configmap_name(job_id),
                        self.namespace,
                        {"metadata": {"annotations": {RUN_ID_ANNOTATION: run_id}}},
                        _preload_content=False,
                    )
                )
            except Exception as exc:
                await self._delete_record(job_id)
                if quota is not None:
                    await quota.release(owner, job_id)
                if isinstance(exc, JobError):
                    raise
                log.exception("gpuhub: submitting %s to Kubeflow Pipelines failed", job_id)
                raise JobError(
                    "kind",
                    "Kubeflow Pipelines did not accept the run "
                    f"({type(exc).__name__}); nothing was left behind, try again in a moment.",
                    502,
                ) from None
            if quota is not None:  # the run's pods carry its id: the hub counts them by it
                await quota.created(owner, job_id, request, run_id)
        log.info("gpuhub: %s started KFP run %s for %s", owner, run_id, job_id)
        return await self._record(configmap)

    async def _create_record(
        self, request: JobRequest, notebook: bytes, job_id: str, owner: str, key: str
    ) -> Any:
        """The run's record: a ConfigMap with the compiled pipeline, in the user namespace."""
        yaml_text = await asyncio.to_thread(self.compile, request, notebook, job_id, owner)
        record = JobRecord.new(job_id, request, backend=self.name, owner=owner)
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": _configmap_name(job_id),
                "namespace": self.namespace,
                "labels": m.labels(owner, job_id, PIPELINE.name),
                "annotations": {
                    USERNAME_ANNOTATION: owner,
                    IDEMPOTENCY_KEY_ANNOTATION: key,
                    RECORD_ANNOTATION: json.dumps(record.to_json(), sort_keys=True),
                },
            },
            "data": {"pipeline.yaml": yaml_text},
        }
        return await request_json(
            self.core.create_namespaced_config_map(
                self.namespace, configmap, _preload_content=False
            )
        )

    def _create_run(self, pipeline_yaml: str, job_id: str, owner: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pipeline.yaml")
            with open(path, "w") as f:
                f.write(pipeline_yaml)
            result = self.kfp_client().create_run_from_pipeline_package(
                path,
                arguments={},
                run_name=job_id,
                experiment_name=f"gpuhub-{m.user_label(owner) or 'user'}",
                namespace=self.kfp.namespace,
                service_account=self.kfp.service_account or None,
            )
        return str(result.run_id)

    async def _read(self, job_id: str) -> dict[str, Any] | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            obj: dict[str, Any] = await request_json(
                self.core.read_namespaced_config_map(
                    _configmap_name(job_id), self.namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    async def _delete_record(self, job_id: str) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await request_json(
                self.core.delete_namespaced_config_map(
                    _configmap_name(job_id), self.namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                log.error("gpuhub: could not delete the record of %s: %s", job_id, exc)

    async def _owned(self, owner: str, job_id: str) -> dict[str, Any]:
        check_job_id(job_id)
        obj = await self._read(job_id)
        notes = (obj or {}).get("metadata", {}).get("annotations") or {}
        if obj is None or notes.get(USERNAME_ANNOTATION) != owner:
            raise JobNotFound(job_id)
        return obj

    async def _run_state(self, run_id: str) -> dict[str, Any]:
        """The run's state from KFP, cached for a few seconds (lists poll every job)."""
        cached = self._state_cache.get(run_id)
        if cached and time.monotonic() - cached[0] < 3.0:
            return cached[1]
        try:
            run = await asyncio.to_thread(self.kfp_client().get_run, run_id)
            state = {
                "state": str(run.state or "PENDING"),
                "created_at": run.created_at,
                "finished_at": run.finished_at,
                "error": getattr(run.error, "message", None) if run.error else None,
            }
        except Exception as exc:
            log.warning("gpuhub: KFP run %s unreadable: %s", run_id, exc)
            state = {"state": "UNKNOWN", "error": None}
        self._state_cache[run_id] = (time.monotonic(), state)
        return state

    async def _record(self, obj: dict[str, Any]) -> JobRecord:
        notes = obj["metadata"].get("annotations") or {}
        record = JobRecord.from_json(json.loads(notes[RECORD_ANNOTATION]))
        run_id = notes.get(RUN_ID_ANNOTATION)
        if notes.get(CANCELLED_ANNOTATION):
            record.status = "cancelled"
            record.finished = parse_iso(notes[CANCELLED_ANNOTATION])
        if run_id:
            record.url = self.kfp.run_url(run_id)
            if record.status != "cancelled":
                state = await self._run_state(run_id)
                if state["state"] == "UNKNOWN":
                    record.message = "Kubeflow Pipelines does not answer; status unknown."
                else:
                    record.status = _KFP_STATUS.get(state["state"], "pending")  # type: ignore[assignment]
                    record.message = f"Kubeflow Pipelines run {state['state'].lower()}."
                if record.status in ("running", "succeeded", "failed") and record.started is None:
                    record.started = _as_datetime(state.get("created_at")) or record.created
                if record.is_final:
                    record.finished = _as_datetime(state.get("finished_at")) or utcnow()
                if record.status == "failed":
                    record.error = (
                        f"The pipeline run failed: {state['error']}"
                        if state.get("error")
                        else "The pipeline run failed; see its run page."
                    )
        return record

    # -- the interface ------------------------------------------------------------------
    async def list(self, owner: str) -> list[JobRecord]:
        selector = (
            f"{MANAGED_BY_LABEL}={MANAGED_BY},{USER_LABEL}={m.user_label(owner)},"
            f"{KIND_LABEL}={PIPELINE.name}"
        )
        items = await request_json(
            self.core.list_namespaced_config_map(
                self.namespace, label_selector=selector, _preload_content=False
            )
        )
        records = [
            await self._record(obj)
            for obj in items.get("items") or []
            if (obj["metadata"].get("annotations") or {}).get(USERNAME_ANNOTATION) == owner
        ]
        records.sort(key=lambda r: r.created, reverse=True)
        return records

    async def get(self, owner: str, job_id: str) -> JobRecord:
        return await self._record(await self._owned(owner, job_id))

    async def pipeline_yaml(self, owner: str, job_id: str) -> str:
        obj = await self._owned(owner, job_id)
        return str(obj["data"]["pipeline.yaml"])

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        record = await self.get(owner, job_id)
        where = record.url or "the Kubeflow Pipelines UI"
        return f"The logs of a pipeline step are on its run page: {where}\n"

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        obj = await self._owned(owner, job_id)
        record = await self._record(obj)
        if record.is_final:
            return record
        run_id = (obj["metadata"].get("annotations") or {}).get(RUN_ID_ANNOTATION)
        if run_id:
            try:
                await asyncio.to_thread(self.kfp_client().terminate_run, run_id)
            except Exception as exc:
                log.error("gpuhub: terminating KFP run %s failed: %s", run_id, exc)
                raise JobError(
                    "id", "Kubeflow Pipelines did not stop the run; try again in a moment.", 502
                ) from None
        when = utcnow().isoformat().replace("+00:00", "Z")
        await request_json(
            self.core.patch_namespaced_config_map(
                _configmap_name(job_id),
                self.namespace,
                {"metadata": {"annotations": {CANCELLED_ANNOTATION: when}}},
                _preload_content=False,
            )
        )
        self._state_cache.pop(run_id or "", None)
        return await self.get(owner, job_id)


def _as_datetime(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_iso(value)
    return value
