"""gpuhub.k8s.protobuf on a real kube-apiserver: the odd pods and nodes of ``data/`` (those
``test_objects.py`` reads from recordings) are made anew in the test's namespace, then read
back in protobuf and in JSON, by a LIST at one resource version and by a streaming list;
both decodings must give the same dicts, and gpuhub the same facts from them.

The recorded objects go back as they were sent, less what the apiserver sets itself, with
these changes so that the cluster's controllers leave them as made while they are read:

* pods bound to a node are bound to the test's HAMi node (the pod garbage collector deletes
  pods bound to a node that does not exist, and kwok does not run this node: nothing starts
  them or rewrites their status, which the test sets through the status subresource);
* the unbound pods name a scheduler that does not run (the real one would place them), and
  the gated one has no Kueue queue label (Kueue would take it over: its labels, finalizer,
  Workload); its two scheduling gates stay;
* the garbage collector runs, so the owners are ConfigMaps of the test (a controller, one
  marked not a controller, one unmarked), not the recorded Job, whose controller would
  release or delete a pod it does not own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

from gpuhub.k8s import objects, protobuf
from gpuhub.k8s.listwatch import Source, _get, initial_events_end, watch
from harness.cluster import Kube
from localk8s.kubeapi import KubeError
from tests.support.k8s_facts import DATA, node_facts, pod_facts

pytestmark = pytest.mark.e2e  # a real kube-apiserver, its controllers and scheduler

# Metadata the apiserver sets: a recorded object sent back with it would be refused.
SERVER_SET = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
# Taints the node controllers manage themselves (not-ready, unschedulable).
SYSTEM_TAINT = "node.kubernetes.io/"
NO_SCHEDULER = "gpuhub-test-no-scheduler"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _recorded(name: str) -> list[dict[str, Any]]:
    return list(json.loads((DATA / name).read_bytes())["items"])


def _make_nodes(kube: Kube) -> dict[str, str]:
    """The recorded odd nodes (not kwok's: the cluster has its own), named for this test;
    their recorded names -> their names here."""
    names = {}
    for node in _recorded("nodes.json"):
        meta = node["metadata"]
        if "kwok.x-k8s.io/node" in (meta.get("annotations") or {}):
            continue
        name = names[meta["name"]] = f"{kube.namespace}-{meta['name']}"
        spec = dict(node.get("spec") or {})
        spec["taints"] = [t for t in spec.get("taints") or [] if SYSTEM_TAINT not in t["key"]]
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": meta.get("labels") or {}},
                "spec": spec,
            }
        )
        status = dict(node["status"])
        if spec.get("unschedulable"):
            status.pop("allocatable")  # capacity alone, as a node may report it
        kube.patch("Node", name, {"status": status}, subresource="status")
    return names


def _make_pods(kube: Kube, node: str) -> list[str]:
    """The recorded odd pods in the test's namespace (the module's docstring says how they
    differ from the recording), their status set, one deleted behind its finalizer."""
    owners = {
        name: kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
        for name in ("train-7", "other", "data")
    }

    def owner(name: str, **flags: bool) -> dict[str, Any]:
        uid = owners[name]["metadata"]["uid"]
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, **flags}

    names = []
    for pod in _recorded("pods.json"):
        meta = {k: v for k, v in pod["metadata"].items() if k not in SERVER_SET}
        meta["namespace"] = kube.namespace
        spec = dict(pod["spec"])
        if meta.get("ownerReferences"):
            meta["ownerReferences"] = [
                owner("train-7", controller=True, blockOwnerDeletion=True),
                owner("other", controller=False),
                owner("data"),
            ]
        if (meta.get("labels") or {}).pop(QUEUE_LABEL, None) is not None:
            assert spec["schedulingGates"]  # Kueue's gate, which stays
        if spec.get("nodeName"):
            spec["nodeName"] = node
        else:
            spec["schedulerName"] = NO_SCHEDULER
        kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        names.append(meta["name"])
        status = {k: v for k, v in pod["status"].items() if k not in ("qosClass", "conditions")}
        if status.get("phase") != "Pending":
            kube.patch("Pod", meta["name"], {"status": status}, subresource="status")
        if "deletionTimestamp" in pod["metadata"]:
            kube.delete("Pod", meta["name"])  # its finalizer holds it
            assert (kube.get("Pod", meta["name"]) or {})["metadata"]["deletionTimestamp"]
    return names


def _end_pods(kube: Kube) -> None:
    """The test's pods go now: no kubelet runs their node to end them gracefully."""
    for pod in kube.list("Pod"):
        name = pod["metadata"]["name"]
        if pod["metadata"].get("finalizers"):
            with contextlib.suppress(KubeError):
                kube.patch("Pod", name, {"metadata": {"finalizers": None}})
        kube.delete("Pod", name, gracePeriodSeconds=0)


async def _list(api: Any, source: Source, query: dict[str, str]) -> tuple[str, bytes]:
    """A LIST of ``source`` as sent: its content type and body."""
    response = await _get(api, source, query, 30, stream=False)
    try:
        assert response.status == 200, await response.text()
        return str(response.headers["Content-Type"]), await response.read()
    finally:
        response.release()


