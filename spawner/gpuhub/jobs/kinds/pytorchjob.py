"""Kind ``pytorchjob``: a Kubeflow Training Operator PyTorchJob, a master and workers that
each run the notebook under torchrun."""

from __future__ import annotations

from typing import Any

from gpuhub.jobs.kinds.base import Parts
from gpuhub.jobs.kinds.training_operator import TrainingOperatorKind


class PyTorchJob(TrainingOperatorKind):
    api_kind = "PyTorchJob"
    specs_key = "pytorchReplicaSpecs"
    master = "Master"
    container = "pytorch"

    def spec(self, parts: Parts) -> dict[str, Any]:
        # torchrun's processes per node: one per GPU of each worker.
        return {"nprocPerNode": str(max(parts.request.resources.gpus, 1))}


PYTORCHJOB = PyTorchJob()
