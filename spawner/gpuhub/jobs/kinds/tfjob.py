"""Kind ``tfjob``: a Kubeflow Training Operator TFJob, a chief and workers."""

from __future__ import annotations

from gpuhub.jobs.kinds.base import Resource
from gpuhub.jobs.kinds.training_operator import GROUP, VERSION, TrainingOperatorKind, rbac


class TFJob(TrainingOperatorKind):
    name = "tfjob"
    display_name = "TFJob"
    resource = Resource("TFJob", GROUP, VERSION, "tfjobs")
    rbac = rbac("tfjobs")
    specs_key = "tfReplicaSpecs"
    master = "Chief"
    container = "tensorflow"


TFJOB = TFJob()
