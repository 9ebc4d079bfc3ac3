"""What a job kind is: the one interface each kind of gpuhub job implements.

A :class:`JobKind` is what every part of gpuhub asks about a kind by its name (the model's
checks, the hub's ledger and fleet page, the Helm chart's tests); a :class:`WorkloadKind` is
a kind whose job is one Kubernetes object that gpuhub creates, follows and deletes (the jobs
service's Kubernetes backend, the fleet page's cancel). What every kind shares is built by
their callers and handed in (:class:`Parts`), so a kind module says only what is its own.

Nothing here imports more than the standard library and gpuhub's core: the lab extension
imports the kinds through :mod:`gpuhub.jobs.model`, and ``%load_ext gpuhub_lab`` stays fast.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpuhub.core.holdings import Workload

if TYPE_CHECKING:
    from gpuhub.core.options import LaunchOptions
    from gpuhub.jobs.kinds.phase import Phase

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Where the API serves a kind of object."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def path(self, namespace: str, name: str) -> str:
        """The object's URL path on the apiserver."""
        return f"/apis/{self.api_version}/namespaces/{namespace}/{self.plural}/{name}"


@dataclass(frozen=True)
class Rule:
    """One RBAC rule as a Role lists it; ``cluster``: for cluster-scoped objects, so in a
    ClusterRole."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    cluster: bool = False


@dataclass(frozen=True)
class Access:
    """The RBAC rules a kind needs: the jobs service's, to create and follow its jobs, and
    the hub's, whose ledger reads its pods' owners and whose fleet page cancels its jobs.
    The Helm chart grants them; a test checks that it grants every registered kind's."""

    service: tuple[Rule, ...] = ()
    hub: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Needed:
    """A cluster-scoped object a request needs before anything is created (a TrainJob's
    runtime): ``missing`` is the refusal when the cluster has none, naming ``field``."""

    resource: Resource
    name: str
    field: str
    missing: str

    @property
    def path(self) -> str:
        return f"/apis/{self.resource.api_version}/{self.resource.plural}/{self.name}"


@dataclass(frozen=True)
class Between:
    """The object between a kind's object and its pods, as a pod names it (a TrainJob's
    JobSet): the hub reads its controller to count the pods as the kind's object's."""

    resource: Resource
    namespace: str
    name: str
    uid: str

    @property
    def path(self) -> str:
        return self.resource.path(self.namespace, self.name)


class Request(Protocol):
    """What a kind reads of a validated submit (:class:`gpuhub.jobs.model.JobRequest`). Said
    here rather than imported: the model asks the kinds to check a request, so the kinds
    must not import the model back."""

    @property
    def resources(self) -> LaunchOptions:
        """Per worker: image, cpu, memory and the GPUs."""

    @property
    def workers(self) -> int:
        """How many pods run the notebook at once (1 unless the kind is distributed)."""

    @property
    def runtime(self) -> str | None:
        """The runtime the admin offers that it runs through, for kinds that take one."""


class Parts(Protocol):
    """What every kind's object is made of, as :mod:`gpuhub.jobs.k8s.manifests` makes it."""

    @property
    def request(self) -> Request: ...

    @property
    def metadata(self) -> Obj:
        """The object's metadata: name, namespace, gpuhub's labels (and Kueue's queue),
        the exact owner, the idempotency key and the record."""

    @property
    def service_account(self) -> str:
        """The ServiceAccount pods run as where the kind cannot turn the token off per pod
        (``""``: the default)."""

    def pod_metadata(self) -> Obj:
        """A fresh copy of the metadata of each pod: gpuhub's labels and the exact owner
        (the label is a slug; the hub's ledger, the fences and cancel read them)."""

    def pod_spec(self, container: str, *, primary: bool) -> Obj:
        """A fresh pod spec of one replica: the runner in ``container``, the GPUs, placement
        and the restricted security context. Only the ``primary`` replica writes the
        executed notebook where the user reads it."""


