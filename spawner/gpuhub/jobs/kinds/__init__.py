"""Job kinds: each kind of gpuhub job in one module, behind one interface (:mod:`.base`).

:data:`KINDS` holds every kind gpuhub offers, in gpuhub's order; the model's checks, the jobs
service, the hub's ledger and its fleet page ask it rather than naming kinds. A new kind is one
module (a :class:`~.base.WorkloadKind` for a Kubernetes object of gpuhub's) and one
:func:`register` line below; the Helm chart must grant its :attr:`~.base.JobKind.rbac`
(a test says so).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpuhub.core.holdings import Workload
from gpuhub.jobs.kinds.base import JobKind, WorkloadKind
from gpuhub.jobs.kinds.job import JOB
from gpuhub.jobs.kinds.pipeline import PIPELINE
from gpuhub.jobs.kinds.pytorchjob import PYTORCHJOB
from gpuhub.jobs.kinds.tfjob import TFJOB
from gpuhub.jobs.kinds.trainjob import TRAINJOB
from gpuhub.k8s.labels import KIND_LABEL

KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    """Offer ``kind`` everywhere gpuhub offers kinds, after those registered before it."""
    if kind.name in KINDS:
        raise ValueError(f"a job kind named {kind.name!r} is registered already")
    if isinstance(kind, WorkloadKind) and by_api_kind(kind.resource.kind) is not None:
        raise ValueError(f"a job kind of Kubernetes kind {kind.resource.kind} is registered")
    KINDS[kind.name] = kind
    return kind


def kind_for(name: str) -> JobKind:
    """The kind named ``name`` (KeyError if gpuhub knows none)."""
    return KINDS[name]


def workload_kinds() -> list[WorkloadKind]:
    """The kinds whose jobs are Kubernetes objects of gpuhub's, in gpuhub's order."""
    return [k for k in KINDS.values() if isinstance(k, WorkloadKind)]


def workload_kind(name: str) -> WorkloadKind:
    """The kind named ``name``, whose jobs are Kubernetes objects (KeyError otherwise)."""
    kind = KINDS[name]
    if not isinstance(kind, WorkloadKind):
        raise KeyError(name)
    return kind


def by_api_kind(api_kind: str) -> WorkloadKind | None:
    """The kind whose object is of Kubernetes kind ``api_kind`` ("TFJob")."""
    return next((k for k in workload_kinds() if k.resource.kind == api_kind), None)


def of_object(obj: Mapping[str, Any]) -> WorkloadKind:
    """The kind of one of gpuhub's objects (KeyError for another object)."""
    kind = by_api_kind(str(obj.get("kind")))
    if kind is None:
        raise KeyError(obj.get("kind"))
    return kind


def of_pod(meta: Mapping[str, Any]) -> JobKind | None:
    """The kind of a gpuhub job's pod, by its metadata (its kind label)."""
    return KINDS.get(str((meta.get("labels") or {}).get(KIND_LABEL) or ""))


def pod_workload(meta: Mapping[str, Any]) -> Workload | None:
    """The object a gpuhub job's pod belongs to, by kind and uid, as its kind reads it from
    the pod's metadata (:meth:`~.base.JobKind.pod_workload`)."""
    kind = of_pod(meta)
    return kind.pod_workload(meta) if kind is not None else None


def owning_kind(workload: Workload) -> WorkloadKind | None:
    """The kind whose object the hub's ``workload`` is or leads to: its own kind's, or the
    kind whose pods count as ``workload`` until the object between is read (then its uid is
    not the kind's object's)."""
    return next((k for k in workload_kinds() if workload.kind in (k.name, k.between_kind)), None)


class _DisplayNames(Mapping[str, str]):
    """Kind name -> display name, of the kinds registered now."""

    def __getitem__(self, name: str) -> str:
        return KINDS[name].display_name

    def __iter__(self) -> Iterator[str]:
        return iter(KINDS)

    def __len__(self) -> int:
        return len(KINDS)


DISPLAY_NAMES: Mapping[str, str] = _DisplayNames()

register(JOB)
register(PYTORCHJOB)
register(TFJOB)
register(TRAINJOB)
register(PIPELINE)
