"""What every DRA device has free, from ResourceSlices, DeviceClasses and allocated claims
(gpuhub.hub.ledger.dra_capacity, decoded by gpuhub.k8s.dra_inventory).

The objects in tests/k8s/data/dra/ are the local cluster's, read back from its apiserver
after its real scheduler allocated a whole A100 (``p-whole``), a MIG 1g.10gb (``p-mig``) and
two memory shares of one H100, 20Gi and 30Gi (``p-share20``, ``p-share30``)."""

from __future__ import annotations

import json

import pytest

from gpuhub.k8s.dra_inventory import claim_info, slice_info
from tests.support.dra import A100, GI, H100, H100_MEMORY, MIG_1G, everywhere, items, state


def test_recorded_claims_decode_to_their_devices_and_pods() -> None:
    claims = {c.name.rsplit("-", 2)[0]: c for c in map(claim_info, items("resourceclaims"))}
    whole, share = claims["p-whole"], claims["p-share20"]
    assert [(d.pool, d.device, d.memory, d.share) for d in whole.devices] == [
        ("dra-a100-0", "gpu-0", None, False)
    ]
    assert [(d.pool, d.device, d.memory, d.share) for d in share.devices] == [
        ("dra-h100-0", "gpu-0", 20 * GI, True)
    ]
    assert share.pods == ("p-share20",) and share.namespace == "h8rec"
    slices = {s.node: s for s in map(slice_info, items("resourceslices"))}
    mig = slices["dra-mig-0"]
    assert [d.name for d in mig.devices][:2] == ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"]
    assert slices["dra-h100-0"].devices[0].allow_multiple


def test_each_device_says_what_it_has_free() -> None:
    devices = state()
    a100 = devices.rooms(A100, everywhere, 0)
    # The four A100s of dra-a100-0; the MIG node's parents publish MIG devices only, the
    # H100s and the process node's simulated GPUs are another product.
    assert [(r.device.node, r.device.name, r.free) for r in a100] == [
        ("dra-a100-0", "gpu-0", False),
        ("dra-a100-0", "gpu-1", True),
        ("dra-a100-0", "gpu-2", True),
        ("dra-a100-0", "gpu-3", True),
    ]
    assert a100[0].memory_free == 0 and a100[1].memory_free == a100[1].memory_total == 80 * GI
    h100 = devices.rooms(H100, everywhere, 0)
    assert [(r.device.name, r.free, r.memory_free) for r in h100] == [
        ("gpu-0", False, H100_MEMORY - 50 * GI),  # two shares: 20Gi and 30Gi
        ("gpu-1", True, H100_MEMORY),
    ]
    assert len(h100[0].claims) == 2
    mig = devices.rooms(MIG_1G, everywhere, 0)
    assert len(mig) == 7 and sum(r.free for r in mig) == 6
    assert not mig[0].free and mig[0].device.words == "MIG 1g.10gb #0 of GPU 0 (A100-SXM4-80GB)"


def test_claims_coming_and_going_move_the_figures() -> None:
    devices = state()
    claims = {c.name.rsplit("-", 2)[0]: c for c in map(claim_info, items("resourceclaims"))}
    share = claims["p-share30"]
    assert devices.set_claim(share.key, None)
    assert devices.rooms(H100, everywhere, 0)[0].memory_free == H100_MEMORY - 20 * GI
    assert not devices.set_claim(share.key, None)  # nothing left to move
    devices.set_claim(claims["p-share20"].key, None)
    first = devices.rooms(H100, everywhere, 0)[0]
    assert first.free and first.memory_free == H100_MEMORY
    assert first.device.key not in devices.use
    # A claim that waits (no allocation yet, no pods) holds nothing and is not kept.
    raw = next(o for o in items("resourceclaims") if o["metadata"]["name"].startswith("p-whole"))
    waiting = claim_info({"metadata": raw["metadata"], "status": {}})
    devices.set_claim(waiting.key, waiting)
    assert devices.rooms(A100, everywhere, 0)[0].free
    assert devices.devices_of([claims["p-mig"].key])[0][0] is not None


def test_a_newer_pool_generation_replaces_the_devices_and_nodes_filter_them() -> None:
    devices = state()
    raw = next(o for o in items("resourceslices") if o["spec"]["nodeName"] == "dra-a100-0")
    newer = json.loads(json.dumps(raw))
    newer["metadata"]["name"] = "dra-a100-0-gpu.nvidia.com-2"
    newer["spec"]["pool"]["generation"] += 1
    newer["spec"]["devices"] = newer["spec"]["devices"][:2]
    devices.set_slice("dra-a100-0-gpu.nvidia.com-2", slice_info(newer))
    assert [r.device.name for r in devices.rooms(A100, everywhere, 0)] == ["gpu-0", "gpu-1"]
    devices.set_slice(raw["metadata"]["name"], None)
    assert len(devices.rooms(A100, everywhere, 0)) == 2
    assert devices.rooms(A100, lambda node: node != "dra-a100-0", 1) == ()


@pytest.mark.parametrize("missing", ["deviceclasses", "resourceslices"])
def test_without_its_class_or_slices_a_type_has_no_device(missing: str) -> None:
    devices = state()
    devices.relisted(missing, [])
    assert devices.rooms(A100, everywhere, 0) == ()


def test_running_sums_moved_by_claims_equal_sums_made_anew() -> None:
    """Claims come and go in any order: each type's sums, kept by deltas, always equal what
    a fresh count of its devices says."""
    import random

    from gpuhub.core.sharing import Sharing
    from gpuhub.hub.ledger.dra_capacity import TypeDevices, figures
    from gpuhub.k8s.dra_inventory import Allocated, ClaimInfo

    shares = Sharing(memory=80 * GI, min=4 * GI, max=80 * GI, default=8 * GI)
    devices = state()
    pick = random.Random(29)
    h100s = [r.device.key for r in devices.rooms(H100, everywhere, 0)]
    a100s = [r.device.key for r in devices.rooms(A100, everywhere, 0)]
    live: list[ClaimInfo] = []
    for step in range(200):
        if live and pick.random() < 0.4:
            gone = live.pop(pick.randrange(len(live)))
            devices.set_claim(gone.key, None)
        else:
            share = pick.random() < 0.6
            key = pick.choice(h100s if share else a100s)
            memory = pick.choice([4, 8, 20]) * GI if share else None
            claim = ClaimInfo(
                "t", f"c{step}", (Allocated(*key, memory=memory, share=share),), (f"p{step}",)
            )
            devices.set_claim(claim.key, claim)
            live.append(claim)
        for dra, sharing in ((H100, shares), (A100, None)):
            kept = devices.devices_for(dra, everywhere, 0, sharing)
            fresh = TypeDevices(
                [devices.room(k) for k in kept.rooms], sharing.min if sharing else 0
            )
            assert figures(kept, sharing) == figures(fresh, sharing)
