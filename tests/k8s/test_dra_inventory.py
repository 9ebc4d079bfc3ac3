"""A pod whose GPUs are claimed through DRA, as the hub's ledger counts it
(gpuhub.k8s.inventory.pod_holding): from the environment gpuhub gave it, never from an
extended resource (it asks for none). The pod is one the local cluster's scheduler bound
after allocating its claim a 20Gi share of an H100 (tests/k8s/data/dra/)."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpuhub.k8s.inventory import pod_holding, pod_info
from gpuhub.k8s.labels import COMPONENT_LABEL, HUB_USERNAME_KEY, SERVER_COMPONENT

DATA = Path(__file__).parent / "data" / "dra"
GI = 2**30


def recorded(name: str) -> dict[str, Any]:
    pods = json.loads((DATA / "pods.json").read_text())["items"]
    return copy.deepcopy(next(p for p in pods if p["metadata"]["name"] == name))


def as_gpuhubs(pod: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    pod["metadata"].setdefault("labels", {})[COMPONENT_LABEL] = SERVER_COMPONENT
    pod["metadata"].setdefault("annotations", {})[HUB_USERNAME_KEY] = "ana"
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return pod


def test_a_dra_pod_counts_what_gpuhub_gave_it() -> None:
    share = as_gpuhubs(
        recorded("p-share20"),
        {
            "GPUHUB_GPUS": "1",
            "GPUHUB_GPU_TYPE": "h100-shared",
            "GPUHUB_GPU_SHARE": "1/4",
            "GPUHUB_GPU_MEMORY": str(20 * GI),
        },
    )
    holding = pod_holding(share)
    assert holding is not None
    assert (holding.user, holding.kind, holding.gpus, holding.gpu_type) == (
        "ana",
        "server",
        1,
        "h100-shared",
    )
    assert holding.amount == Fraction(1, 4) and holding.memory == 20 * GI and holding.held
    assert pod_info(share) is None  # no extended resource: the node's figures do not move
    whole = as_gpuhubs(recorded("p-whole"), {"GPUHUB_GPUS": "2", "GPUHUB_GPU_TYPE": "a100"})
    held = pod_holding(whole)
    assert held is not None and held.amount == 2
    whole["spec"].pop("nodeName")
    waiting = pod_holding(whole)
    assert waiting is not None and waiting.waiting == "node"


def test_a_pod_gpuhub_gave_no_gpus_holds_none() -> None:
    assert pod_holding(recorded("p-whole")) is None  # no gpuhub environment
    cpu_only = as_gpuhubs(recorded("p-whole"), {"GPUHUB_GPUS": "0", "GPUHUB_GPU_TYPE": ""})
    assert pod_holding(cpu_only) is None
