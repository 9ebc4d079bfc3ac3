"""The capacity watch's DRA kinds (gpuhub.hub.ledger.dra_capacity.DeviceWatch): watch events
of slices, claims and classes, as kube-apiserver sends them (the recorded objects of
tests/k8s/data/dra/), move what each device has free and nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuhub.hub.ledger.dra_capacity import DeviceWatch
from tests.support.dra import A100, H100, everywhere

DATA = Path(__file__).parents[2] / "k8s" / "data" / "dra"


def items(kind: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"{kind}.json").read_text())["items"]


def test_events_move_the_devices_and_say_when_a_figure_may_move() -> None:
    changes: list[int] = []
    watch = DeviceWatch(None, lambda: changes.append(1))
    for kind in ("resourceslices", "deviceclasses", "resourceclaims"):
        for obj in items(kind):
            watch.apply(kind, {"type": "ADDED", "object": obj})
    state = watch.state
    assert [r.free for r in state.rooms(A100, everywhere, 0)] == [False, True, True, True]
    added = len(changes)
    # A claim's status written again unchanged (the driver's conditions, say): nothing moves.
    whole = next(o for o in items("resourceclaims") if o["metadata"]["name"].startswith("p-whole"))
    assert watch.apply("resourceclaims", {"type": "MODIFIED", "object": whole}) == "785"
    assert len(changes) == added
    # Its pod ended: the controller clears the allocation, then deletes the claim.
    cleared = {**whole, "status": {}}
    watch.apply("resourceclaims", {"type": "MODIFIED", "object": cleared})
    assert [r.free for r in state.rooms(A100, everywhere, 0)] == [True] * 4
    watch.apply("resourceclaims", {"type": "DELETED", "object": cleared})
    assert len(changes) == added + 2  # cleared, then gone (its pod no longer has it)
    assert not state.pod_claims.get(("h8rec", "p-whole"))
    # A bookmark only carries the version.
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert watch.apply("resourceclaims", bookmark) == "9"
    # The H100 node's slice goes: its devices with it.
    h100 = next(o for o in items("resourceslices") if o["spec"]["nodeName"] == "dra-h100-0")
    watch.apply("resourceslices", {"type": "DELETED", "object": h100})
    assert state.rooms(H100, everywhere, 0) == ()
