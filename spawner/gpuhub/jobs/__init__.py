"""Jobs: run a notebook as a training job or pipeline step, and follow it.

:mod:`.model` (request, record, errors), :mod:`.backend` (the backend interface, the
router and the forwarding seam for Kubernetes mode), :mod:`.local` (papermill on this
machine), :mod:`.policy_env` (how a spawner hands the admin policy to the user's server).
Importing this package imports none of the backends' heavy dependencies.
"""

from gpuhub.jobs.backend import JobBackend, JobRouter, RemoteBackend
from gpuhub.jobs.model import (
    KINDS,
    STATUSES,
    FailedCell,
    JobError,
    JobNotFound,
    JobRecord,
    JobRequest,
)

__all__ = [
    "KINDS",
    "STATUSES",
    "FailedCell",
    "JobBackend",
    "JobError",
    "JobNotFound",
    "JobRecord",
    "JobRequest",
    "JobRouter",
    "RemoteBackend",
]
