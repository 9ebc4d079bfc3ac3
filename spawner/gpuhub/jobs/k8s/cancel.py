"""One cancel for every Kubernetes kind, the jobs service's (a user cancels their own job) and
the hub fleet page's (an admin cancels anyone's, with a reason).

The job's object is found by its labels (the owner's slug and the job id), then checked by the
exact owner in its annotation and, where the caller knows it, by uid: nothing is deleted that
is another user's, or another object that took the name since. It is deleted in foreground (it
stays, with a deletionTimestamp, until its pods are gone, so nothing keeps running unseen) with
its uid as a precondition; its ConfigMap and NetworkPolicy go with it (ownerReferences).
"""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes_asyncio.client.exceptions import ApiException

from gpuhub.jobs.k8s.manifests import user_label
from gpuhub.jobs.k8s.objects import Objects
from gpuhub.jobs.kinds import workload_kinds
from gpuhub.jobs.kinds.base import Obj, WorkloadKind
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    USER_LABEL,
    USERNAME_ANNOTATION,
)


class CancelFailed(Exception):
    """Kubernetes refused a step of a cancel: ``doing`` says which ("delete TFJob ns/x")."""

    def __init__(self, doing: str, error: ApiException) -> None:
        super().__init__(f"Kubernetes refused to {doing}: {error.status} {error.reason}")
        self.doing = doing
        self.error = error


async def cancel(
    objects: Objects,
    owner: str,
    job_id: str,
    *,
    kind: WorkloadKind | None = None,
    uid: str | None = None,
    note: Mapping[str, str] | None = None,
) -> list[Obj]:
    """Delete ``owner``'s job ``job_id``: its object of ``kind`` (of any kind if None), only
    the one of ``uid`` when given. ``note``: annotations set on it first (who cancelled it
    and why). Returns the objects deleted: none when there is no such job (any more).
    Raises :class:`CancelFailed`."""
    selector = (
        f"{MANAGED_BY_LABEL}={MANAGED_BY},{USER_LABEL}={user_label(owner)},{JOB_ID_LABEL}={job_id}"
    )
    deleted = []
    for each in [kind] if kind is not None else workload_kinds():
        res = each.resource
        try:
            found = await objects.list(res, selector)
        except ApiException as exc:
            if exc.status == 404:
                continue  # its operator is not installed
            raise CancelFailed(f"list {res.kind}s in {objects.namespace}", exc) from None
        for obj in found:
            meta = obj["metadata"]
            if (meta.get("annotations") or {}).get(USERNAME_ANNOTATION) != owner:
                continue  # a slug's collision: the label is not the exact name
            if uid and meta.get("uid") != uid:
                continue
            name = meta["name"]
            try:
                if note:
                    await objects.merge_patch(res, name, {"metadata": {"annotations": note}})
                # Deleted only if it is still that very object (not one made since by that name).
                options = {"propagationPolicy": "Foreground", "preconditions": {"uid": meta["uid"]}}
                await objects.delete(res, name, options)
            except ApiException as exc:
                if exc.status in (404, 409):
                    continue  # gone meanwhile (409: replaced by another object of that name)
                raise CancelFailed(f"delete {res.kind} {objects.namespace}/{name}", exc) from None
            deleted.append(obj)
    return deleted
