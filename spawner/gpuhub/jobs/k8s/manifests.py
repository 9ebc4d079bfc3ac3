"""Kubernetes objects for a job: its kind's object (:mod:`gpuhub.jobs.kinds`) made of the parts
every kind shares (labels, the exact owner, the runner's pod), plus the ConfigMap that carries
the runner, the parameters and (without a shared home) the notebook.

Pure functions from a validated :class:`~gpuhub.jobs.model.JobRequest` to plain dicts, so the
manifests are checked against the official schemas in tests without a cluster. The pod of
each follows the same GPU rules as a single-user server (:mod:`gpuhub.k8s.pods`).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

from kubespawner.slugs import safe_slug

from gpuhub.core.env import (
    CWD_ENV,
    INPUT_ENV,
    JOB_ID_ENV,
    OUTPUT_ENV,
    PARAMETERS_ENV,
    PRINT_OUTPUT_ENV,
)
from gpuhub.core.quantity import format_memory
from gpuhub.jobs.kinds import kind_for, workload_kind
from gpuhub.jobs.model import ID_HEX, JobError, JobRequest, Kind, new_job_id
from gpuhub.jobs.paths import output_path
from gpuhub.k8s.dra import claim_template, claims_gpus, pod_claims, template_name
from gpuhub.k8s.labels import (
    IDEMPOTENCY_KEY_ANNOTATION,
    JOB_ID_LABEL,
    KIND_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    RECORD_ANNOTATION,
    USER_LABEL,
    USERNAME_ANNOTATION,
    user_label,
)
from gpuhub.k8s.pods import container_resources, gpu_env, placement, shm_volume

RUN_DIR = "/var/run/gpuhub"  # the ConfigMap, read-only
WORK_DIR = "/var/run/gpuhub-work"  # an emptyDir for the output when there is no shared home
CONFIGMAP_LIMIT = 1024 * 1024  # Kubernetes refuses ConfigMaps whose data exceed 1 MiB
_CONFIGMAP_SLACK = 16 * 1024  # metadata, keys and the runner


@dataclass(frozen=True)
class HomeVolume:
    """The user's home volume as zero-to-jupyterhub makes it (``jobs.homeVolume``)."""

    claim_name_template: str = "claim-{username}"
    mount_path: str = "/home/jovyan"
    shared: bool = False  # ReadWriteMany: a job may mount it while the server runs

    def claim_name(self, owner: str) -> str:
        # The same expansions as KubeSpawner 7's pvc_name_template.
        return self.claim_name_template.format(
            username=safe_slug(owner, max_length=48),
            unescaped_username=owner,
            servername="",
        )


@dataclass(frozen=True)
class KubeJobSettings:
    """What the Kubernetes backends need from the service's configuration."""

    namespace: str = "default"
    job_image: str = "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    home_volume: HomeVolume = field(default_factory=HomeVolume)
    max_notebook_bytes: int = 1024 * 1024
    # Most bytes the service inflates from a job's log to get its executed notebook back.
    max_output_bytes: int = 64 * 1024 * 1024
    # Kueue's LocalQueue in ``namespace`` that jobs wait in (``jobs.kueue.queueName``); "":
    # jobs are not queued (no label, not suspended). A job labelled with a LocalQueue's name
    # and created suspended waits there until its ClusterQueue has quota, then Kueue
    # unsuspends it (https://kueue.sigs.k8s.io/docs/concepts/; its API: gpuhub.k8s.kueue).
    kueue_queue: str = ""
    # line_order = "fair" (the hub's): where Kueue orders ``kueue_queue``'s ClusterQueue by
    # past usage (admission fair sharing), each user's jobs wait in a LocalQueue of their own
    # beside it (gpuhub.k8s.kueue.user_queue_name), as their GPU servers do.
    kueue_fair: bool = False
    # The ServiceAccount a TrainJob's pods run as (the chart's, which mounts no token):
    # Trainer's runtime patches cannot turn automountServiceAccountToken off per pod. "": the
    # runtime's own (the namespace's default account).
    job_service_account: str = ""

    @property
    def shipped_notebook_limit(self) -> int:
        """Largest notebook that can travel in the ConfigMap."""
        return min(self.max_notebook_bytes, CONFIGMAP_LIMIT - _CONFIGMAP_SLACK)


