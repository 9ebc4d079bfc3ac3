"""The simulated DRA driver's input and the process node's reading of claims, without a
cluster: a nodes file's mistakes are one sentence each, MIG devices are placed as NVML places
them, and each container is given only the devices its own claims were allocated."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from localk8s import dra
from localk8s.agent.claims import ClaimsNotReady, claim_names, grants, reserved_for
from localk8s.nodes import node_object

A100 = "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"product": "NVIDIA T4", "gpus": 1}, "product must be one of"),
        ({"product": A100, "gpus": -1}, "gpus must be a whole number of 0 or more; got -1"),
        ({"product": A100, "gpus": 1, "shares": "time"}, "shares must be 'memory' or absent"),
        ({"product": A100, "mig": [{"1g.5gb": 1}]}, "has the MIG profiles"),
        ({"product": A100, "mig": [{"3g.40gb": 2, "2g.20gb": 1}]}, "do not fit one GPU's 8"),
        ({"product": A100, "mig": [{"1g.10gb": 8}]}, "do not fit"),
        ({"product": A100}, "names no GPUs"),
        ({"product": A100, "gpus": 1, "count": 2}, "takes product, gpus, mig and shares"),
    ],
)
def test_a_nodes_files_dra_mistakes_are_named(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(dra.DRASpecError, match="node n1's dra entry") as error:
        dra.check_spec("n1", spec)
    assert message in str(error.value)


def test_a_node_offers_its_gpus_one_way() -> None:
    with pytest.raises(ValueError, match=r"advertises nvidia.com/gpu; a node offers its GPUs"):
        node_object(
            {
                "name": "n1",
                "allocatable": {"cpu": "8", "nvidia.com/gpu": 2},
                "dra": {"product": A100, "gpus": 2},
            }
        )


def test_mig_devices_are_placed_largest_first_on_their_memory_slices() -> None:
    spec = dra.check_spec("n1", {"product": A100, "gpus": 1, "mig": [{"2g.20gb": 2, "3g.40gb": 1}]})
    devices = {d["name"]: d for d in dra.devices("n1", spec)}
    assert list(devices) == [
        "gpu-0",
        "gpu-1-mig-3g40gb-9-0",
        "gpu-1-mig-2g20gb-14-4",
        "gpu-1-mig-2g20gb-14-6",
    ]
    slices = [k for k in devices["gpu-1-mig-2g20gb-14-6"]["capacity"] if k.startswith("memory")]
    assert slices == ["memory", "memorySlice6", "memorySlice7"]
    parent = devices["gpu-1-mig-3g40gb-9-0"]["attributes"]["parentUUID"]["string"]
    assert parent.startswith("GPU-") and parent != devices["gpu-0"]["attributes"]["uuid"]["string"]


def test_a_pool_changes_generation_only_when_its_devices_do() -> None:
    devices = dra.devices("n1", {"product": A100, "gpus": 1})
    published = dra.resource_slice("n1", "uid-1", devices, generation=3)
    assert dra.next_generation(None, published) == 1
    assert dra.next_generation(published, dra.resource_slice("n1", "uid-1", devices)) == 3
    more = dra.devices("n1", {"product": A100, "gpus": 2})
    assert dra.next_generation(published, dra.resource_slice("n1", "uid-1", more)) == 4


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u1"},
        "spec": {
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "t"},
                {"name": "extra", "resourceClaimName": "shared"},
            ],
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "main", "resources": {"claims": [{"name": "gpus", "request": "a"}]}},
                {"name": "side", "resources": {"claims": [{"name": "extra"}]}},
            ],
        },
        "status": status,
    }


def _claim(*results: dict[str, Any], reserved: str = "u1") -> dict[str, Any]:
    return {
        "status": {
            "allocation": {"devices": {"results": list(results)}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": reserved}],
        }
    }


def _result(request: str, device: str, pool: str = "local-0", **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": dra.DRIVER, "pool": pool, "device": device, **extra}


def test_containers_get_the_devices_of_their_own_claims_and_requests() -> None:
    with pytest.raises(ClaimsNotReady, match="'gpus' made from its template"):
        claim_names(_pod())
    pod = _pod(resourceClaimStatuses=[{"name": "gpus", "resourceClaimName": "p-gpus-x1"}])
    assert claim_names(pod) == {"gpus": "p-gpus-x1", "extra": "shared"}
    gpus = _claim(
        _result("a/first", "gpu-4"),
        _result("b", "gpu-5"),
        _result("a", "gpu-0", pool="other-node"),
    )
    extra = _claim(
        _result("s", "gpu-5", shareID="x", consumedCapacity={"memory": "4Gi"}),
        reserved="someone-else",
    )
    assert reserved_for(gpus, "u1") and not reserved_for(extra, "u1")
    given = grants(pod, {"gpus": gpus, "extra": extra}, "local-0", {4: 16 * 2**30, 5: 16 * 2**30})
    assert given["main"].devices == [4] and given["main"].share is None
    assert given["side"].devices == [5]
    assert (given["side"].share, given["side"].share_memory) == (Fraction(1, 4), 4 * 2**30)
    assert given["init"].devices == []
    whole = _claim(_result("s", "gpu-4", shareID="y", consumedCapacity={"memory": "16Gi"}))
    assert grants(pod, {"extra": whole}, "local-0", {4: 16 * 2**30})["side"].share is None
