"""The claims of a GPU type claimed through Dynamic Resource Allocation (docs/architecture.md,
"GPUs through DRA"): pure builders of the ``resource.k8s.io/v1`` objects a server's or job's
pod asks for its GPUs through, the namespace's ResourceClaimTemplates, and which DeviceClasses
the cluster has.

A DRA type's pod carries no extended-resource GPU limit. Its GPUs come from a claim the
controller-manager makes from a ResourceClaimTemplate gpuhub writes for the request (one claim
per pod, ending with it): the pod lists the template in ``spec.resourceClaims`` and its GPU
container names the claim in ``resources.claims``. ``gpus`` is the claim's device count; a
share by memory asks for ``gpu_memory`` of one device's capacity (``DRAType.capacity``).

Who makes and deletes a template: :class:`gpuhub.hub.gpu_spawner.GPUSpawner` for a server
(before its pod; owned by the pod once it exists, deleted when the server stops),
:mod:`gpuhub.jobs.k8s.backend` for a job (before the job; owned by the job).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from gpuhub.core.options import LaunchOptions
from gpuhub.core.quantity import format_memory
from gpuhub.k8s.rawapi import get_json, request_json

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
TEMPLATES = "resourceclaimtemplates"
# The pod's name for its GPU claim (spec.resourceClaims[].name, resources.claims[].name) and
# the claim's one request.
POD_CLAIM = "gpus"
REQUEST = "gpu"
# What a template's name adds to its pod's or job's.
TEMPLATE_SUFFIX = "-gpus"


def claims_gpus(options: LaunchOptions | None) -> bool:
    """Whether a pod of these options asks for GPUs through a DRA claim."""
    return bool(
        options is not None
        and options.gpu_type is not None
        and options.gpu_type.dra is not None
        and options.gpus > 0
    )


def device_request(options: LaunchOptions) -> dict[str, Any]:
    """The claim's one request: ``gpus`` devices of the type's class meeting its selectors,
    or for a share by memory one device and ``gpu_memory`` of its capacity."""
    gpu_type = options.gpu_type
    assert gpu_type is not None and gpu_type.dra is not None, "a DRA type's request"
    dra = gpu_type.dra
    exactly: dict[str, Any] = {
        "deviceClassName": dra.device_class,
        "allocationMode": "ExactCount",
        "count": options.gpus,
    }
    if dra.expressions:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in dra.expressions]
    if gpu_type.shares_memory and options.gpu_memory is not None:
        exactly["count"] = 1
        exactly["capacity"] = {"requests": {dra.capacity: format_memory(options.gpu_memory)}}
    return {"name": REQUEST, "exactly": exactly}


def claim_template(
    options: LaunchOptions,
    name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ResourceClaimTemplate of one request. Its claims carry the same labels and
    annotations, so the hub tells whose a claim is as it tells whose a pod is."""
    meta: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {
            "metadata": {k: dict(v) for k, v in meta.items()},
            "spec": {"devices": {"requests": [device_request(options)]}},
        },
    }


def pod_claims(template: str) -> list[dict[str, str]]:
    """A pod's ``spec.resourceClaims``: one claim made from ``template`` for the pod."""
    return [{"name": POD_CLAIM, "resourceClaimTemplateName": template}]


def container_claims() -> list[dict[str, str]]:
    """The GPU container's ``resources.claims``: the whole claim."""
    return [{"name": POD_CLAIM}]


def template_name(owner_name: str) -> str:
    """The template of a pod's or job's GPUs, by the pod's or job's name."""
    return f"{owner_name}{TEMPLATE_SUFFIX}"


