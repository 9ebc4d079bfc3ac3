"""Garbage collection by owner UID, as https://kubernetes.io/docs/concepts/architecture/garbage-collection/
describes it: an ownerReference names an owner by UID, so a dependent whose owner (that UID) no
longer exists is deleted, even when an object of the same name exists; references to absent
owners beside a live one are removed.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client


def owned_config_map(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": list(owners)}, "data": {"a": "b"}}


def ref(obj: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": obj.metadata.name, "uid": obj.metadata.uid}


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


async def test_dependent_of_a_vanished_uid_is_deleted(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    owner = await v1.create_namespaced_pod("default", pod("owner"))
    stale = {**ref(owner), "uid": "00000000-0000-0000-0000-000000000000"}
    await v1.create_namespaced_config_map("default", owned_config_map("stale", stale))
    await v1.create_namespaced_config_map("default", owned_config_map("kept", ref(owner)))
    kubesim.wait_for(lambda: kubesim.get("ConfigMap", "stale") is None, timeout=5)
    assert kubesim.get("ConfigMap", "kept") is not None


async def test_dangling_reference_beside_a_live_owner_is_removed(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    owner = await v1.create_namespaced_pod("default", pod("owner"))
    gone = {**ref(owner), "name": "gone", "uid": "11111111-1111-1111-1111-111111111111"}
    await v1.create_namespaced_config_map("default", owned_config_map("both", ref(owner), gone))
    kubesim.wait_for(
        lambda: len(kubesim.get("ConfigMap", "both")["metadata"]["ownerReferences"]) == 1,
        timeout=5,
    )
    assert kubesim.get("ConfigMap", "both")["metadata"]["ownerReferences"][0]["name"] == "owner"


async def test_owner_of_an_unserved_kind_is_left_alone(kubesim, kube_api):
    """The collector cannot look up a kind the API does not serve, so it deletes nothing."""
    v1 = client.CoreV1Api(kube_api)
    unknown = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "2"}
    await v1.create_namespaced_config_map("default", owned_config_map("mine", unknown))
    await v1.create_namespaced_pod("default", pod("later"))  # let the collector run
    kubesim.wait_for(lambda: kubesim.get("Pod", "later")["status"].get("phase") == "Running")
    assert kubesim.get("ConfigMap", "mine") is not None
