"""What the Kubeflow Training Operator's (v1) kinds share: a master or chief replica and
workers, each a pod template under ``spec.<x>ReplicaSpecs``, ``spec.runPolicy`` and the
operator's conditions. :mod:`.pytorchjob` and :mod:`.tfjob` say what differs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpuhub.jobs.kinds.base import Access, Obj, Parts, Resource, Rule, WorkloadKind
from gpuhub.jobs.kinds.job import HUB_VERBS, SERVICE_VERBS
from gpuhub.jobs.kinds.phase import (
    Phase,
    condition,
    ended_phase,
    first_start,
    pod_waiting,
)

GROUP = "kubeflow.org"
VERSION = "v1"
# The operator's labels on the pods it makes: the replica's type (lower case) and index.
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
PRIMARY_TYPES = ("master", "chief")  # the replica types that write the notebook, lower case


def replica_name(labels: Mapping[str, str]) -> str:
    """How a sentence names one replica's pod: "master 0", "worker 1"."""
    role, index = labels.get(REPLICA_TYPE_LABEL), labels.get(REPLICA_INDEX_LABEL)
    return f"{role} {index}" if role and index is not None else "its pod"


def rbac(plural: str) -> Access:
    return Access(
        service=(Rule(GROUP, (plural,), SERVICE_VERBS),),
        hub=(Rule(GROUP, (plural,), HUB_VERBS),),
    )


class TrainingOperatorKind(WorkloadKind):
    """A Training Operator kind: ``specs_key`` holds its replicas, ``master`` names the one
    that writes the notebook, ``container`` the container the operator looks for.

    A subclass names its Kubernetes kind once (``api_kind``); its name in requests (lower
    case), its resource (the operator's plural: lower case and "s") and its RBAC follow.
    """

    operator = "Kubeflow training operator"
    distributed = True
    suspend_path = ("spec", "runPolicy", "suspend")
    failed_create = "FailedCreatePod"
    api_kind: str
    specs_key: str
    master: str
    container: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        plural = f"{cls.api_kind.lower()}s"
        cls.name = cls.api_kind.lower()
        cls.display_name = cls.api_kind
        cls.resource = Resource(cls.api_kind, GROUP, VERSION, plural)
        cls.rbac = rbac(plural)

    def spec(self, parts: Parts) -> dict[str, Any]:
        """What its spec holds besides the replicas and the run policy."""
        return {}

    def manifest(self, parts: Parts) -> Obj:
        request = parts.request

        def replica(replicas: int, primary: bool) -> Obj:
            return {
                "replicas": replicas,
                "restartPolicy": "Never",
                "template": {
                    "metadata": parts.pod_metadata(),
                    "spec": parts.pod_spec(self.container, primary=primary),
                },
            }

        specs = {self.master: replica(1, True)}
        if request.workers > 1:
            specs["Worker"] = replica(request.workers - 1, False)
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": parts.metadata,
            "spec": {
                # Keep finished pods: their logs are the job's logs. Cancel deletes everything.
                "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
                self.specs_key: specs,
                **self.spec(parts),
            },
        }

    def pod_templates(self, obj: Obj) -> list[tuple[Obj, int]]:
        return [
            (replica.get("template") or {}, int(replica.get("replicas") or 1))
            for replica in (obj.get("spec") or {}).get(self.specs_key, {}).values()
        ]

    def primary_container(self, obj: Obj) -> Obj:
        template = obj["spec"][self.specs_key][self.master]["template"]
        return template["spec"]["containers"][0]

    def primary_pods(self, pods: list[Obj]) -> list[Obj]:
        masters = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get(REPLICA_TYPE_LABEL) in PRIMARY_TYPES
        ]
        return masters or pods

    def phase(self, obj: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
        kind = self.resource.kind
        status = obj.get("status") or {}
        started = status.get("startTime")
        done = ended_phase(
            obj, pods, done="Succeeded", what=kind, who=replica_name, started=started
        )
        if done is not None:
            return done
        if condition(obj, "Running"):
            return Phase(
                "running", "Running.", started=status.get("startTime") or first_start(pods)
            )
        if condition(obj, "Restarting"):
            return Phase("running", "Restarting a replica.", started=status.get("startTime"))
        if refused:
            return Phase("pending", f"Kubernetes refused to create the {kind}'s pods: {refused}")
        waiting = pod_waiting(pods, gpu)
        if waiting:
            return Phase("pending", waiting)
        if condition(obj, "Created"):
            return Phase("pending", "Created; the training operator is starting its pods.")
        return Phase(
            "pending", f"Waiting for the Kubeflow training operator to pick up the {kind}."
        )

    def unserved(self, served: Collection[WorkloadKind]) -> str:
        siblings = sorted(k.display_name for k in served if isinstance(k, TrainingOperatorKind))
        if siblings:
            return (
                f"This cluster does not run {self.display_name}s (the Kubeflow training "
                f"operator serves only {', '.join(siblings)} here)."
            )
        return (
            f"This cluster cannot run a {self.display_name}: the Kubeflow training operator is "
            f"not installed (no {GROUP}/{VERSION} PyTorchJob or TFJob resource); submit a "
            "training job (kind job) instead."
        )
