"""Kind ``tfjob``: a Kubeflow Training Operator TFJob, a chief and workers."""

from __future__ import annotations

from gpuhub.jobs.kinds.training_operator import TrainingOperatorKind


class TFJob(TrainingOperatorKind):
    api_kind = "TFJob"
    specs_key = "tfReplicaSpecs"
    master = "Chief"
    container = "tensorflow"


TFJOB = TFJob()
