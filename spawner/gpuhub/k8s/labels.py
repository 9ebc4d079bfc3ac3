"""Every label and annotation key gpuhub writes or reads on Kubernetes objects, in one place.

Users hold no cluster credentials and create no pods, so what these say on a pod can be
trusted: the hub's ledger (:mod:`gpuhub.k8s.inventory`) tells servers from jobs and their users
by them. Each name says whose key it is and who writes it.
"""

from __future__ import annotations

# -- gpuhub's own, on every job object and its pods (written by the jobs service's manifests) --
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"  # Kubernetes' recommended label ...
MANAGED_BY = "gpuhub"  # ... and its value on everything gpuhub creates
USER_LABEL = "gpuhub.io/user"  # the user's name as a label value (a slug of it)
USERNAME_ANNOTATION = "gpuhub.io/username"  # the exact name; the label is a slug of it
JOB_ID_LABEL = "gpuhub.io/job-id"  # the job's id, as the user's jobs list shows it
KIND_LABEL = "gpuhub.io/kind"  # gpuhub's name of the job kind: job, pytorchjob, pipeline, ...
RECORD_ANNOTATION = "gpuhub.io/record"  # the job's record (request, notebook path) as JSON
IDEMPOTENCY_KEY_ANNOTATION = "gpuhub.io/idempotency-key"  # a submit's key: one job per key
RUN_ID_ANNOTATION = "gpuhub.io/run-id"  # a pipeline job's KFP run id
CANCELLED_ANNOTATION = "gpuhub.io/cancelled"  # when a pipeline job was cancelled
CANCELLED_BY_ANNOTATION = "gpuhub.io/cancelled-by"  # the admin who cancelled it (fleet page)
CANCEL_REASON_ANNOTATION = "gpuhub.io/cancel-reason"  # and why

# -- KubeSpawner's (Zero to JupyterHub), on single-user server pods; gpuhub reads them ---------
COMPONENT_LABEL = "component"
SERVER_COMPONENT = "singleuser-server"  # COMPONENT_LABEL's value on a server's pod
# The annotation holds the user's exact name, the label an escaped form of it.
HUB_USERNAME_KEY = "hub.jupyter.org/username"
HUB_SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"  # "" for the default server

# -- Kueue's (https://kueue.sigs.k8s.io/docs/concepts/): gpuhub.k8s.kueue ----------------------
# On a job or a GPU server's pod (written by gpuhub): the LocalQueue it waits in.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# On a Workload (written by Kueue): the uid of its job.
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

# -- Kubeflow's, on the pods their controllers make; gpuhub reads them -------------------------
KFP_RUN_LABEL = "pipeline/runid"  # Kubeflow Pipelines: every pod of a run, with the run's id
# JobSet (a TrainJob's pods): their JobSet's uid and name, and their replicated job's name.
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"

# -- NVIDIA GPU feature discovery's, on nodes; the hub's capacity reads them -------------------
GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # how many GPUs the node has
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # units each is advertised as when shared


def user_label(user: str) -> str:
    """The :data:`USER_LABEL` value of ``user``: KubeSpawner's slug of the name (label-safe;
    a name that is no label, or too long, is a slug with a hash)."""
    from kubespawner.slugs import is_valid_label, safe_slug

    return str(safe_slug(user, is_valid=is_valid_label))
