"""The capacity watch's DRA kinds (gpuhub.hub.ledger.dra_capacity.DeviceWatch): watch events
of slices, claims and classes, as kube-apiserver sends them (the recorded objects of
tests/k8s/data/dra/), move what each device has free and nothing else; on the local
cluster, an apiserver that does not stream lists is read in pages, and one that does not
serve resource.k8s.io/v1 has no devices, said once; a 403 names the missing right once and a
fixed Role is picked up."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gpuhub.hub.ledger import dra_capacity
from gpuhub.hub.ledger.dra_capacity import DRA_KINDS, DeviceWatch
from gpuhub.k8s import dra
from tests.support.dra import A100, H100, everywhere
from tests.support.wait import eventually

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


@pytest.mark.e2e  # a real kube-apiserver behind the fault proxy
async def test_pages_where_lists_do_not_stream_and_none_where_dra_is_not_served(
    kube, kube_api, kube_faults, caplog
):
    """Through the fault proxy: refused streaming lists (422) leave the watch reading pages,
    and it then holds what a streaming watch holds; 404s for resource.k8s.io/v1 mean no DRA
    devices, ready at once, logged once for the three kinds."""
    from kubernetes_asyncio import config

    kube.require_local("the simulated NVIDIA DRA driver")
    if not kube.list("ResourceSlice", api_version="resource.k8s.io/v1", all_namespaces=True):
        pytest.skip("the cluster publishes no ResourceSlices (no DRA driver)")
    faulty = await config.new_client_from_config(config_file=str(kube_faults.kubeconfig))
    watches = []

    def started(api_client: Any) -> DeviceWatch:
        watch = DeviceWatch(api_client, lambda: None, watch_timeout=5)
        watches.append(watch)
        watch.start()
        return watch

    def held(watch: DeviceWatch) -> tuple[Any, ...]:
        state = watch.state
        return (state.devices, state.classes, state.claims, state.use)

    try:
        kube_faults.fail_requests(422, count=3, path="/apis/resource.k8s.io/v1/", watch=True)
        paged, streamed = started(faulty), started(kube_api)
        await eventually(lambda: paged.ready and streamed.ready)
        assert not paged.stream_lists and streamed.stream_lists and paged.served
        await eventually(lambda: held(paged) == held(streamed) and held(paged)[0])
        for watch in (paged, streamed):  # none of their watches meets the 404s
            await watch.stop()
        with caplog.at_level(logging.INFO, logger="gpuhub.hub.ledger.dra_capacity"):
            kube_faults.fail_requests(404, count=3, path="/apis/resource.k8s.io/v1/")
            unserved = started(faulty)
            await eventually(lambda: unserved.ready)
        assert unserved.served is False and unserved.error is None
        assert not unserved.state.devices and not unserved.state.claims
        said = [r for r in caplog.records if "serves no resource.k8s.io/v1" in r.getMessage()]
        assert len(said) == 1
    finally:
        for watch in watches:
            await watch.stop()
        await faulty.close()


def forbidden(kind: str) -> Exception:
    """kube-apiserver's 403 to a LIST of ``kind`` by a service account without the right."""
    from kubernetes_asyncio.client import ApiException

    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f'{kind}.resource.k8s.io is forbidden: User "system:serviceaccount:hub:'
            f'hub" cannot list resource "{kind}" in API group "resource.k8s.io" at the '
            "cluster scope",
            "reason": "Forbidden",
            "code": 403,
        }
    ).encode()
    return exc


async def test_a_403_names_the_missing_right_once_and_a_fixed_role_is_picked_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A service account that may list classes but not slices or claims: the watch says once
    per kind which right is missing and what to do, keeps that as its error (the form says
    it), asks again slowly, and counts devices once the Role is fixed."""
    monkeypatch.setattr(dra_capacity, "FORBIDDEN_RETRY", 0.01)
    allowed = {"deviceclasses"}
    asked: dict[str, int] = {}

    class Watch(DeviceWatch):  # the Reflector's requests, answered as the apiserver would
        async def _sync(self, kind: str) -> str:
            asked[kind] = asked.get(kind, 0) + 1
            if kind not in allowed:
                raise forbidden(kind)
            lists: dict[Any, Any] = {}
            for obj in items(kind):
                self._take(kind, obj, lists)
            return self._install(kind, lists, {"metadata": {"resourceVersion": "1"}})

        async def _watch(self, kind: str, version: str, initial: bool = False) -> str:
            await asyncio.Event().wait()  # a watch with nothing to say
            return version

    watch = Watch(None, lambda: None)
    try:
        with caplog.at_level(logging.INFO, logger="gpuhub.hub.ledger.dra_capacity"):
            watch.start()
            await eventually(
                lambda: min(asked.get(k, 0) for k in DRA_KINDS if k not in allowed) >= 3
            )
            assert not watch.ready and watch.synced["deviceclasses"]
            assert (
                watch.error
                == watch.forbidden
                == (
                    "the hub's service account may not list resourceslices and resourceclaims "
                    "(API group resource.k8s.io), so GPUs claimed through DRA cannot be counted; an "
                    "admin should install the chart's RBAC for DRA (rbac.create, "
                    "templates/rbac-dra.yaml) or grant list and watch on resourceslices, "
                    "resourceclaims and deviceclasses of resource.k8s.io to the hub"
                )
            )
            said = [r.getMessage() for r in caplog.records if "may not" in r.getMessage()]
            assert sorted(said) == [
                f"DRA devices unavailable: the hub's service account may not list {kind} (API "
                "group resource.k8s.io), so GPUs claimed through DRA cannot be counted; an admin "
                "should install the chart's RBAC for DRA (rbac.create, templates/rbac-dra.yaml) "
                "or grant list and watch on resourceslices, resourceclaims and deviceclasses of "
                "resource.k8s.io to the hub."
                for kind in ("resourceclaims", "resourceslices")
            ]
            assert "resourceslices" in dra.unreadable_words(["A100"], watch.forbidden)
            allowed.update(DRA_KINDS)  # the admin applied the chart's RBAC for DRA
            await eventually(lambda: watch.ready)
        assert watch.error is None and watch.forbidden == "" and watch.served
        assert [r.free for r in watch.state.rooms(A100, everywhere, 0)] == [False, True, True, True]
    finally:
        await watch.stop()