# Seeds a submit tries for its id (make_job_id's ``attempt``): another job may have one, by
# chance (6 hex digits) or on purpose; the next seed gives another id, the same on a retry.
ID_ATTEMPTS = 8


def make_job_id(name: str, owner: str, key: str, kind: Kind, attempt: int = 0) -> str:
    """A namespace-unique object name from the job's name, its owner, its kind and the
    idempotency key, in the shape of every job id (:func:`gpuhub.jobs.model.new_job_id`:
    ``train-1e9fe9``).

    Deterministic, so a retried submit with the same key names the same object and the
    apiserver's ``AlreadyExists`` makes it idempotent. Owner and kind are in the seed, so
    a Job, a PyTorchJob and a TFJob (and any later kind) of the same name and key, or of
    two users, get different ids. Six hex digits may meet another job's: the backend then
    tries the next ``attempt`` (a retry walks the same ids, and finds its own), and never
    takes an id that an object of another kind or owner has. Distributed kinds keep room
    for the Training Operator's ``-worker-63`` suffix within the 63 characters of a Service
    name.
    """
    seed = f"{owner}\0{kind}\0{key}" + (f"\0{attempt}" if attempt else "")
    tail = ID_HEX + 1
    # Pods of distributed kinds are named <id>-worker-<index> (or <id>-node-0-<index>).
    room = 63 - len("-worker-63") - tail if kind_for(kind).distributed else 63 - tail
    stem = kind_for(kind).name_stem(name[:room].rstrip("-") or "job", room)
    return new_job_id(stem, seed.encode())


def labels(owner: str, job_id: str, kind: str) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        USER_LABEL: user_label(owner),
        JOB_ID_LABEL: job_id,
        KIND_LABEL: kind,
    }


def runner_source() -> str:
    return resources.files("gpuhub.jobs").joinpath("run_notebook.py").read_text()


def configmap_name(job_id: str) -> str:
    return f"{job_id}-input"


def input_configmap(
    request: JobRequest,
    owner: str,
    job_id: str,
    settings: KubeJobSettings,
    notebook: bytes | None,
    key: str,
) -> dict[str, Any]:
    """The runner, the parameters and, without a shared home, the notebook itself.

    Raises :class:`JobError` (413) when the notebook is over what a ConfigMap can carry.
    """
    data = {
        "run.py": runner_source(),
        "parameters.json": json.dumps(dict(request.parameters)),
    }
    if not settings.home_volume.shared:
        if notebook is None:
            raise JobError("notebook", "The notebook's content did not reach the jobs service.")
        limit = settings.shipped_notebook_limit
        if len(notebook) > limit:
            raise JobError(
                "notebook",
                f"notebook {request.notebook.path!r} is {format_memory(len(notebook))}, over the "
                f"{format_memory(limit)} a cluster job can carry without a shared home volume; "
                "clear large outputs and try again.",
                413,
            )
        try:
            data["notebook.ipynb"] = notebook.decode("utf-8")
        except UnicodeDecodeError:
            raise JobError("notebook", "The notebook is not UTF-8 text.") from None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(job_id),
            "namespace": settings.namespace,
            "labels": labels(owner, job_id, request.kind),
            "annotations": {USERNAME_ANNOTATION: owner, IDEMPOTENCY_KEY_ANNOTATION: key},
        },
        "data": data,
    }


