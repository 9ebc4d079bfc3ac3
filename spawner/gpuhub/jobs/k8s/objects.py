"""gpuhub's objects of every kind through one door, by their :class:`~gpuhub.jobs.kinds.base.Resource`.

The apiserver serves built-in groups (batch/v1 Jobs) at the same paths as custom resources
(``/apis/<group>/<version>/namespaces/<namespace>/<plural>``), so one client, the custom
objects API, reads, lists, creates, patches and deletes them all, and no caller tells a Job
from a Kubeflow object. Answers are the API's raw JSON, as the manifests are plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from gpuhub.jobs.kinds.base import Obj, Resource
from gpuhub.k8s.rawapi import request_json


class Objects:
    """The objects of one namespace (``ApiException`` on a refusal)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        # Typed Any: the generated stubs want models, the apiserver takes plain dicts.
        self.custom: Any = client.CustomObjectsApi(api)
        self.namespace = namespace

    def _where(self, res: Resource) -> tuple[str, str, str, str]:
        return res.group, res.version, self.namespace, res.plural

    async def list(self, res: Resource, selector: str) -> list[Obj]:
        """The objects matching the label ``selector``, each with its kind and apiVersion
        (a list's items of built-in kinds lack them)."""
        listed = await request_json(
            self.custom.list_namespaced_custom_object(
                *self._where(res), label_selector=selector, _preload_content=False
            )
        )
        return [
            {"kind": res.kind, "apiVersion": res.api_version, **item}
            for item in listed.get("items") or []
        ]

    async def read(self, res: Resource, name: str) -> Obj:
        return await request_json(
            self.custom.get_namespaced_custom_object(
                *self._where(res), name, _preload_content=False
            )
        )

    async def create(self, res: Resource, obj: Obj) -> Obj:
        return await request_json(
            self.custom.create_namespaced_custom_object(
                *self._where(res), obj, _preload_content=False
            )
        )

    async def merge_patch(self, res: Resource, name: str, patch: Mapping[str, Any]) -> Obj:
        return await request_json(
            self.custom.patch_namespaced_custom_object(
                *self._where(res),
                name,
                dict(patch),
                # The client's default for custom objects is a JSON Patch (a list).
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    async def delete(self, res: Resource, name: str, options: Mapping[str, Any]) -> None:
        """Delete with ``options`` (a DeleteOptions: propagation, preconditions)."""
        await request_json(
            self.custom.delete_namespaced_custom_object(
                *self._where(res), name, body=dict(options), _preload_content=False
            )
        )

    async def read_cluster(self, res: Resource, name: str) -> Obj:
        """A cluster-scoped object (a TrainJob's ClusterTrainingRuntime)."""
        return await request_json(
            self.custom.get_cluster_custom_object(
                res.group, res.version, res.plural, name, _preload_content=False
            )
        )
