"""The chart and a fair line: ``GPUSpawner.line_order: fair`` reaches the jobs service, and
the hub and the service may create LocalQueues (each user's own) only then. Rendered offline;
the apiserver's authorizer says the same on the cluster (tests/k8s/test_kueue_fair.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.helm import HELM, by_kind, make_chart, render, service_config

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")


def localqueue_verbs(role: dict[str, Any]) -> list[str]:
    (rule,) = [r for r in role["rules"] if "localqueues" in r["resources"]]
    return sorted(rule["verbs"])


def test_line_order_fair_reaches_the_service_and_lets_both_make_queues(tmp_path: Path) -> None:
    chart = make_chart(tmp_path)
    spawner: dict[str, Any] = {"kueue_queue_name": "gpus"}
    values = {
        "jupyterhub": {"hub": {"config": {"GPUSpawner": spawner}}},
        "jobs": {"kueue": {"queueName": "gpus"}},
    }
    fifo = render(chart, values=values)
    assert service_config(fifo)["kueue"] == {"queue_name": "gpus", "line_order": "fifo"}
    assert localqueue_verbs(by_kind(fifo, "Role", "jhub-gpuhub-gpuhub-hub-kueue")) == ["get"]
    assert localqueue_verbs(by_kind(fifo, "Role", "gpuhub-service")) == ["get"]
    spawner["line_order"] = "fair"
    fair = render(chart, values=values)
    assert service_config(fair)["kueue"] == {"queue_name": "gpus", "line_order": "fair"}
    assert localqueue_verbs(by_kind(fair, "Role", "jhub-gpuhub-gpuhub-hub-kueue")) == [
        "create",
        "get",
    ]
    assert localqueue_verbs(by_kind(fair, "Role", "gpuhub-service")) == ["create", "get"]
