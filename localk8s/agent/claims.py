"""A pod's ResourceClaims, read as a kubelet reads them before it starts the pod.

The scheduler allocates a pod's claims and reserves them for it before it binds the pod
here; the kubelet then refuses to start the pod until every claim it needs is reserved for
it (``status.reservedFor`` holds the pod's uid), and hands each container the devices of
the claims it names in ``resources.claims``. No NVIDIA kubelet plugin runs here, so the
agent does what its NodePrepareResources would: the simulated driver's devices of this node
(``gpu-<index>``, :mod:`localk8s.dra`) become the container's visible GPU indices, and a
share of one device's memory (consumable capacity) is told to the container in gpuhub's
share variables (:mod:`gpuhub.core.holder_env`).

Mirrors k8s.io/dynamic-resource-allocation's ``resourceclaim`` helpers (``Name``,
``IsReservedForPod``, ``BaseRequestRef``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuhub.core.quantity import QuantityError, parse_memory

from ..dra import DRIVER

_DEVICE = re.compile(r"gpu-([0-9]+)")


class ClaimsNotReady(Exception):
    """The pod cannot start yet: the message says which claim it waits for."""


@dataclass
class Grant:
    """What one container is given: simulated GPU indices, and the memory of a share of one
    device (None for whole devices)."""

    devices: list[int] = field(default_factory=list)
    share_memory: int | None = None
    share: Fraction | None = None


def claim_names(pod: dict[str, Any]) -> dict[str, str | None]:
    """Each of the pod's claims (``spec.resourceClaims[].name``) and the ResourceClaim it
    stands for; None where the claim is not needed. Raises :class:`ClaimsNotReady` while
    the resourceclaim controller has not yet named a claim made from a template."""
    statuses = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: dict[str, str | None] = {}
    for entry in pod["spec"].get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            out[entry["name"]] = entry["resourceClaimName"]
        elif entry["name"] in statuses:
            out[entry["name"]] = statuses[entry["name"]]
        else:
            raise ClaimsNotReady(f"the claim {entry['name']!r} made from its template")
    return out


def reserved_for(claim: dict[str, Any], pod_uid: str) -> bool:
    status = claim.get("status") or {}
    return bool(status.get("allocation")) and any(
        r.get("resource") == "pods" and r.get("uid") == pod_uid
        for r in status.get("reservedFor") or []
    )


def grants(
    pod: dict[str, Any],
    claims: dict[str, dict[str, Any]],
    node: str,
    device_memory: dict[int, int],
) -> dict[str, Grant]:
    """Each container's devices (init containers included) from its pod's allocated claims
    (``claims``: by pod claim name). ``device_memory``: this node's DRA devices' memory in
    bytes, by index, to tell a share from a whole device."""
    out: dict[str, Grant] = {}
    for container in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]:
        grant = Grant()
        for ref in (container.get("resources") or {}).get("claims") or []:
            claim = claims.get(ref["name"])
            if claim is None:
                continue
            allocation = claim["status"]["allocation"]
            for result in allocation.get("devices", {}).get("results") or []:
                if ref.get("request") and result["request"].split("/")[0] != ref["request"]:
                    continue
                match = _DEVICE.fullmatch(result["device"])
                if result["driver"] != DRIVER or result["pool"] != node or match is None:
                    continue
                index = int(match.group(1))
                if index not in grant.devices:
                    grant.devices.append(index)
                memory = (result.get("consumedCapacity") or {}).get("memory")
                if result.get("shareID") and memory is not None:
                    try:
                        used = parse_memory(memory)
                    except QuantityError:
                        continue
                    total = device_memory.get(index)
                    if total and used < total:
                        grant.share_memory = used
                        grant.share = Fraction(used, total)
        out[container["name"]] = grant
    return out
