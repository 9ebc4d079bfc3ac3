"""gpuhub.k8s.objects: the typed decoding of real apiserver answers reads every field gpuhub
uses exactly as ``json.loads`` does.

The files in ``data/`` are kube-apiserver 1.36's own answers (localk8s), recorded as sent:
``pods.json`` a LIST of odd pods (a server with ``valueFrom`` and empty env values, a shared
GPU by memory and cores, a job with a sidecar, a MIG slice and two owners, GPUs in init
containers, Kueue's admission gate next to another gate, unbound, without resources or
labels, being deleted behind a finalizer, Succeeded, AMD and FPGA resources, a TrainJob's
node pod), ``kwok-pods.json`` Running pods with kwok's status and managed fields,
``nodes.json`` HAMi, cordoned (capacity without allocatable, quantities such as ``1k``) and
NotReady nodes with a kwok node, and ``pods-watch.jsonl`` a streaming list (sendInitialEvents)
of the odd pods up to its closing bookmark. ``dra/`` holds the ``resource.k8s.io/v1`` objects
of the simulated NVIDIA DRA driver (localk8s/dra.py): slices of whole GPUs, MIG devices and
GPUs shared by memory, the scheduler's claims (whole, MIG, memory shares) and two classes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from gpuhub.core.dra_devices import device_class_info
from gpuhub.hub.ledger.capacity import ClusterCapacity, node_part
from gpuhub.hub.ledger.cluster_watch import _Lists
from gpuhub.k8s import objects, protobuf
from gpuhub.k8s.dra_inventory import claim_info, slice_info
from gpuhub.k8s.inventory import (
    node_info,
    node_serves,
)
from gpuhub.k8s.listwatch import initial_events_end
from tests.support.k8s_facts import DATA, POLICY, node_facts, pod_facts


@pytest.mark.parametrize("name", ["pods.json", "kwok-pods.json"])
def test_pods_read_the_same_either_way(name):
    body = (DATA / name).read_bytes()
    whole = json.loads(body)
    page = objects.decode_list("pods", body)
    assert page.version == whole["metadata"]["resourceVersion"]
    assert page.token == (whole["metadata"].get("continue") or None)
    assert len(page.items) == len(whole["items"]) > 2
    for typed, full in zip(page.items, whole["items"], strict=True):
        assert pod_facts(typed) == pod_facts(full)
        assert len(json.dumps(typed)) < len(json.dumps(full)) / 3  # only what is read


def test_odd_pods_mean_what_they_should():
    """The oddities are in the recording, and the typed decoding keeps their meaning."""
    page = objects.decode_list("pods", (DATA / "pods.json").read_bytes())
    facts = {p["metadata"]["name"]: pod_facts(p) for p in page.items}
    assert facts["init-gpus"]["gpus"] == (("nvidia.com/gpu", 4),)  # the larger of init, sum
    assert facts["job-sidecar"]["gpus"] == (("nvidia.com/gpu", 1), ("nvidia.com/mig-1g.10gb", 1))
    assert facts["job-sidecar"]["workload"] is not None  # the Job that controls it
    assert facts["server-shared"]["extra"] == (
        ("nvidia.com/gpucores", 30),
        ("nvidia.com/gpumem", 8192),
    )
    assert str(facts["server-shared"]["holding"].share) == "1/2"
    assert facts["server-a100"]["env"] == {"GPUHUB_GPU_TYPE": "a100", "GPUHUB_GPUS": "2"}
    assert facts["server-a100"]["holding"].user == "ada.lovelace"
    assert facts["gated"]["gated"] and facts["gated"]["holding"].waiting == "queue"
    assert facts["pending-unbound"]["holding"].waiting == "node"
    assert facts["pending-unbound"]["info"] is None
    deleting = next(p for p in page.items if p["metadata"]["name"] == "deleting")
    assert "deletionTimestamp" not in deleting["metadata"]  # not read: it still holds
    assert facts["deleting"]["info"] is not None and facts["deleting"]["holding"] is not None
    assert facts["finished"]["info"] is None and facts["finished"]["holding"] is None
    assert facts["no-resources"]["gpus"] == () and facts["no-labels-gpu"]["holding"] is None
    assert facts["trainjob-node"]["between"] is not None
    assert facts["amd"]["gpus"] == (("amd.com/gpu", 1),)
    assert facts["amd"]["extra"] == (("example.com/fpga", 2),)


def test_nodes_read_the_same_either_way():
    body = (DATA / "nodes.json").read_bytes()
    whole = json.loads(body)
    page = objects.decode_list("nodes", body)
    assert len(page.items) == len(whole["items"]) == 4
    for typed, full in zip(page.items, whole["items"], strict=True):
        assert node_facts(typed) == node_facts(full)
    infos = {n.name: n for n in map(node_info, page.items)}
    assert not infos["odd-cordoned"].usable and not infos["odd-notready"].usable
    assert infos["odd-cordoned"].cpu == 1000.0  # "1k", from capacity: no allocatable
    assert infos["odd-hami"].extra["nvidia.com/gpumem"] == 30720
    # The apiserver taints a node it has not seen Ready yet; a type that tolerates it counts it.
    assert not node_serves(infos["odd-hami"], POLICY.gpu_types["t4"])
    assert node_part(infos["gpu-0001"], POLICY.gpu_types["a100"]) is not None


async def test_the_cache_builds_the_same_lists_either_way():
    """What a LIST leaves in the capacity cache: nodes, GPU pods and holdings."""
    built = []
    typed = lambda kind, body: objects.decode_list(kind, body).items  # noqa: E731
    for decode in (lambda kind, body: json.loads(body)["items"], typed):
        cache, lists = ClusterCapacity(None), _Lists()
        for name in ("pods.json", "kwok-pods.json"):
            for item in decode("pods", (DATA / name).read_bytes()):
                cache._take("pods", item, lists)
        for item in decode("nodes", (DATA / "nodes.json").read_bytes()):
            cache._take("nodes", item, lists)
        await cache.owners.stop()  # the TrainJob pod's JobSet: no API to ask here
        built.append(
            (lists.pods, lists.holders, {k: _node_facts_of(n) for k, n in lists.nodes.items()})
        )
    assert built[0] == built[1]
    assert sum(len(h) for h in built[0][1].values()) >= 8


def _node_facts_of(info: Any) -> tuple[Any, ...]:
    return (info.gpus, info.extra, info.cpu, info.memory, info.usable, dict(info.labels))


def test_streaming_list_events():
    lines = (DATA / "pods-watch.jsonl").read_bytes().splitlines()
    events = [objects.decode_event("pods", line) for line in lines]
    assert [e["type"] for e in events[:-1]] == ["ADDED"] * (len(lines) - 1)
    assert initial_events_end(events[-1]) and not initial_events_end(events[0])
    assert events[-1]["object"]["metadata"]["resourceVersion"].isdigit()
    for event, line in zip(events[:-1], lines, strict=False):
        assert pod_facts(event["object"]) == pod_facts(json.loads(line)["object"])


def test_odd_json_the_apiserver_does_not_send(caplog):
    """Nulls where the API omits, numbers for quantities, and a value of a type the schema
    does not allow (decoded whole, as ``json.loads`` would, with one warning)."""
    pod = {
        "metadata": {"name": "p", "namespace": "n", "labels": None, "annotations": None},
        "spec": {
            "nodeName": "gpu-1",
            "containers": [
                {"resources": None, "env": None},
                {"resources": {"limits": {"nvidia.com/gpu": 2}, "requests": None}},
                {"env": [{"name": "GPUHUB_GPU_TYPE"}]},
            ],
            "initContainers": None,
            "schedulingGates": None,
        },
        "status": {"phase": None},
    }
    body = json.dumps({"metadata": {}, "items": [pod]}).encode()
    assert pod_facts(objects.decode_list("pods", body).items[0]) == pod_facts(pod)
    odd = {**pod, "metadata": {"name": "p", "labels": {"component": 1}}}
    body = json.dumps({"metadata": {"resourceVersion": "7"}, "items": [odd]}).encode()
    with caplog.at_level(logging.WARNING, "gpuhub.k8s.objects"):
        objects._warned.discard("pods")
        page = objects.decode_list("pods", body)
    assert page.items == [odd] and page.version == "7"
    assert "decoded whole" in caplog.text and "$.items[0].metadata.labels" in caplog.text
    with pytest.raises(ValueError):
        objects.decode_list("pods", b'{"items": [')
    with pytest.raises(ValueError, match="not an event"):
        objects.decode_event("pods", b'{"object": {}}')


def test_error_events_keep_the_status():
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 7 (9)",
        "reason": "Expired",
        "code": 410,
    }
    for kind in objects.KINDS:
        line = json.dumps({"type": "ERROR", "object": status}).encode()
        assert objects.decode_event(kind, line) == {"type": "ERROR", "object": status}


DRA_READERS: dict[str, Any] = {
    "resourceslices": slice_info,
    "resourceclaims": claim_info,
    "deviceclasses": device_class_info,
}


@pytest.mark.parametrize("kind", DRA_READERS)
def test_dra_objects_read_the_same_either_way(kind):
    """Every recorded slice, claim and class reads the same from the typed decoding as from
    ``json.loads``, in a LIST and in watch events (JSON: no protobuf of these kinds)."""
    read = DRA_READERS[kind]
    body = (DATA / "dra" / f"{kind}.json").read_bytes()
    whole = json.loads(body)
    assert objects._decode(kind, "list", body)[1] is None  # each fits its shape
    page = objects.decode_list(kind, body)
    assert len(page.items) == len(whole["items"]) >= 2
    for typed, full in zip(page.items, whole["items"], strict=True):
        assert read(typed) == read(full)
        assert len(json.dumps(typed)) < len(json.dumps(full))  # only what is read
        line = json.dumps({"type": "MODIFIED", "object": full}).encode()
        assert read(objects.decode_event(kind, line)["object"]) == read(full)
    assert not protobuf.supports(kind)
    # The bookmark that ends a streaming list of the kind is seen as such.
    end = {"resourceVersion": "7", "annotations": {"k8s.io/initial-events-end": "true"}}
    bookmark = json.dumps({"type": "BOOKMARK", "object": {"metadata": end}}).encode()
    assert initial_events_end(objects.decode_event(kind, bookmark))


def test_recorded_dra_objects_mean_what_they_should():
    """The recording has what the figures read: devices with attributes and memory, shares
    allocated with their consumed memory, the claims' pods, and the classes' selectors."""

    def typed(kind: str) -> list[Any]:
        body = (DATA / "dra" / f"{kind}.json").read_bytes()
        return [DRA_READERS[kind](o) for o in objects.decode_list(kind, body).items]

    devices = [d for s in typed("resourceslices") for d in s.devices]
    assert all(d.memory and d.attribute("productName") for d in devices)
    assert {d.attribute("type") for d in devices} == {"gpu", "mig"}
    assert any(d.allow_multiple for d in devices) and not all(d.allow_multiple for d in devices)
    claims = typed("resourceclaims")
    assert all(c.pods and c.devices for c in claims)
    shares = [d for c in claims for d in c.devices if d.share]
    assert sorted(d.memory for d in shares) == [20 * 2**30, 30 * 2**30]
    assert all(c.selectors and not c.unsupported for c in typed("deviceclasses"))


def test_dra_values_of_every_type_read_the_same_either_way():
    """Attribute values of each type the API has (int, bool, version, a list, alpha, which is
    not read), a quantity as a number, and references that do not name a pod."""
    piece = json.loads((DATA / "dra" / "resourceslices.json").read_bytes())["items"][0]
    device = piece["spec"]["devices"][0]
    device["attributes"] |= {
        "cores": {"int": 108},
        "mig": {"bool": False},
        "example.com/fw": {"version": "1.2.3"},
        "badVersion": {"version": "1.2"},
        "links": {"strings": ["a", "b"]},
    }
    device["capacity"] = {"memory": {"value": 85899345920}, "cores": {"value": "108"}}
    device["allowMultipleAllocations"] = False
    claim = json.loads((DATA / "dra" / "resourceclaims.json").read_bytes())["items"][0]
    claim["status"]["reservedFor"].append({"apiGroup": "batch", "resource": "jobs", "name": "j"})
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": 2**30}
    claim["metadata"]["ownerReferences"].append({"kind": "Pod", "name": "other", "uid": "u"})
    read = {}
    for kind, obj in (("resourceslices", piece), ("resourceclaims", claim)):
        line = json.dumps({"type": "ADDED", "object": obj}).encode()
        assert objects._decode(kind, "event", line)[1] is None
        read[kind] = DRA_READERS[kind](objects.decode_event(kind, line)["object"])
        assert read[kind] == DRA_READERS[kind](obj)
    first = read["resourceslices"].devices[0]
    assert (first.attribute("cores"), first.attribute("mig")) == (108, False)
    fw = first.attributes["example.com/fw"]
    assert (fw.major, fw.minor, fw.patch) == (1, 2, 3)
    assert first.attribute("links") is None and first.attribute("badVersion") is None
    assert first.memory == 85899345920 and not first.allow_multiple
    assert read["resourceclaims"].pods == ("p-mig",)  # neither the job nor a non-controller
    assert read["resourceclaims"].devices[0].memory == 2**30