class ClaimTemplates:
    """The ResourceClaimTemplates of one namespace, as raw JSON (``ApiException`` on a
    refusal), through the ``kubernetes_asyncio`` ``ApiClient`` ``api_client``."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes_asyncio import client

        # Typed Any: the generated stubs want models, the apiserver takes plain dicts.
        self._custom: Any = client.CustomObjectsApi(api_client)
        self.namespace = namespace

    def _where(self) -> tuple[str, str, str, str]:
        return GROUP, VERSION, self.namespace, TEMPLATES

    async def replace(self, template: dict[str, Any]) -> dict[str, Any]:
        """Create ``template``; one of that name left from an earlier start of the same pod
        (whose request may differ, and a template's spec cannot change) is deleted first."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            return await self._create(template)
        except ApiException as exc:
            if exc.status != 409:
                raise
        await self.delete(template["metadata"]["name"])
        return await self._create(template)

    async def _create(self, template: dict[str, Any]) -> dict[str, Any]:
        return await request_json(
            self._custom.create_namespaced_custom_object(
                *self._where(), template, _preload_content=False
            )
        )

    async def own(self, name: str, owner: dict[str, Any]) -> None:
        """Give the template ``owner`` (an ownerReference): it goes when its owner goes."""
        await request_json(
            self._custom.patch_namespaced_custom_object(
                *self._where(),
                name,
                {"metadata": {"ownerReferences": [owner]}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    async def delete(self, name: str) -> bool:
        """Delete it; False when there was none."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await request_json(
                self._custom.delete_namespaced_custom_object(
                    *self._where(), name, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True

    async def list(self, selector: str) -> list[dict[str, Any]]:
        """The templates matching the label ``selector``."""
        listed = await request_json(
            self._custom.list_namespaced_custom_object(
                *self._where(), label_selector=selector, _preload_content=False
            )
        )
        return list(listed.get("items") or [])


# -- which DeviceClasses the cluster has ------------------------------------------------------


def missing_class_words(display_name: str, device_class: str) -> str:
    """The sentence for a DRA type whose DeviceClass the cluster lacks."""
    return (
        f"{display_name} GPUs cannot be used now: this cluster has no DeviceClass "
        f'"{device_class}" (its DRA driver is not installed); ask your admin.'
    )


def unreadable_words(display_names: list[str], why: str) -> str:
    """The sentence for DRA types whose devices the hub may not read; ``why`` is
    :attr:`gpuhub.hub.ledger.dra_capacity.DeviceWatch.forbidden`."""
    names = display_names[0] if len(display_names) == 1 else ", ".join(display_names)
    return (
        f"Live availability of {names} GPUs cannot be shown: {why}. You can still start a "
        "server; it will wait for free GPUs."
    )


class DeviceClasses:
    """The cluster's DeviceClass names, read at most once per ``ttl`` seconds and shared by
    every caller (the hub's start, each form, each spawn): one GET, never one per view."""

    def __init__(self, api_client: Any, ttl: float = 60.0) -> None:
        self._api = api_client
        self._ttl = ttl
        self._names: frozenset[str] | None = None
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    async def names(self) -> frozenset[str] | None:
        """The DeviceClasses' names (empty where the cluster serves no DRA); None when the
        cluster cannot be asked now (then nobody can tell, and nothing is said)."""
        async with self._lock:
            if self._names is None or time.monotonic() - self._read_at > self._ttl:
                self._names = await self._read()
                self._read_at = time.monotonic()
            return self._names

    async def _read(self) -> frozenset[str] | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            listed = await get_json(self._api, f"/apis/{API_VERSION}/deviceclasses")
        except ApiException as exc:
            if exc.status == 404:
                return frozenset()  # no resource.k8s.io/v1: no class at all
            return None
        except (TimeoutError, OSError, ValueError):
            return None
        return frozenset(
            str((item.get("metadata") or {}).get("name") or "")
            for item in listed.get("items") or []
        )

    async def missing(self, classes: Iterable[str]) -> set[str]:
        """Which of ``classes`` the cluster lacks (none when it cannot be asked)."""
        names = await self.names()
        return set() if names is None else set(classes) - names


_SHARED: dict[int, DeviceClasses] = {}


def shared_device_classes(api_client: Any) -> DeviceClasses:
    """One :class:`DeviceClasses` per API client (it keeps the client, so the id stays its)."""
    found = _SHARED.get(id(api_client))
    if found is None:
        found = _SHARED[id(api_client)] = DeviceClasses(api_client)
    return found