def controller(meta: Mapping[str, Any], kind: str) -> str | None:
    """The uid of the object of Kubernetes kind ``kind`` that controls an object (a pod)."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind and ref.get("uid"):
            return str(ref["uid"])
    return None


class JobKind(abc.ABC):
    """One kind of gpuhub job, as every part of gpuhub knows it by its name.

    The name is the ``gpuhub.io/kind`` label of its objects and pods, the ``kind`` of a
    REST request and the kind of its jobs' grants; the display name is how sentences say it.
    """

    name: str
    display_name: str
    # Whether it runs the notebook on several pods at once (``workers``).
    distributed: bool = False
    # Whether it runs through a runtime the admin offers (``runtime``, ``trainer.runtimes``).
    takes_runtime: bool = False
    # Where its runs live and are cancelled when they are no object of gpuhub's (a pipeline's
    # runs: Kubeflow Pipelines), and what one run is called there; None: gpuhub cancels them.
    runs_in: str | None = None
    run_name: str = ""
    rbac: Access = Access()
    # Why its pods cannot claim GPUs of a type claimed through DRA (gpuhub.k8s.dra), as a
    # refusal says it; "": their pod templates carry the claim.
    no_claims: str = ""
    # What the lab's submit dialog says of it where it is a choice of its own (a kind whose
    # runs live elsewhere, ``runs_in``), and how the jobs panel names its job's page (a
    # record's ``url``).
    description: str = ""
    run_page: str = "Run page"

    def facts(self) -> dict[str, Any]:
        """What the lab knows of it, served with the kinds offered (the jobs options answer,
        docs/jobs.md), so that a new kind needs no change in the lab."""
        return {
            "kind": self.name,
            "label": self.display_name,
            "distributed": self.distributed,
            "takes_runtime": self.takes_runtime,
            "runs_in": self.runs_in,
            "no_claims": self.no_claims or None,
            "description": self.description,
            "run_page": self.run_page,
        }

    def name_stem(self, stem: str, room: int) -> str:
        """The stem of a job id (``<stem>-<digest>``) at most ``room`` characters long, as
        this kind's objects may be named."""
        return stem

    @abc.abstractmethod
    def pod_workload(self, meta: Mapping[str, Any]) -> Workload | None:
        """The workload one of its pods belongs to, by a pod's metadata (labels users cannot
        write): the hub matches it to the job's grant. None: not known from the pod."""

    def __repr__(self) -> str:
        return f"<job kind {self.name}>"


class WorkloadKind(JobKind):
    """A kind whose job is one Kubernetes object of gpuhub's: made from a request, read back
    into a record, suspended while Kueue holds it and deleted to cancel it."""

    resource: Resource
    # What serves its API where a cluster may lack it ("Kubeflow Trainer"); None: every
    # cluster serves it.
    operator: str | None = None
    # Where its object keeps ``suspend``: Kueue admits a job by turning it off.
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    # The reason of its controller's event when Kubernetes refuses to create a pod.
    failed_create: str = "FailedCreate"
    # The workload kind its pods count as until the object between it and them is read (a
    # TrainJob's pods: "jobset", :meth:`between`); None: its pods say their workload.
    between_kind: str | None = None

    # -- making it ------------------------------------------------------------------------
    @abc.abstractmethod
    def manifest(self, parts: Parts) -> Obj:
        """Its object for ``parts.request``, not suspended (:meth:`suspend` does that)."""

    def needs(self, request: Request) -> tuple[Needed, ...]:
        """The cluster objects ``request`` needs before anything is created."""
        return ()

    def suspend(self, obj: Obj) -> None:
        """Create it suspended: it waits in Kueue's queue, which resumes it once admitted."""
        *path, last = self.suspend_path
        place = obj
        for key in path:
            place = place.setdefault(key, {})
        place[last] = True

    def suspended(self, obj: Obj) -> bool:
        place: Any = obj
        for key in self.suspend_path:
            place = place.get(key) if isinstance(place, Mapping) else None
        return bool(place)

    # -- reading it -----------------------------------------------------------------------
    @abc.abstractmethod
    def phase(self, obj: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
        """Its status in human terms from its conditions and its ``pods`` (``gpu``: what it
        holds, as the jobs list says it); ``refused``: why Kubernetes refused to create a
        pod it lacks."""

    @abc.abstractmethod
    def pod_templates(self, obj: Obj) -> list[tuple[Obj, int]]:
        """Each pod template of its object, with how many pods run it."""

    @abc.abstractmethod
    def primary_container(self, obj: Obj) -> Obj:
        """The container of its primary pod (image, resources, env) as its object says it."""

    def replicas(self, obj: Obj) -> int:
        """How many pods it runs at once."""
        return sum(count for _, count in self.pod_templates(obj))

    def primary_pods(self, pods: list[Obj]) -> list[Obj]:
        """Which of its pods (all of one job) may be the primary one, whose log is the job's."""
        return pods

    def failed_create_events(self, obj: Obj) -> str:
        """The field selector of the events that say why Kubernetes refused its pods."""
        return f"involvedObject.uid={obj['metadata']['uid']},reason={self.failed_create}"

    def pod_workload(self, meta: Mapping[str, Any]) -> Workload | None:
        """Its object's, when that controls the pod."""
        uid = controller(meta, self.resource.kind)
        return Workload(self.name, uid) if uid else None

    # -- the objects between it and its pods ------------------------------------------------
    def between(self, pod_meta: Mapping[str, Any]) -> Between | None:
        """The object between it and the pod, where its pods do not say its uid."""
        return None

    def owner_uid(self, between: Mapping[str, Any]) -> str | None:
        """The uid of its object, from the object between (its controller)."""
        return controller(between.get("metadata") or {}, self.resource.kind)

    # -- where it cannot run ------------------------------------------------------------------
    def not_served(self) -> str:
        """Why it is not offered on a cluster that does not serve its API (the kinds list)."""
        return f"This cluster does not run {self.display_name}s (no {self.operator})."

    def unserved(self, served: Collection[WorkloadKind]) -> str:
        """Why a submit is refused on a cluster that serves only the kinds ``served``."""
        res = self.resource
        return (
            f"This cluster cannot run a {self.display_name}: {self.operator} is not installed "
            f"(no {res.api_version} {res.kind} resource); ask your admin."
        )
