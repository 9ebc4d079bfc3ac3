"""The Kubernetes backend's submit: idempotent ids, the ConfigMap, a DRA type's claim
template, the workload, ownerReferences and the replicas' NetworkPolicy, with roll-back
(no orphans; see :mod:`gpuhub.jobs.k8s.backend`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets

from kubernetes_asyncio.client.exceptions import ApiException

from gpuhub.jobs.backend import QuotaGate
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.records import Records
from gpuhub.jobs.k8s.status import Obj
from gpuhub.jobs.kinds import of_object
from gpuhub.jobs.kinds.base import Resource
from gpuhub.jobs.model import JobError, JobRecord, JobRequest, utcnow
from gpuhub.k8s import dra
from gpuhub.k8s.labels import (
    IDEMPOTENCY_KEY_ANNOTATION,
    JOB_ID_LABEL,
    KIND_LABEL,
    USERNAME_ANNOTATION,
)
from gpuhub.k8s.rawapi import request_json as _json

log = logging.getLogger(__name__)


# A DRA type's job: the template its pods claim their GPUs from (gpuhub.k8s.dra).
CLAIM_TEMPLATE = Resource("ResourceClaimTemplate", dra.GROUP, dra.VERSION, dra.TEMPLATES)


class Creating(Records):
    """Submit: the objects of a job made in order, each undone if a later step fails."""

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
            gpu_type = request.resources.gpu_type
            queue = await self._job_queue(owner, gpu_type.key if gpu_type else "")
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
