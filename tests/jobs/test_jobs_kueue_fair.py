"""A fair queue for jobs, without a cluster: the service reads the hub's ``line_order``, a
job is labelled with the LocalQueue it waits in, and its message says the queue favours who
used least (on the cluster: tests/k8s/test_kueue_fair.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.status import queue_phase
from gpuhub.k8s.kueue import FAIR_QUEUE_WORDS
from gpuhub.k8s.labels import QUEUE_NAME_LABEL
from gpuhub.service.config import ServiceConfig, ServiceConfigError
from tests.support.jobs_service import NOTEBOOK_OK, cluster_request, write_notebook

BASE = {"job_image": "img:1"}


def test_the_service_reads_the_line_order() -> None:
    assert not ServiceConfig.from_dict(BASE).jobs.kueue_fair
    fair = ServiceConfig.from_dict({**BASE, "kueue": {"queue_name": "gpus", "line_order": "fair"}})
    assert fair.jobs.kueue_fair and fair.jobs.kueue_queue == "gpus"
    fifo = ServiceConfig.from_dict({**BASE, "kueue": {"queue_name": "gpus", "line_order": "fifo"}})
    assert not fifo.jobs.kueue_fair
    with pytest.raises(ServiceConfigError) as bad:
        ServiceConfig.from_dict({**BASE, "kueue": {"line_order": "fastest"}})
    assert str(bad.value) == (
        'kueue.line_order must be "fifo" (first come, first served) or "fair" (who used least '
        "goes first), not 'fastest'"
    )


def test_a_job_waits_in_the_queue_it_is_given(tmp_path: Path) -> None:
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    request = cluster_request(root, gpus=1, gpu_type="a100")
    settings = m.KubeJobSettings(kueue_queue="gpus", kueue_fair=True)
    own = m.workload(
        request, "ann", "train-abc123", settings, key="k", created="now", queue="gpus-ann"
    )
    assert own["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpus-ann" and own["spec"]["suspend"]
    shared = m.workload(request, "ann", "train-abc123", settings, key="k", created="now")
    assert shared["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpus"


def test_a_queued_jobs_message_says_the_queue_favours_who_used_least() -> None:
    phase = queue_phase("gpus", None, gpus=1, gpu_name="A100", place=2, fair=True)
    assert phase.status == "queued"
    assert phase.message == f'Waiting in queue "gpus" for 1 A100 GPU: {FAIR_QUEUE_WORDS}.'
    plain = queue_phase("gpus", None, gpus=1, gpu_name="A100", place=2)
    assert FAIR_QUEUE_WORDS not in plain.message
