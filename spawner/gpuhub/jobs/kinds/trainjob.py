"""Kind ``trainjob``: a Kubeflow Trainer v2 TrainJob.

A TrainJob runs a ClusterTrainingRuntime's JobSet; its nodes are the pods of the runtime's
"node" replicated job (one Indexed Job, ``numNodes`` pods). Every node runs the notebook;
node 0 is the primary. Its pods belong to the JobSet, not to the TrainJob: the hub reads the
JobSet's controller to count them as the TrainJob's (:meth:`TrainJob.between`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpuhub.core.env import OUTPUT_ENV, SECONDARY_OUTPUT_ENV
from gpuhub.core.holdings import Workload
from gpuhub.jobs.kinds.base import (
    Access,
    Between,
    Needed,
    Obj,
    Parts,
    Request,
    Resource,
    Rule,
    WorkloadKind,
)
from gpuhub.jobs.kinds.job import HUB_VERBS, SERVICE_VERBS
from gpuhub.jobs.kinds.phase import (
    FINISHING,
    Phase,
    ended_phase,
    first_start,
    in_phase,
    pod_waiting,
)
from gpuhub.k8s.labels import (
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_UID_LABEL,
)

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
RUNTIME = Resource("ClusterTrainingRuntime", GROUP, VERSION, "clustertrainingruntimes")
JOBSET = Resource("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets")
NODE = "node"  # the replicated job and container Trainer's torch runtimes train in
# How the hub counts a TrainJob's pods until it has read their JobSet's owner.
IN_JOBSET = "jobset"
# Who patches the runtime for a TrainJob (spec.runtimePatches[].manager).
PATCH_MANAGER = "gpuhub.io/jobs-service"
# The Job controller's label (and annotation) of an Indexed Job's pod: a node's rank
# (Trainer's PET_NODE_RANK).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Where Kubernetes mounts a pod's ServiceAccount token. Trainer's runtime patches have no
# automountServiceAccountToken (nor enableServiceLinks), so the node container mounts an
# empty directory there instead: the ServiceAccount admission controller never mounts the
# token into a container that already mounts that path, whatever account the pod runs as
# and whatever the runtime says.
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
NO_TOKEN: Obj = {"name": "gpuhub-no-token", "emptyDir": {"sizeLimit": "1Mi"}}
NO_TOKEN_MOUNT: Obj = {"name": "gpuhub-no-token", "mountPath": TOKEN_PATH, "readOnly": True}


def node_name(labels: Mapping[str, str]) -> str:
    """How a sentence names one node's pod: "node 1"."""
    node = labels.get(COMPLETION_INDEX)
    if labels.get(JOBSET_REPLICATED_JOB_LABEL) and node is not None:
        return f"node {node}"
    return "its pod"


