"""A Kubernetes server's GPUs claimed through DRA (:mod:`gpuhub.k8s.dra`): a part of
:class:`gpuhub.hub.gpu_spawner.GPUSpawner`.

``get_pod_manifest`` adds the claim to KubeSpawner's pod; the template the pod claims from is
created before the pod (``_make_create_pod_request``), given to the pod once it exists, and
deleted with the server; once per hub process, templates whose pod never came are swept.
The spawn form says which DRA types the cluster cannot serve
(:func:`gpuhub.hub.kube_capacity.dra_note`, from :meth:`DRAClaims._missing_classes`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from gpuhub.core.policy import GPUType
from gpuhub.hub.spawner_parts import KubePart
from gpuhub.k8s.dra import (
    TEMPLATE_SUFFIX,
    ClaimTemplates,
    claim_template,
    claims_gpus,
    container_claims,
    missing_class_words,
    pod_claims,
    shared_device_classes,
    template_name,
)
from gpuhub.k8s.labels import (
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    SERVER_COMPONENT,
)

# DRA types whose missing DeviceClass the log has said, (type key, class): once per process.
_LOGGED_MISSING: set[tuple[str, str]] = set()


def _age(meta: dict[str, Any]) -> float:
    """Seconds since an object's ``creationTimestamp`` (0 if unreadable)."""
    from datetime import datetime

    try:
        made = datetime.fromisoformat(str(meta.get("creationTimestamp")).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return time.time() - made.timestamp()


class DRAClaims(KubePart):
    """The DRA claims of a server's pod: made with its manifest, created before it, owned
    by it, deleted with the server."""

    # The template this start's pod claims its GPUs from (made by get_pod_manifest, created
    # before the pod by _make_create_pod_request); None: no DRA claim.
    _gpuhub_claims: dict[str, Any] | None = None
    # Once per hub process: templates of servers whose pod never came (a hub that died
    # between the two) are deleted.
    _gpuhub_orphans_swept = False
    ORPHAN_AGE = 600.0  # seconds: far more than between a template and its pod's creation

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's pod, with a DRA type's claim: the pod's ``resourceClaims`` names the
        template made for this request, the notebook container's ``resources.claims`` the
        claim; no GPU resource (:func:`gpuhub.k8s.pods.gpu_resources` gives none)."""
        from kubernetes_asyncio.client import CoreV1ResourceClaim, V1PodResourceClaim

        pod = await super().get_pod_manifest()
        options = self.launch_options
        self._gpuhub_claims = None
        if not claims_gpus(options):
            return pod
        assert options is not None
        name = template_name(self.pod_name)
        labels = {k: v for k, v in (pod.metadata.labels or {}).items() if k != QUEUE_NAME_LABEL}
        labels[MANAGED_BY_LABEL] = MANAGED_BY
        annotations = {
            k: v
            for k, v in (pod.metadata.annotations or {}).items()
            if k.startswith("hub.jupyter.org/")
        }
        self._gpuhub_claims = claim_template(options, name, self.namespace, labels, annotations)
        pod.spec.resource_claims = [
            V1PodResourceClaim(name=c["name"], resource_claim_template_name=name)
            for c in pod_claims(name)
        ]
        container = pod.spec.containers[0]
        container.resources.claims = [
            CoreV1ResourceClaim(name=c["name"]) for c in container_claims()
        ]
        return pod

    def _claim_templates(self) -> ClaimTemplates:
        return ClaimTemplates(self.api.api_client, self.namespace)

    async def _delete_claim_template(self) -> None:
        """The server's template, if it had one (a 404 is fine: the pod took it along). Only
        where some GPU type is claimed through DRA: no request is made for nothing."""
        if not any(t.dra is not None for t in self.gpu_policy.gpu_types.values()):
            return
        with contextlib.suppress(Exception):
            await self._claim_templates().delete(template_name(self.pod_name))

    async def _sweep_orphan_templates(self) -> None:
        """Delete the servers' templates that no pod owns and whose pod is gone: a hub
        stopped between creating one and its pod. Once per hub process."""
        cls = self.__class__
        if cls._gpuhub_orphans_swept:
            return
        cls._gpuhub_orphans_swept = True
        from kubernetes_asyncio.client.exceptions import ApiException

        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}={SERVER_COMPONENT}"
        try:
            templates = await self._claim_templates().list(selector)
            for item in templates:
                meta = item.get("metadata") or {}
                if meta.get("ownerReferences") or _age(meta) < self.ORPHAN_AGE:
                    continue
                name = str(meta.get("name") or "")
                if await self._pod_exists(name.removesuffix(TEMPLATE_SUFFIX)):
                    continue  # its pod runs on it (owning it failed); its stop deletes it
                self.log.info("Deleting ResourceClaimTemplate %s: no server pod owns it", name)
                await self._claim_templates().delete(name)
        except (TimeoutError, ApiException, OSError) as exc:
            cls._gpuhub_orphans_swept = False  # try again later
            self.log.info("Sweeping servers' ResourceClaimTemplates failed: %s", exc)

    async def _pod_exists(self, name: str) -> bool:
        from kubernetes_asyncio.client.rest import ApiException

        try:
            await self.api.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def _missing_classes(self, types: list[GPUType]) -> dict[str, str]:
        """``{type key: sentence}`` for DRA types whose DeviceClass the cluster lacks (one
        shared read of the classes a minute); the admin reads each once in the log."""
        wanted = {t.key: t.dra.device_class for t in types if t.dra is not None}
        if not wanted:
            return {}
        missing = await shared_device_classes(self.api.api_client).missing(wanted.values())
        said = {}
        for key, device_class in wanted.items():
            if device_class not in missing:
                continue
            gpu_type = self.gpu_policy.gpu_types[key]
            said[key] = missing_class_words(gpu_type.display_name, device_class)
            if (key, device_class) not in _LOGGED_MISSING:
                _LOGGED_MISSING.add((key, device_class))
                self.log.warning(
                    "gpuhub: gpu_types[%r].dra.device_class is %r, but this cluster has no "
                    "DeviceClass of that name (is its DRA driver installed?); the type is "
                    "shown as unavailable.",
                    key,
                    device_class,
                )
        return said

    async def _own_claim_template(self, name: str) -> None:
        """The pod owns its template from now on: it goes with the pod, even should the hub
        never stop the server. Should that fail, the pod has its template all the same, and
        the server's stop deletes it."""
        from kubernetes_asyncio.client.rest import ApiException

        try:
            pod = await self.api.read_namespaced_pod(self.pod_name, self.namespace)
            await self._claim_templates().own(
                name,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.pod_name,
                    "uid": pod.metadata.uid,
                    "blockOwnerDeletion": True,
                },
            )
        except (TimeoutError, ApiException, OSError) as exc:
            self.log.warning("Giving ResourceClaimTemplate %s to its pod failed: %s", name, exc)