async def _listed_both_ways(api: Any, kind: str, path: str) -> dict[str, dict[str, Any]]:
    """A LIST of ``path`` in JSON, then one in protobuf at exactly its resource version: the
    same dicts, and the same facts as ``json.loads`` gives; its objects by name."""
    content_type, body = await _list(api, Source(kind, path, {}, "json"), {})
    typed = objects.decode_list(kind, body)
    exact = {"resourceVersion": typed.version, "resourceVersionMatch": "Exact"}
    content_type, pb_body = await _list(api, Source(kind, path), exact)
    assert content_type == protobuf.CONTENT_TYPE
    pb = protobuf.decode_list(kind, pb_body)
    assert pb.version == typed.version
    assert pb.items == typed.items
    facts = pod_facts if kind == "pods" else node_facts
    whole = json.loads(body)["items"]
    assert [facts(item) for item in pb.items] == [facts(item) for item in whole]
    return {item["metadata"]["name"]: item for item in pb.items}


async def _streamed(api: Any, source: Source) -> list[objects.Event]:
    """A streaming list of ``source``, up to the bookmark that ends its initial events."""
    events: list[objects.Event] = []
    stream = watch(api, source, initial=True, timeout_seconds=30)
    try:
        async for event in stream:
            events.append(event)
            if initial_events_end(event):
                break
    finally:
        await stream.aclose()
    return events


def _versions(events: list[objects.Event]) -> list[str]:
    return [e["object"]["metadata"]["resourceVersion"] for e in events[:-1]]


def _unversioned(event: objects.Event) -> dict[str, Any]:
    """A bookmark without its resource version (each stream's own moment)."""
    meta = {k: v for k, v in event["object"]["metadata"].items() if k != "resourceVersion"}
    return {**event, "object": {**event["object"], "metadata": meta}}


async def test_odd_pods_and_nodes_read_the_same_in_protobuf_and_json(
    kube: Kube, kube_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = kube.namespace
    nodes = await asyncio.to_thread(_make_nodes, kube)
    try:
        pods = await asyncio.to_thread(_make_pods, kube, nodes["odd-hami"])

        # (a) A LIST in each encoding at one resource version: the namespace's pods, and
        # all the cluster's nodes (kwok's and the process node's too).
        pod_list = await _listed_both_ways(kube_api, "pods", f"/api/v1/namespaces/{ns}/pods")
        node_list = await _listed_both_ways(kube_api, "nodes", "/api/v1/nodes")

        # The oddities are there, as the apiserver keeps them.
        assert sorted(pod_list) == sorted(pods)
        refs = pod_list["job-sidecar"]["metadata"]["ownerReferences"]
        assert [r.get("controller") for r in refs] == [True, False, None]
        assert "controller" not in refs[2]
        env = pod_list["server-a100"]["spec"]["containers"][0]["env"]
        assert {"name": "GPUHUB_GPU_EMPTY"} in env and {"name": "POD_IP"} in env
        assert [g["name"] for g in pod_list["gated"]["spec"]["schedulingGates"]] == [
            "kueue.x-k8s.io/admission",
            "example.com/other",
        ]
        phases = {name: pod["status"].get("phase") for name, pod in pod_list.items()}
        assert phases["finished"] == "Succeeded" and phases["server-a100"] == "Running"
        assert pod_facts(pod_list["deleting"])["holding"] is not None
        assert len(pod_list["init-gpus"]["spec"]["initContainers"]) == 2
        assert "containers" in pod_list["no-resources"]["spec"]
        cordoned = node_list[nodes["odd-cordoned"]]
        assert cordoned["spec"]["unschedulable"] is True
        assert {"key": "dedicated", "value": "ml", "effect": "NoExecute"} in (
            cordoned["spec"]["taints"]
        )
        assert node_list[nodes["odd-hami"]]["status"]["allocatable"]["nvidia.com/gpumem"] == "30720"
        ready = node_list[nodes["odd-notready"]]["status"]["conditions"]
        assert {"type": "Ready", "status": "False"} in ready

        # (b) A streaming list of the namespace's pods in each encoding; the pods may change
        # between the two (a controller's write), then both are read again.
        decoded = 0
        decode_event = protobuf.decode_event

        def counted(kind: str, frame: Any) -> objects.Event:
            nonlocal decoded
            decoded += 1
            return decode_event(kind, frame)

        monkeypatch.setattr(protobuf, "decode_event", counted)
        query = {"fieldSelector": f"metadata.namespace={ns}"}
        for _ in range(5):
            pb_events = await _streamed(kube_api, Source("pods", "/api/v1/pods", query))
            json_events = await _streamed(kube_api, Source("pods", "/api/v1/pods", query, "json"))
            if _versions(pb_events) == _versions(json_events):
                break
        assert decoded == len(pb_events)  # every event came in protobuf
        assert [e["type"] for e in pb_events] == ["ADDED"] * len(pods) + ["BOOKMARK"]
        assert pb_events[:-1] == json_events[:-1]
        assert _unversioned(pb_events[-1]) == _unversioned(json_events[-1])
        assert initial_events_end(pb_events[-1]) and initial_events_end(json_events[-1])
        assert [pod_facts(e["object"]) for e in pb_events[:-1]] == [
            pod_facts(e["object"]) for e in json_events[:-1]
        ]
    finally:
        await asyncio.to_thread(_end_pods, kube)