class TrainJob(WorkloadKind):
    name = "trainjob"
    display_name = "TrainJob"
    resource = Resource("TrainJob", GROUP, VERSION, "trainjobs")
    operator = "Kubeflow Trainer"
    distributed = True
    takes_runtime = True
    between_kind = IN_JOBSET
    # Trainer v2.3's runtime patches have no resourceClaims (KEP-2782 adds them later).
    no_claims = "Kubeflow Trainer has no field for a node's DRA resource claims"
    rbac = Access(
        service=(
            Rule(GROUP, ("trainjobs",), SERVICE_VERBS),
            # Whether the runtime a TrainJob names exists (cluster-scoped).
            Rule(GROUP, (RUNTIME.plural,), ("get",), cluster=True),
        ),
        hub=(
            Rule(GROUP, ("trainjobs",), HUB_VERBS),
            # The JobSet of a TrainJob's pods says which TrainJob they belong to.
            Rule(JOBSET.group, (JOBSET.plural,), ("get",)),
        ),
    )

    def name_stem(self, stem: str, room: int) -> str:
        if stem[0].isalpha():
            return stem
        # Trainer wants an RFC 1035 label (a letter first): "2024-run" -> "t-2024-run".
        return f"t-{stem}"[:room].rstrip("-")

    def needs(self, request: Request) -> tuple[Needed, ...]:
        runtime = request.runtime or ""
        return (
            Needed(
                RUNTIME,
                runtime,
                "runtime",
                f'The training runtime "{runtime}" is offered here but this cluster has no '
                "ClusterTrainingRuntime of that name; ask your admin to install it or to stop "
                "offering it.",
            ),
        )

    def manifest(self, parts: Parts) -> Obj:
        """``numNodes`` = the workers, ``resourcesPerNode`` = the GPUs, CPU and memory asked,
        through the ClusterTrainingRuntime the request names.

        What the Trainer API has no field for goes in a runtime patch of the "node" pods
        (``spec.runtimePatches``): gpuhub's labels and owner (the hub's ledger, the fences
        and cancel select the pods by them), the runner's volumes, the GPU type's placement,
        the restricted security context and no ServiceAccount token (:data:`NO_TOKEN`: the
        patch cannot set ``automountServiceAccountToken``). Every node runs as a job's
        primary replica; all but node 0 (the runner reads its rank) write the executed
        notebook where a job's other replicas do, kept to themselves.
        """
        request = parts.request
        assert request.runtime, "a TrainJob names its runtime (JobRequest.parse sets it)"
        pod = parts.pod_spec(NODE, primary=True)
        container = pod["containers"][0]
        other = parts.pod_spec(NODE, primary=False)["containers"][0]
        secondary = {e["name"]: e["value"] for e in other["env"]}
        env = [*container["env"], {"name": SECONDARY_OUTPUT_ENV, "value": secondary[OUTPUT_ENV]}]
        pod_patch: Obj = {
            "securityContext": pod["securityContext"],
            "volumes": [*pod["volumes"], copy.deepcopy(NO_TOKEN)],
            "containers": [
                {
                    "name": NODE,
                    "volumeMounts": [*container["volumeMounts"], copy.deepcopy(NO_TOKEN_MOUNT)],
                    "securityContext": container["securityContext"],
                }
            ],
        }
        if parts.service_account:
            pod_patch["serviceAccountName"] = parts.service_account
        for key in ("nodeSelector", "tolerations"):
            if key in pod:
                pod_patch[key] = pod[key]
        trainer: Obj = {
            "image": container["image"],
            "command": container["command"],
            "env": env,
            "numNodes": request.workers,
            "resourcesPerNode": container["resources"],
        }
        if request.resources.gpus:
            # torchrun's processes per node: one per GPU.
            trainer["numProcPerNode"] = request.resources.gpus
        node = {"metadata": parts.pod_metadata(), "spec": pod_patch}
        replicated = {"name": NODE, "template": {"spec": {"template": node}}}
        patch = {"template": {"spec": {"replicatedJobs": [replicated]}}}
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": parts.metadata,
            "spec": {
                "runtimeRef": {
                    "name": request.runtime,
                    "apiGroup": GROUP,
                    "kind": RUNTIME.kind,
                },
                "trainer": trainer,
                "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": patch}],
            },
        }

    def pod_templates(self, obj: Obj) -> list[tuple[Obj, int]]:
        """Its nodes' container as Trainer makes it from ``spec.trainer``, ``numNodes``
        times."""
        nodes = int(((obj.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
        return [({"spec": {"containers": [self.primary_container(obj)]}}, nodes)]

    def primary_container(self, obj: Obj) -> Obj:
        trainer = (obj.get("spec") or {}).get("trainer") or {}
        return {
            "image": trainer.get("image"),
            "resources": trainer.get("resourcesPerNode") or {},
            "env": trainer.get("env") or [],
        }

    def primary_pods(self, pods: list[Obj]) -> list[Obj]:
        """Node 0: the Job controller's completion index."""
        return [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(COMPLETION_INDEX) == "0"
            or (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX) == "0"
        ]

    def failed_create_events(self, obj: Obj) -> str:
        """Its pods are made by the Job of its runtime's "node" step (JobSet names it)."""
        job = f"{obj['metadata']['name']}-{NODE}-0"
        return f"involvedObject.kind=Job,involvedObject.name={job},reason=FailedCreate"

    def phase(self, obj: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
        """Its ``Complete``/``Failed`` conditions (taken from its JobSet), its nodes' pods
        meanwhile, and Trainer's progress (``status.trainerStatus``) where the runtime
        reports it."""
        status = obj.get("status") or {}
        started = first_start(pods)
        done = ended_phase(
            obj, pods, done="Complete", what="TrainJob", who=node_name, started=started
        )
        if done is not None:
            return done
        if self.suspended(obj):
            return Phase("pending", "Suspended; it starts when it is resumed.")
        if in_phase(pods, "Running"):
            return Phase("running", _progress(status) or "Running.", started=started)
        ended = in_phase(pods, "Succeeded", "Failed")
        if ended and len(ended) == len(pods):
            return Phase("running", FINISHING, started=started)
        if refused and not pods:
            return Phase("pending", f"Kubernetes refused to create the TrainJob's pods: {refused}")
        waiting = pod_waiting(pods, gpu)
        if waiting:
            return Phase("pending", waiting)
        return Phase("pending", "Waiting for Kubeflow Trainer to start its nodes.")

    def pod_workload(self, meta: Mapping[str, Any]) -> Workload | None:
        """Its JobSet's, until the hub has read the JobSet's owner: it matches no grant."""
        uid = (meta.get("labels") or {}).get(JOBSET_UID_LABEL)
        return Workload(IN_JOBSET, str(uid)) if uid else None

    def between(self, pod_meta: Mapping[str, Any]) -> Between | None:
        labels = pod_meta.get("labels") or {}
        uid, name = labels.get(JOBSET_UID_LABEL), labels.get(JOBSET_NAME_LABEL)
        if not uid or not name:
            return None
        return Between(JOBSET, str(pod_meta.get("namespace") or ""), str(name), str(uid))


def _progress(status: Obj) -> str | None:
    """Trainer's own progress, in words: "Running: 40% done, about 3 minutes left."."""
    trainer = status.get("trainerStatus") or {}
    percent = trainer.get("progressPercentage")
    if not isinstance(percent, int) or isinstance(percent, bool):
        return None
    text = f"Running: {percent}% done"
    left = trainer.get("estimatedRemainingSeconds")
    if isinstance(left, int) and not isinstance(left, bool) and left >= 0:
        minutes = max(1, round(left / 60))
        text += f", about {minutes} minute{'s' if minutes != 1 else ''} left"
    return text + "."


TRAINJOB = TrainJob()