def owner_reference(workload: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to a created workload, so the garbage collector removes dependents."""
    meta = workload["metadata"]
    return {
        "apiVersion": workload["apiVersion"],
        "kind": workload["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


@dataclass(frozen=True)
class _Runner:
    """What runs the notebook in a job's pod: its volumes, mounts, environment and folder."""

    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    env: dict[str, str]
    cwd: str


def _runner(
    request: JobRequest, owner: str, job_id: str, settings: KubeJobSettings, *, primary: bool
) -> _Runner:
    """The runner of one pod. Only the primary one (the Job's pod, the master/chief, a
    TrainJob's node 0) writes the executed notebook; the others run the same code and keep
    their output to themselves."""
    options = request.resources
    home = settings.home_volume
    notebook = PurePosixPath(request.notebook.path)
    volumes: list[dict[str, Any]] = [
        {"name": "gpuhub-input", "configMap": {"name": configmap_name(job_id)}},
        {"name": "gpuhub-work", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "gpuhub-input", "mountPath": RUN_DIR, "readOnly": True},
        {"name": "gpuhub-work", "mountPath": WORK_DIR},
    ]
    if home.shared:
        volumes.append(
            {"name": "home", "persistentVolumeClaim": {"claimName": home.claim_name(owner)}}
        )
        mounts.append({"name": "home", "mountPath": home.mount_path})
        source = f"{home.mount_path}/{notebook}"
        cwd = str(PurePosixPath(source).parent)
        output = (
            f"{home.mount_path}/{output_path(request.notebook.path, job_id)}"
            if primary
            else f"{WORK_DIR}/{notebook.name}"
        )
    else:
        source = f"{RUN_DIR}/notebook.ipynb"
        cwd = WORK_DIR
        output = f"{WORK_DIR}/{notebook.name}"
    shm = shm_volume(options)
    if shm is not None:
        volumes.append(shm[0])
        mounts.append(shm[1])
    env = {
        INPUT_ENV: source,
        OUTPUT_ENV: output,
        PARAMETERS_ENV: f"{RUN_DIR}/parameters.json",
        CWD_ENV: cwd,
        PRINT_OUTPUT_ENV: "1" if primary and not home.shared else "0",
        JOB_ID_ENV: job_id,
        "JUPYTERHUB_USER": owner,
        "PYTHONUNBUFFERED": "1",
        **gpu_env(options),
    }
    return _Runner(volumes, mounts, env, cwd)


def _pod_spec(
    request: JobRequest,
    owner: str,
    job_id: str,
    settings: KubeJobSettings,
    *,
    container_name: str,
    primary: bool,
) -> dict[str, Any]:
    """The pod of one replica of a job."""
    options = request.resources
    runner = _runner(request, owner, job_id, settings, primary=primary)
    volumes, mounts, env, cwd = runner.volumes, runner.mounts, runner.env, runner.cwd
    selector, tolerations = placement(options)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # User code holds no cluster credentials (DESIGN: "User pods hold no cluster credentials").
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "containers": [
            {
                "name": container_name,
                "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
                "image": options.image or settings.job_image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python", f"{RUN_DIR}/run.py"],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "resources": container_resources(options),
                "volumeMounts": mounts,
                "workingDir": cwd,
            }
        ],
        "volumes": volumes,
    }
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = tolerations
    if claims_gpus(options):
        # Each pod gets its own claim from the job's template (gpuhub.k8s.dra).
        spec["resourceClaims"] = pod_claims(template_name(job_id))
    return spec


def gpu_claim_template(
    request: JobRequest, owner: str, job_id: str, settings: KubeJobSettings
) -> dict[str, Any] | None:
    """The ResourceClaimTemplate every pod of a job claims its GPUs from, for a GPU type
    claimed through DRA; None otherwise. Created before the job and owned by it once it
    exists (the backend), so it goes when the job goes."""
    if not claims_gpus(request.resources):
        return None
    return claim_template(
        request.resources,
        template_name(job_id),
        settings.namespace,
        labels(owner, job_id, request.kind),
        {USERNAME_ANNOTATION: owner},
    )


