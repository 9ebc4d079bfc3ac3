"""Kind ``pipeline``: the notebook as a one-step Kubeflow Pipelines run.

Its runs are KFP's, not objects of gpuhub's: :mod:`gpuhub.jobs.pipeline` compiles and submits
them and keeps each job's record as a ConfigMap. What is said here is what the rest of gpuhub
knows of the kind: its name, that the hub leaves its runs to KFP, and how its step's pod
names the run it belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuhub.core.holdings import Workload
from gpuhub.jobs.kinds.base import Access, JobKind, Rule
from gpuhub.k8s.labels import KFP_RUN_LABEL


class Pipeline(JobKind):
    name = "pipeline"
    display_name = "pipeline step"
    runs_in = "Kubeflow Pipelines"
    run_name = "pipeline run"
    no_claims = "Kubeflow Pipelines has no field for a step's DRA resource claims"
    description = (
        "The notebook as a one-step Kubeflow pipeline; its run page links from the Jobs panel."
    )
    run_page = "KFP run page"
    # Each job's record: created, read, listed, annotated when cancelled, deleted.
    rbac = Access(
        service=(Rule("", ("configmaps",), ("create", "get", "list", "patch", "delete")),)
    )

    def pod_workload(self, meta: Mapping[str, Any]) -> Workload | None:
        """The run its step belongs to (KFP's label on every pod of a run)."""
        run = (meta.get("labels") or {}).get(KFP_RUN_LABEL)
        return Workload(self.name, str(run)) if run else None


PIPELINE = Pipeline()
