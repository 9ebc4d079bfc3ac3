"""The Kubernetes backend: every kind whose job is a Kubernetes object of gpuhub's
(:func:`gpuhub.jobs.kinds.workload_kinds`: a batch/v1 Job, Kubeflow's PyTorchJob, TFJob and
TrainJob), created with the hub service's own credentials. What differs between kinds is
asked of the kind; nothing here names one.

State lives in the cluster, not in the service: a job is its workload object (labels
``gpuhub.io/user`` and ``gpuhub.io/job-id``, annotations with the exact owner and the
record), its input ConfigMap (owned by the workload, so the garbage collector removes it)
and its pods. The service can restart at any time and still answers for every job.

* **Idempotent submit**: object names derive from the owner and the request's idempotency
  key, so a retried request meets ``AlreadyExists`` and returns the job made the first time.
* **No orphans**: the ConfigMap is created first, then the workload, then the ConfigMap is
  given its ownerReference; whatever step fails, what was made before it is deleted.
* **Quota**: ``submit`` asks a :class:`~gpuhub.jobs.backend.QuotaGate` under a per-user lock,
  after the idempotency check and before creating anything: the hub's ledger through the
  service (:mod:`gpuhub.service.quota`), or :class:`ClusterQuota` where there is no hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuhub.core.env import GPU_TYPE_ENV, GPUS_ENV
from gpuhub.core.gpu_resources import is_gpu_resource
from gpuhub.core.holdings import Holding, Waiting, gpus_counted, quota_sentence
from gpuhub.core.quantity import format_memory, human_memory
from gpuhub.core.sharing import share_from_env
from gpuhub.jobs.backend import JobBackend, QuotaGate
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.cancel import CancelFailed, cancel
from gpuhub.jobs.k8s.objects import Objects
from gpuhub.jobs.k8s.status import (
    LOST_OUTPUT,
    Obj,
    PodLog,
    kueue_says,
    parse_pod_log,
    parse_time,
    queue_of,
    queue_phase,
    refusal_text,
)
from gpuhub.jobs.kinds import of_object, workload_kind, workload_kinds
from gpuhub.jobs.kinds.base import Needed, Resource
from gpuhub.jobs.kinds.phase import Phase
from gpuhub.jobs.model import (
    JobError,
    JobNotFound,
    JobRecord,
    JobRequest,
    check_job_id,
    utcnow,
    without_noise,
)
from gpuhub.k8s import dra
from gpuhub.k8s.inventory import pod_holding
from gpuhub.k8s.kueue import KueueAPI, QueueUse, positions
from gpuhub.k8s.labels import (
    COMPONENT_LABEL,
    HUB_USERNAME_KEY,
    IDEMPOTENCY_KEY_ANNOTATION,
    JOB_ID_LABEL,
    KIND_LABEL,
    KUEUE_JOB_UID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    RECORD_ANNOTATION,
    SERVER_COMPONENT,
    USER_LABEL,
    USERNAME_ANNOTATION,
)
from gpuhub.k8s.rawapi import request_body as _body
from gpuhub.k8s.rawapi import request_json as _json
from gpuhub.k8s.rawapi import served_resources

log = logging.getLogger(__name__)

SERVER_SELECTOR = f"{COMPONENT_LABEL}={SERVER_COMPONENT}"  # KubeSpawner's, on server pods
DISCOVERY_TTL = 60.0  # seconds a discovery answer is trusted
MAX_LOG_BYTES = 1024 * 1024
_FINAL_CACHE = 2048  # result lines of finished jobs kept (they never change; a few KB each)
_TOMBSTONE_SECONDS = 24 * 3600
# A DRA type's job: the template its pods claim their GPUs from (gpuhub.k8s.dra).
CLAIM_TEMPLATE = Resource("ResourceClaimTemplate", dra.GROUP, dra.VERSION, dra.TEMPLATES)
DEVICE_CLASS = Resource("DeviceClass", dra.GROUP, dra.VERSION, "deviceclasses")


def _pod_gpus(pod: Obj) -> int:
    spec = pod.get("spec") or {}
    return sum(_container_gpus(c, spec) for c in spec.get("containers") or [])


def _container_gpus(container: Obj, pod_spec: Obj) -> int:
    """The GPUs a container asks for: its GPU resources, or for a type claimed through DRA
    (gpuhub.k8s.dra: a claim, no GPU resource) the count gpuhub gave it in its environment."""
    limits = (container.get("resources") or {}).get("limits") or {}
    gpus = sum(int(v) for k, v in limits.items() if is_gpu_resource(k))
    if gpus or not pod_spec.get("resourceClaims"):
        return gpus
    claims = (container.get("resources") or {}).get("claims") or []
    if not any(c.get("name") == dra.POD_CLAIM for c in claims):
        return 0
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    count = str(env.get(GPUS_ENV) or "")
    return int(count) if count.isdigit() else 0


def _gpu_resource(obj: Obj) -> str:
    """The GPU resource (``nvidia.com/gpu``, a MIG slice's) a workload's primary container
    asks for; "" for a CPU-only one."""
    container = of_object(obj).primary_container(obj)
    limits = (container.get("resources") or {}).get("limits") or {}
    return next((str(k) for k, v in limits.items() if is_gpu_resource(k) and v), "")


def _workload_gpus(obj: Obj) -> int:
    templates = of_object(obj).pod_templates(obj)
    return sum(_pod_gpus(template) * count for template, count in templates)


def _workload_share(obj: Obj) -> tuple[Fraction | None, int]:
    """What a workload of shared GPUs counts as, in GPUs, and its GPU memory (all its pods;
    :mod:`gpuhub.core.sharing`, from the environment gpuhub gave its pods); ``(None, 0)`` for
    whole GPUs."""
    total, memory, shared = Fraction(0), 0, False
    for template, count in of_object(obj).pod_templates(obj):
        containers = (template.get("spec") or {}).get("containers") or []
        env = {e["name"]: e.get("value") for c in containers for e in c.get("env") or []}
        share, size = share_from_env(env)
        if share is not None:
            shared = True
            total += share * count
            memory += size * count
        elif _pod_gpus(template):
            total += _pod_gpus(template) * count
    return (total, memory) if shared else (None, 0)


def _resources(obj: Obj) -> dict[str, Any]:
    """image, cpu, memory, gpu type resource and count of the (primary) container."""
    kind = of_object(obj)
    container = kind.primary_container(obj)
    limits = (container.get("resources") or {}).get("limits") or {}
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    templates = kind.pod_templates(obj)
    pod_spec = (templates[0][0].get("spec") or {}) if templates else {}
    return {
        "image": container.get("image"),
        "cpu": limits.get("cpu"),
        "memory": limits.get("memory"),
        "gpus": _container_gpus(container, pod_spec),
        "gpu_type": env.get(GPU_TYPE_ENV) or None,
        "gpu_memory": share_from_env(env)[1] or None,  # a share's, per pod
    }


class KubernetesBackend(JobBackend):
    """The jobs of every Kubernetes kind in one namespace, for many users (the hub service)."""

    name = "kubernetes"

    def __init__(
        self,
        api: client.ApiClient,
        settings: m.KubeJobSettings,
        *,
        gpu_names: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.settings = settings
        # Typed Any: the generated stubs want models, the apiserver takes the plain dicts
        # these manifests are (and validated as such).
        self.core: Any = client.CoreV1Api(api)
        self.objects = Objects(api, settings.namespace)
        # Every kind whose jobs are Kubernetes objects, as registered when it starts.
        self.kinds = frozenset(k.name for k in workload_kinds())  # type: ignore[misc]
        self.networking: Any = client.NetworkingV1Api(api)
        self.gpu_names = dict(gpu_names or {})  # gpu type key -> display name
        self._locks: dict[str, asyncio.Lock] = {}
        self._discovered: tuple[float, frozenset[str]] | None = None
        self._needed_seen: dict[str, float] = {}  # Needed.path -> when it was last found
        self.kueue = KueueAPI(api)
        self._kueue_said: OrderedDict[str, str] = OrderedDict()  # Workload uid -> what Kueue said
        self._final_logs: OrderedDict[str, PodLog] = OrderedDict()
        self._tombstones: dict[str, tuple[float, JobRecord]] = {}

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    # -- discovery ------------------------------------------------------------------------
    async def served_custom_kinds(self) -> frozenset[str]:
        """Which kinds served by an operator a cluster may lack (Kubeflow's) this cluster
        serves, by discovery of their groups, cached."""
        now = time.monotonic()
        if self._discovered and now - self._discovered[0] < DISCOVERY_TTL:
            return self._discovered[1]
        optional = [k for k in workload_kinds() if k.operator is not None]
        served: set[str] = set()
        for group, version in sorted({(k.resource.group, k.resource.version) for k in optional}):
            plurals = await served_resources(self.api, group, version)
            if plurals is None:
                continue
            served |= {
                k.name
                for k in optional
                if (k.resource.group, k.resource.version) == (group, version)
                and k.resource.plural in plurals
            }
        self._discovered = (now, frozenset(served))
        return self._discovered[1]

    async def kueue_served(self) -> bool:
        """Whether the cluster serves Kueue's Workload API (``kueue.x-k8s.io``, v1beta2 or
        v1beta1: :class:`gpuhub.k8s.kueue.KueueAPI`)."""
        return await self.kueue.version() is not None

    async def queue_problem(self) -> str | None:
        """Why jobs cannot run here when they are to wait in Kueue's queue and the cluster
        does not run Kueue (they would stay suspended for ever); None when all is well."""
        queue = self.settings.kueue_queue
        if not queue or await self.kueue_served():
            return None
        return (
            f'Jobs on this cluster wait in Kueue\'s queue "{queue}", but the cluster does not '
            "run Kueue (it serves no kueue.x-k8s.io Workloads), so they would never "
            "start; ask your admin to install Kueue or to unset jobs.kueue.queueName."
        )

    async def check(self, request: JobRequest, owner: str) -> None:
        problem = await self.queue_problem()
        if problem is not None:
            raise JobError("kind", problem, 422)
        kind = workload_kind(request.kind)
        if kind.operator is not None:
            served = await self.served_custom_kinds()
            if kind.name not in served:
                raise JobError("kind", kind.unserved([workload_kind(k) for k in served]), 422)
        for needed in kind.needs(request):
            await self._check_needed(needed)
        gpu_type = request.resources.gpu_type
        if dra.claims_gpus(request.resources):
            assert gpu_type is not None and gpu_type.dra is not None
            # Without its DeviceClass the job's claims could never be allocated.
            device_class = gpu_type.dra.device_class
            words = dra.missing_class_words(gpu_type.display_name, device_class)
            await self._check_needed(Needed(DEVICE_CLASS, device_class, "gpu_type", words))

    async def _check_needed(self, needed: Needed) -> None:
        """A cluster object a request needs exists (looked up at most once a minute)."""
        now = time.monotonic()
        if now - self._needed_seen.get(needed.path, -DISCOVERY_TTL) < DISCOVERY_TTL:
            return
        try:
            await self.objects.read_cluster(needed.resource, needed.name)
        except ApiException as exc:
            if exc.status == 404:
                raise JobError(needed.field, needed.missing, 422) from None
            if exc.status != 403:
                raise
            log.warning("gpuhub: may not read %s %s (403)", needed.resource.kind, needed.name)
            return
        self._needed_seen[needed.path] = now

    # -- quota (the service alone; with the hub's ledger, see gpuhub.service.quota) -------
    async def holdings(self, owner: str) -> list[Holding]:
        """What ``owner`` holds now, listed from the cluster: servers and unfinished jobs."""
        slug = m.user_label(owner)
        pods = await _json(
            self.core.list_namespaced_pod(
                self.namespace,
                label_selector=f"{SERVER_SELECTOR},{HUB_USERNAME_KEY}={slug}",
                _preload_content=False,
            )
        )
        held = []
        for pod in pods.get("items") or []:
            holding = pod_holding(pod)
            if holding is not None and holding.user == owner:  # not a slug collision
                held.append(holding)
        for obj in await self._workloads(owner):
            gpus = _workload_gpus(obj)
            # Queued jobs hold their place against the quota (docs/architecture.md).
            status = self._phase(obj, []).status
            if gpus and status in ("queued", "pending", "running"):
                share, memory = _workload_share(obj)
                name = obj["metadata"]["name"]
                waits: Waiting = "queue" if status == "queued" else ""  # a place, not GPUs
                held.append(
                    Holding(owner, "job", name, gpus, share=share, memory=memory, waiting=waits)
                )
        return held

    async def gpus_in_use(self, owner: str) -> Fraction:
        """What counts against ``owner``'s quota now: running or pending servers and
        unfinished jobs, queued ones' places included (those are waiting, not held)."""
        return gpus_counted(await self.holdings(owner))

    async def check_quota(self, request: JobRequest, owner: str, limit: Fraction) -> None:
        """The quota checked by the service alone, with LISTs (no hub ledger to ask)."""
        held = await self.holdings(owner)
        message = quota_sentence(held, limit, request.total_amount, "job")
        if message is not None:
            raise JobError("gpus", message, 403)

    def own_quota(self, limit: Fraction | None) -> ClusterQuota:
        return ClusterQuota(self, limit)

    # -- submit ---------------------------------------------------------------------------
    async def submit(
        self,
        request: JobRequest,
        owner: str,
        *,
        notebook: bytes | None = None,
        key: str | None = None,
        quota: QuotaGate | None = None,
    ) -> JobRecord:
        """Create the job's objects. ``key`` makes a retried submit return the same job."""
        key = key or secrets.token_hex(16)
        lock = self._locks.setdefault(owner, asyncio.Lock())
        async with lock:
            job_id, existing = await self._free_id(request, owner, key)
            if existing is not None:
                return self._record(existing, [])
            if quota is not None:
                await quota.reserve(owner, job_id, request)
            created = utcnow().isoformat().replace("+00:00", "Z")
            configmap = m.input_configmap(request, owner, job_id, self.settings, notebook, key)
            queue = await self._job_queue(owner)
            workload = m.workload(
                request, owner, job_id, self.settings, key=key, created=created, queue=queue
            )
            policy = m.replica_network_policy(request, owner, job_id, self.settings)
            claims = m.gpu_claim_template(request, owner, job_id, self.settings)
            try:
                made = await self._create_all(configmap, workload, owner, key, policy, claims)
            except BaseException:
                if quota is not None:
                    await quota.release(owner, job_id)
                raise
            if quota is not None:
                # Created suspended in Kueue's queue when one is set (manifests.workload).
                queued = bool(self.settings.kueue_queue)
                await quota.created(owner, job_id, request, made["metadata"]["uid"], queued=queued)
        log.info(
            "gpuhub: %s created %s %s/%s (%s)",
            owner,
            workload["kind"],
            self.namespace,
            job_id,
            request.gpu_summary(),
        )
        return self._record(made, [])

    async def _free_id(self, request: JobRequest, owner: str, key: str) -> tuple[str, Obj | None]:
        """The id this submit takes: the first of its ids (:func:`manifests.make_job_id`'s
        seeds) that no other job has; with the object a retry of it made already, if any.
        A retry walks the same ids, so it finds its own job again."""
        taken: JobError | None = None
        for attempt in range(m.ID_ATTEMPTS):
            job_id = m.make_job_id(request.name, owner, key, request.kind, attempt)
            try:
                return job_id, await self._existing(job_id, owner, key, request.kind)
            except JobError as exc:
                if exc.status != 409:
                    raise
                taken = exc  # another job's id: try the next
        assert taken is not None
        raise taken

    async def _existing(self, job_id: str, owner: str, key: str, kind: str) -> Obj | None:
        """The job a retried submit made already, or None. A job id names one object of one
        kind in the namespace: an object of that name of any other kind or owner refuses
        the submit, so no two jobs ever share an id (the hub's ledger, cancel and the
        replicas' network fence all rely on it)."""
        try:
            obj = await self._read_workload(job_id)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        annotations = obj["metadata"].get("annotations") or {}
        labels = obj["metadata"].get("labels") or {}
        if (
            annotations.get(USERNAME_ANNOTATION) != owner
            or annotations.get(IDEMPOTENCY_KEY_ANNOTATION) != key
            or labels.get(KIND_LABEL) != kind
        ):
            raise JobError("name", f"A job named {job_id!r} already exists.", 409)
        return obj

    async def _create_all(
        self,
        configmap: Obj,
        workload: Obj,
        owner: str,
        key: str,
        policy: Obj | None = None,
        claims: Obj | None = None,
    ) -> Obj:
        """ConfigMap, the GPUs' ResourceClaimTemplate (a DRA type), workload,
        ownerReferences, the replicas' NetworkPolicy: each step undone if a later one fails."""
        name = workload["metadata"]["name"]
        try:
            await _json(
                self.core.create_namespaced_config_map(
                    self.namespace, configmap, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 409:
                raise self._refusal("create the job's input", exc) from None
            # A retry after a half-finished first attempt: adopt its ConfigMap if it is ours.
            mine = await _json(
                self.core.read_namespaced_config_map(
                    configmap["metadata"]["name"], self.namespace, _preload_content=False
                )
            )
            notes = mine["metadata"].get("annotations") or {}
            if (
                notes.get(USERNAME_ANNOTATION) != owner
                or notes.get(IDEMPOTENCY_KEY_ANNOTATION) != key
            ):
                raise JobError("name", f"A job named {name!r} already exists.", 409) from None
        made: Obj | None = None
        template: str | None = None  # once made (or adopted): rolled back with the rest
        try:
            if claims is not None:
                await self._create_claim_template(claims, owner)
                template = claims["metadata"]["name"]
            made = await self._create_workload(workload)
            owned = {"metadata": {"ownerReferences": [m.owner_reference(made)]}}
            await _json(
                self.core.patch_namespaced_config_map(
                    configmap["metadata"]["name"], self.namespace, owned, _preload_content=False
                )
            )
            if template is not None:
                await self.objects.merge_patch(CLAIM_TEMPLATE, template, owned)
            if policy is not None:
                await self._create_network_policy(policy, made)
        except BaseException as exc:
            await self._roll_back(configmap["metadata"]["name"], made, template)
            if isinstance(exc, ApiException):
                raise self._refusal("create the job", exc) from None
            raise
        return made

    async def _create_network_policy(self, policy: Obj, workload: Obj) -> None:
        """The replicas' policy, owned by the workload. A cluster without the NetworkPolicy
        API cannot enforce any fence; that is the admin's to know, so it is logged."""
        policy = {
            **policy,
            "metadata": {**policy["metadata"], "ownerReferences": [m.owner_reference(workload)]},
        }
        try:
            await _json(
                self.networking.create_namespaced_network_policy(
                    self.namespace, policy, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 409:  # a retried submit: made the first time
                return
            if exc.status == 404:
                log.warning(
                    "gpuhub: this cluster serves no NetworkPolicy API; the replicas of %s "
                    "are not fenced",
                    workload["metadata"]["name"],
                )
                return
            raise

    async def _create_workload(self, workload: Obj) -> Obj:
        return await self.objects.create(of_object(workload).resource, workload)

    async def _create_claim_template(self, template: Obj, owner: str) -> None:
        """The template a DRA type's pods claim their GPUs from; a retried submit finds the
        one its first attempt made (its owner's, of the same job)."""
        try:
            await self.objects.create(CLAIM_TEMPLATE, template)
        except ApiException as exc:
            if exc.status != 409:
                raise
            name = template["metadata"]["name"]
            found = (await self.objects.read(CLAIM_TEMPLATE, name))["metadata"]
            job = (template["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
            if (found.get("annotations") or {}).get(USERNAME_ANNOTATION) != owner or (
                found.get("labels") or {}
            ).get(JOB_ID_LABEL) != job:
                raise JobError("name", f"A job named {job!r} already exists.", 409) from None

    async def _roll_back(
        self, configmap: str, workload: Obj | None, template: str | None = None
    ) -> None:
        """Delete what a failed submit made; log (never raise) if that fails too."""
        if workload is not None:
            name = workload["metadata"]["name"]
            try:
                options = {"propagationPolicy": "Background"}
                await self.objects.delete(of_object(workload).resource, name, options)
            except ApiException as exc:
                if exc.status != 404:
                    log.error("gpuhub: could not roll back %s: %s", name, exc)
        if template is not None:
            try:
                await self.objects.delete(CLAIM_TEMPLATE, template, {})
            except ApiException as exc:
                if exc.status != 404:
                    log.error(
                        "gpuhub: could not roll back ResourceClaimTemplate %s: %s", template, exc
                    )
        try:
            await _json(
                self.core.delete_namespaced_config_map(
                    configmap, self.namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                log.error("gpuhub: could not roll back ConfigMap %s: %s", configmap, exc)

    @staticmethod
    def _refusal(doing: str, exc: ApiException) -> JobError:
        """One sentence for the user; the apiserver's detail goes to the admin's log."""
        log.error("gpuhub: Kubernetes refused to %s: %s %s", doing, exc.status, exc.body)
        message = ""
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(exc.body or "{}").get("message") or ""
        if exc.status in (400, 422) and message:
            return JobError("job", f"Kubernetes refused the job: {message.rstrip('.')}.", 422)
        return JobError(
            "job",
            f"The cluster could not {doing} (HTTP {exc.status}); nothing was left behind, "
            "try again in a moment.",
            503,
        )

    # -- reading ----------------------------------------------------------------------------
    async def _read_workload(self, job_id: str) -> Obj:
        """The object named ``job_id``, of whichever kind it is (ApiException 404: none)."""
        last: ApiException | None = None
        for kind in workload_kinds():
            try:
                return await self.objects.read(kind.resource, job_id)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                last = exc
        assert last is not None
        raise last

    async def _workloads(self, owner: str) -> list[Obj]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{USER_LABEL}={m.user_label(owner)}"
        return [o for o in await self._list_workloads(selector) if self._owned(o, owner)]

    async def _list_workloads(self, selector: str) -> list[Obj]:
        """The objects matching ``selector`` of every kind the cluster serves."""
        served = await self.served_custom_kinds()
        always = [k for k in workload_kinds() if k.operator is None]
        items = []
        for kind in [*always, *(workload_kind(k) for k in sorted(served))]:
            items.extend(await self.objects.list(kind.resource, selector))
        return items

    @staticmethod
    def _owned(obj: Obj, owner: str) -> bool:
        annotations = obj["metadata"].get("annotations") or {}
        return annotations.get(USERNAME_ANNOTATION) == owner

    async def _pods(self, owner: str, job_id: str | None = None) -> list[Obj]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{USER_LABEL}={m.user_label(owner)}"
        if job_id:
            selector += f",{JOB_ID_LABEL}={job_id}"
        pods = await _json(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            )
        )
        return list(pods.get("items") or [])

    async def _get_owned(self, owner: str, job_id: str) -> Obj:
        check_job_id(job_id)
        try:
            obj = await self._read_workload(job_id)
        except ApiException as exc:
            if exc.status == 404:
                raise JobNotFound(job_id) from None
            raise
        if not self._owned(obj, owner):
            raise JobNotFound(job_id)  # never confirm that someone else's job exists
        return obj

    def _phase(
        self,
        obj: Obj,
        pods: list[Obj],
        refused: str | None = None,
        workload: Obj | None = None,
        use: QueueUse | None = None,
        place: int | None = None,
    ) -> Phase:
        queue = queue_of(obj)
        if queue is not None:
            key = _resources(obj)["gpu_type"] or ""
            fair = self._users_queue(queue)
            return queue_phase(
                self.settings.kueue_queue if fair else queue,  # the queue's name to people
                workload,
                gpus=_workload_gpus(obj),
                gpu_name=self.gpu_names.get(key, key),
                resource=_gpu_resource(obj),
                use=use,
                place=place,
                fair=fair,
            )
        return of_object(obj).phase(obj, pods, self._gpu_summary(obj), refused)

    async def _refused(self, obj: Obj, pods: list[Obj]) -> str | None:
        """Why Kubernetes refused to create the pods a pending workload still lacks (a quota,
        a missing PriorityClass, ...): its controller's newest FailedCreate event. Asked only
        when pods are missing, so a healthy job costs no extra request."""
        kind = of_object(obj)
        if len(pods) >= kind.replicas(obj) or self._phase(obj, pods).status != "pending":
            return None
        selector = kind.failed_create_events(obj)
        try:
            events = await _json(
                self.core.list_namespaced_event(
                    self.namespace, field_selector=selector, _preload_content=False
                )
            )
        except ApiException as exc:
            log.warning("gpuhub: cannot read the events of %s: %s", obj["metadata"]["name"], exc)
            return None
        items = events.get("items") or []
        if not items:
            return None
        newest = max(
            items,
            key=lambda e: (
                e.get("lastTimestamp") or e.get("eventTime") or "",
                int(e["metadata"].get("resourceVersion") or 0),
            ),
        )
        return refusal_text(newest.get("message") or "") or None

    # -- Kueue ------------------------------------------------------------------------------
    async def queued_jobs(self) -> list[QueuedJob]:
        """Every gpuhub job in the namespace that waits in Kueue's queue and asks for GPUs
        (all users: the service keeps their places against the hub's quota)."""
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{QUEUE_NAME_LABEL}"
        items = await self._list_workloads(selector)
        out = []
        for obj in items:
            owner = (obj["metadata"].get("annotations") or {}).get(USERNAME_ANNOTATION)
            gpus = _workload_gpus(obj)
            if owner and gpus and queue_of(obj) is not None:
                key = _resources(obj)["gpu_type"] or ""
                share, memory = _workload_share(obj)
                out.append(
                    QueuedJob(
                        owner=owner,
                        job_id=obj["metadata"]["name"],
                        kind=(obj["metadata"].get("labels") or {}).get(KIND_LABEL, "job"),
                        gpus=gpus,
                        gpu_type=self.gpu_names.get(key, key),
                        uid=obj["metadata"].get("uid") or "",
                        share=share,
                        memory=memory,
                    )
                )
        return out

    async def _queued(self, objects: list[Obj]) -> Queued:
        """The Workloads, places in line and queues' quota of the jobs among ``objects``
        that wait in Kueue's queue: one LIST of Workloads, and one visibility request and one
        read of the quota per queue (shared for a moment), only when some job is queued."""
        waiting = {o["metadata"]["uid"]: q for o in objects if (q := queue_of(o)) is not None}
        if not waiting:
            return Queued({}, {})
        workloads = await self._kueue_workloads(set(waiting))
        self._log_kueue(workloads)
        places: dict[str, int] = {}
        uses: dict[str, QueueUse | None] = {}
        for queue in sorted(set(waiting.values())):
            places.update(await self._queue_positions(queue))
            uses[queue] = await self.kueue.usage(self.namespace, queue)
        return Queued(workloads, places, uses)

    def _log_kueue(self, workloads: Mapping[str, Obj]) -> None:
        """Kueue's own words on waiting jobs, for the admin: logged when they change (users
        read them in gpuhub's, :func:`gpuhub.jobs.k8s.status.queue_phase`)."""
        for uid, workload in workloads.items():
            said = kueue_says(workload)
            if said and self._kueue_said.get(uid) != said:
                self._kueue_said[uid] = said
                self._kueue_said.move_to_end(uid)
                name = (workload.get("metadata") or {}).get("name")
                log.info("gpuhub: Kueue on Workload %s (job uid %s): %s", name, uid, said)
        while len(self._kueue_said) > 1000:
            self._kueue_said.popitem(last=False)

    async def _kueue_workloads(self, uids: set[str]) -> dict[str, Obj]:
        """Job uid -> its Workload: Kueue labels a job's Workload with the job's uid
        (``kueue.x-k8s.io/job-uid``) and makes the job its controlling owner; a Workload
        without the label (older Kueue) is found by its ownerReference."""
        found: dict[str, Obj] = {}

        async def listed(selector: str | None) -> list[Obj]:
            return await self.kueue.workloads(self.namespace, selector)

        def match(items: list[Obj]) -> None:
            for item in items:
                owners = {
                    r.get("uid")
                    for r in item["metadata"].get("ownerReferences") or []
                    if r.get("controller")
                }
                owners.add((item["metadata"].get("labels") or {}).get(KUEUE_JOB_UID_LABEL))
                for uid in owners & uids:
                    found.setdefault(str(uid), item)

        match(await listed(f"{KUEUE_JOB_UID_LABEL} in ({','.join(sorted(uids))})"))
        if uids - set(found):
            match(await listed(None))
        return found

    async def _queue_positions(self, queue: str) -> dict[str, int]:
        """Job uid -> place in line (1 = next) from Kueue's visibility API (v1beta2, else
        v1beta1: :meth:`gpuhub.k8s.kueue.KueueAPI.line`); empty when it cannot be read. In
        a user's own LocalQueue, the place among the whole ClusterQueue."""
        line = await self.kueue.line(self.namespace, queue)
        if not self._users_queue(queue):
            return positions(line)
        return {
            uid: pending.in_cluster_queue
            for pending in line or []
            if pending.in_cluster_queue is not None
            for _kind, _name, uid in pending.owners
            if uid
        }

    def _users_queue(self, queue: str) -> bool:
        """Whether ``queue`` is a user's own LocalQueue of a fair queue (not the admin's)."""
        return bool(self.settings.kueue_fair and queue != self.settings.kueue_queue)

    async def _job_queue(self, owner: str) -> str:
        """The LocalQueue ``owner``'s new job waits in: with ``kueue_fair`` where Kueue
        offers admission fair sharing, their own (made on first use); else the admin's
        (``kueue_queue``, "" for none). Whether Kueue offers it is asked once and logged."""
        queue = self.settings.kueue_queue
        if not queue or not self.settings.kueue_fair:
            return queue
        return await self.kueue.own_queue(self.namespace, queue, owner, "jobs") or queue

    def _gpu_summary(self, obj: Obj) -> str:
        res = _resources(obj)
        if not res["gpus"]:
            return "CPU only"
        name = self.gpu_names.get(res["gpu_type"] or "", res["gpu_type"] or "GPU")
        if res["gpu_memory"]:  # a share of one GPU, as the jobs list says it
            return f"{human_memory(res['gpu_memory'])} of 1 x {name}"
        return f"{res['gpus']} x {name}"

    def _record(
        self,
        obj: Obj,
        pods: list[Obj],
        pod_log: PodLog | None = None,
        refused: str | None = None,
        queued: Queued | None = None,
    ) -> JobRecord:
        meta = obj["metadata"]
        saved = json.loads((meta.get("annotations") or {}).get(RECORD_ANNOTATION) or "{}")
        res = _resources(obj)
        queued = queued or Queued({}, {})
        uid = meta.get("uid", "")
        use = queued.uses.get(queue_of(obj) or "")
        workload, place = queued.workloads.get(uid), queued.positions.get(uid)
        phase = self._phase(obj, pods, refused, workload, use, place)
        kind = meta.get("labels", {}).get(KIND_LABEL, "job")
        workers = of_object(obj).replicas(obj)
        summary = self._gpu_summary(obj)
        record = JobRecord(
            id=meta["name"],
            name=saved.get("name") or meta["name"],
            kind=kind,
            backend=self.name,
            status=phase.status,
            owner=meta["annotations"][USERNAME_ANNOTATION],
            notebook=saved.get("notebook") or "",
            created=parse_time(saved.get("created") or meta.get("creationTimestamp")) or utcnow(),
            started=parse_time(phase.started),
            finished=parse_time(phase.finished),
            image=res["image"],
            cpu=res["cpu"],
            memory=res["memory"],
            gpu_type=res["gpu_type"],
            gpus=res["gpus"],
            gpu_memory=format_memory(res["gpu_memory"]) if res["gpu_memory"] else None,
            workers=workers,
            gpu=f"{workers} workers, {summary} each" if workers > 1 else summary,
            parameters=saved.get("parameters") or {},
            runtime=saved.get("runtime") or None,
            message=phase.message,
            error=phase.error,
            queue_position=queued.positions.get(uid) if phase.status == "queued" else None,
        )
        if phase.status == "succeeded":
            record.output = saved.get("output")
        if pod_log is not None and pod_log.result:
            if phase.status == "failed" and pod_log.result.get("error"):
                record.error = pod_log.result["error"]
            record.failed_cell = pod_log.failed_cell
        if phase.status in ("succeeded", "failed"):
            record.message = None
            if pod_log is not None and not self.settings.home_volume.shared:
                record.message = self._output_verdict(pod_log, phase.status)
        return record

    @staticmethod
    def _output_verdict(pod_log: PodLog, status: str) -> str | None:
        """Why a finished job's executed notebook cannot come back, if it cannot."""
        if pod_log.output_problem is not None:
            return pod_log.output_problem
        if status == "succeeded" and pod_log.result is not None and not pod_log.has_output:
            return LOST_OUTPUT  # papermill always writes it; the log lost the block
        return None

    async def _final_log(self, obj: Obj, pods: list[Obj], *, full: bool = False) -> PodLog | None:
        """The parsed log of a finished job's primary pod, and the verdict on its output.

        Only the result line (status, error, failing cell) and the verdict are kept, per job
        uid: they never change. Listing and status read a log's structure only (is the
        notebook block there, whole?); the notebook is inflated, bounded, only for ``full``
        (GET output, once per user server), and a verdict against it (over the bound,
        corrupt) is cached, so it is said from then on and never inflated again.
        """
        job_id = obj["metadata"]["name"]
        cache_key = f"{job_id}/{obj['metadata'].get('uid')}"
        cached = self._final_logs.get(cache_key)
        if cached is not None and (not full or cached.output_problem is not None):
            self._final_logs.move_to_end(cache_key)
            return cached
        pod = self._primary_pod(obj, pods)
        if pod is None:
            return None
        text = await self._read_log(pod)
        inflate = full and not self.settings.home_volume.shared
        bound = self.settings.max_output_bytes
        # Counting first, keeping nothing: a bomb is judged without holding its inflation.
        parsed = await asyncio.to_thread(
            parse_pod_log, text, inflate=inflate, max_output_bytes=bound
        )
        if inflate and parsed.output_problem is None:
            parsed = await asyncio.to_thread(
                parse_pod_log, text, inflate=True, keep_notebook=True, max_output_bytes=bound
            )
        del text
        self._final_logs[cache_key] = PodLog(
            "", parsed.result, None, parsed.output_problem, parsed.has_output
        )
        while len(self._final_logs) > _FINAL_CACHE:
            self._final_logs.popitem(last=False)
        return parsed

    @staticmethod
    def _primary_pod(obj: Obj, pods: list[Obj]) -> Obj | None:
        mine = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get(JOB_ID_LABEL) == obj["metadata"]["name"]
        ]
        mine = of_object(obj).primary_pods(mine)
        if not mine:
            return None
        return max(mine, key=lambda p: p["metadata"].get("creationTimestamp") or "")

    async def _read_log(self, pod: Obj, tail: int | None = None) -> str:
        try:
            data = await _body(
                self.core.read_namespaced_pod_log(
                    pod["metadata"]["name"],
                    self.namespace,
                    container=pod["spec"]["containers"][0]["name"],
                    tail_lines=tail,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet, or gone
                return ""
            raise
        return data.decode("utf-8", errors="replace")

    def _tombstone(self, owner: str, job_id: str) -> JobRecord | None:
        now = time.monotonic()
        for key, (when, _) in list(self._tombstones.items()):
            if now - when > _TOMBSTONE_SECONDS:
                del self._tombstones[key]
        entry = self._tombstones.get(job_id)
        if entry is not None and entry[1].owner == owner:
            return entry[1]
        return None

    # -- the interface ------------------------------------------------------------------
    async def list(self, owner: str) -> list[JobRecord]:
        objects = await self._workloads(owner)
        pods = await self._pods(owner) if objects else []
        queued = await self._queued(objects)
        records = []
        seen = set()
        for obj in objects:
            name = obj["metadata"]["name"]
            seen.add(name)
            mine = [p for p in pods if p["metadata"].get("labels", {}).get(JOB_ID_LABEL) == name]
            phase = self._phase(obj, mine)
            pod_log = await self._final_log(obj, mine) if self._wants_log(phase) else None
            refused = await self._refused(obj, mine)
            records.append(self._record(obj, mine, pod_log, refused, queued))
        for _when, record in self._tombstones.values():
            if record.owner == owner and record.id not in seen:
                records.append(record)
        records.sort(key=lambda r: r.created, reverse=True)
        return records

    async def _owned_or_cancelled(
        self, owner: str, job_id: str
    ) -> tuple[Obj | None, JobRecord | None]:
        """The live workload, or else the record of a job cancelled lately (else JobNotFound)."""
        try:
            return await self._get_owned(owner, job_id), None
        except JobNotFound:
            tomb = self._tombstone(owner, job_id)
            if tomb is None:
                raise
            return None, tomb

    async def get(self, owner: str, job_id: str) -> JobRecord:
        obj, cancelled = await self._owned_or_cancelled(owner, job_id)
        if obj is None:
            assert cancelled is not None
            return cancelled
        pods = await self._pods(owner, job_id)
        phase = self._phase(obj, pods)
        pod_log = await self._final_log(obj, pods) if self._wants_log(phase) else None
        queued = await self._queued([obj])
        return self._record(obj, pods, pod_log, await self._refused(obj, pods), queued)

    def _wants_log(self, phase: Phase) -> bool:
        """A failed job's error is in its log; so is, without a shared home, its output."""
        if phase.status == "failed":
            return True
        return phase.status == "succeeded" and not self.settings.home_volume.shared

    async def logs(self, owner: str, job_id: str, *, tail: int | None = None) -> str:
        obj, _cancelled = await self._owned_or_cancelled(owner, job_id)
        if obj is None:
            return ""
        pods = await self._pods(owner, job_id)
        pod = self._primary_pod(obj, pods)
        if pod is None:
            return ""
        # Only the tail is read (tailLines); the notebook block is skipped, never inflated.
        raw = await self._read_log(pod, tail=tail)
        text = without_noise(parse_pod_log(raw, tail=tail is not None).text)
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-tail:])
        return text[-MAX_LOG_BYTES:]

    async def output(self, owner: str, job_id: str) -> bytes:
        """The executed notebook of a finished job that ran without a shared home."""
        obj = await self._get_owned(owner, job_id)
        pods = await self._pods(owner, job_id)
        phase = self._phase(obj, pods)
        if phase.status not in ("succeeded", "failed"):
            raise JobError("id", "The job has not finished; its output is not ready yet.", 409)
        pod_log = await self._final_log(obj, pods, full=True)
        if pod_log is not None and pod_log.output_problem is not None:
            raise JobError("id", pod_log.output_problem, 422)
        if pod_log is None or pod_log.notebook is None:
            where = "in your home directory" if self.settings.home_volume.shared else "in its log"
            raise JobError("id", f"The job left no executed notebook {where}.", 404)
        return pod_log.notebook

    async def cancel(self, owner: str, job_id: str) -> JobRecord:
        obj, cancelled = await self._owned_or_cancelled(owner, job_id)
        if obj is None:
            assert cancelled is not None
            return cancelled
        pods = await self._pods(owner, job_id)
        record = self._record(obj, pods)
        if record.is_final:
            return record
        # The one cancel, the fleet page's too (gpuhub.jobs.k8s.cancel): that very object.
        try:
            await cancel(
                self.objects, owner, job_id, kind=of_object(obj), uid=obj["metadata"]["uid"]
            )
        except CancelFailed as exc:
            raise self._refusal("cancel the job", exc.error) from None
        record.status = "cancelled"
        record.finished = utcnow()
        record.message = "Cancelled."
        self._tombstones[job_id] = (time.monotonic(), record)
        log.info("gpuhub: %s cancelled %s/%s", owner, self.namespace, job_id)
        return record

    async def close(self) -> None:
        await self.api.close()


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting in Kueue's queue, as the hub's ledger counts it."""

    owner: str
    job_id: str
    kind: str
    gpus: int
    gpu_type: str
    uid: str = ""
    share: Fraction | None = None  # a shared job's GPUs, as the ledger counts them
    memory: int = 0

    @property
    def share_fields(self) -> dict[str, Any]:
        """Its grant's share fields (gpuhub.service.quota.share_fields)."""
        if self.share is None:
            return {}
        return {"share": str(self.share), "gpu_memory": self.memory}


@dataclass(frozen=True)
class Queued:
    """What Kueue says about queued jobs, by job uid: their Workloads and places in line;
    and by queue, what of its quota is in use (None where that cannot be read)."""

    workloads: dict[str, Obj]
    positions: dict[str, int]
    uses: dict[str, QueueUse | None] = field(default_factory=dict)


class ClusterQuota:
    """A :class:`~gpuhub.jobs.backend.QuotaGate` that counts with LISTs from the service
    itself: for a hub without gpuhub's ledger endpoints (see :mod:`gpuhub.hub.web.api`)."""

    def __init__(self, backend: KubernetesBackend, limit: Fraction | None) -> None:
        self.backend = backend
        self.limit = limit

    async def reserve(self, owner: str, job_id: str, request: JobRequest) -> None:
        if self.limit is not None and request.total_gpus:
            await self.backend.check_quota(request, owner, self.limit)

    async def created(
        self, owner: str, job_id: str, request: JobRequest, uid: str, *, queued: bool = False
    ) -> None:
        """Nothing to bind: the objects themselves are what is counted."""

    async def release(self, owner: str, job_id: str) -> None:
        """Nothing was reserved: the objects themselves are what is counted."""