# What every job container runs under (the restricted Pod Security Standard): not root, no
# privilege escalation, no capabilities, the runtime's default seccomp filter. An image whose
# user is root (or a name the kubelet cannot check) fails to start, and the job says why
# (:func:`gpuhub.jobs.k8s.status.pod_waiting`).
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def replica_network_policy(
    request: JobRequest, owner: str, job_id: str, settings: KubeJobSettings
) -> dict[str, Any] | None:
    """Let the replicas of one distributed job reach each other, and nothing else more.

    The chart's ``gpuhub-jobs`` NetworkPolicy fences every job pod (no ingress, egress to
    DNS and what the admin allows); policies add up, so this one opens exactly the traffic
    between pods of this job. None for single-pod jobs. Owned by the workload (set by the
    backend once it exists), so it goes when the job goes.
    """
    if not kind_for(request.kind).distributed or request.workers < 2:
        return None
    # The owner as well as the id: pods of another user's job never match it.
    same_job = {
        "podSelector": {
            "matchLabels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                USER_LABEL: user_label(owner),
                JOB_ID_LABEL: job_id,
            }
        }
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{job_id}-replicas",
            "namespace": settings.namespace,
            "labels": labels(owner, job_id, request.kind),
            "annotations": {USERNAME_ANNOTATION: owner},
        },
        "spec": {
            **copy.deepcopy(same_job),
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [copy.deepcopy(same_job)]}],
            "egress": [{"to": [copy.deepcopy(same_job)]}],
        },
    }


def record_annotation(request: JobRequest, created: str, shared: bool, job_id: str) -> str:
    """What the job's record keeps that the objects do not say plainly."""
    return json.dumps(
        {
            "name": request.name,
            "notebook": request.notebook.path,
            "created": created,
            "parameters": dict(request.parameters),
            "output": output_path(request.notebook.path, job_id) if shared else None,
            "profile": request.resources.profile,
            **({"runtime": request.runtime} if request.runtime else {}),
        },
        sort_keys=True,
    )


@dataclass(frozen=True)
class _Parts:
    """What every kind's object is made of (:class:`gpuhub.jobs.kinds.base.Parts`)."""

    request: JobRequest
    metadata: dict[str, Any]
    owner: str
    job_id: str
    settings: KubeJobSettings

    @property
    def service_account(self) -> str:
        return self.settings.job_service_account

    def pod_metadata(self) -> dict[str, Any]:
        return {
            "labels": labels(self.owner, self.job_id, self.request.kind),
            # The exact owner (the label is a slug): the hub's ledger reads it.
            "annotations": {USERNAME_ANNOTATION: self.owner},
        }

    def pod_spec(self, container: str, *, primary: bool) -> dict[str, Any]:
        return _pod_spec(
            self.request,
            self.owner,
            self.job_id,
            self.settings,
            container_name=container,
            primary=primary,
        )


def workload(
    request: JobRequest,
    owner: str,
    job_id: str,
    settings: KubeJobSettings,
    *,
    key: str,
    created: str,
    queue: str = "",
) -> dict[str, Any]:
    """The object of ``request``'s kind; created suspended when jobs wait in Kueue's queue
    (Kueue resumes it once admitted): ``queue``, the user's own LocalQueue in a fair queue,
    else ``settings.kueue_queue``."""
    kind = workload_kind(request.kind)
    # The queue label is the workload's only, as Kueue reads it; pods carry gpuhub's labels.
    queue = queue or settings.kueue_queue
    queued = {QUEUE_NAME_LABEL: queue} if queue else {}
    metadata = {
        "name": job_id,
        "namespace": settings.namespace,
        "labels": {**labels(owner, job_id, request.kind), **queued},
        "annotations": {
            USERNAME_ANNOTATION: owner,
            IDEMPOTENCY_KEY_ANNOTATION: key,
            RECORD_ANNOTATION: record_annotation(
                request, created, settings.home_volume.shared, job_id
            ),
        },
    }
    obj = kind.manifest(_Parts(request, metadata, owner, job_id, settings))
    if queued:
        kind.suspend(obj)
    return obj
