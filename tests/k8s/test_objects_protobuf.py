"""gpuhub.k8s.protobuf: Kubernetes' protobuf, decoded into exactly the dicts the typed JSON
decoding makes of the same objects.

``data/protobuf/`` holds kube-apiserver 1.36's own answers for the same objects in both
encodings, asked for one right after the other on a quiet cluster (the resource versions
match): a LIST of kwok's Running pods (managed fields, kwok's status), a LIST of kwok nodes,
a streaming list (``sendInitialEvents``) of one node's pods up to its bookmark, and a watch
from a compacted version (its ``ERROR`` event, 410 Expired). The odd pods are read both ways
on a real cluster by ``test_kube_protobuf.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

from gpuhub.k8s import objects, protobuf
from gpuhub.k8s.listwatch import Source, _json_events, _pb_events, initial_events_end

DATA = Path(__file__).parent / "data" / "protobuf"


@pytest.mark.parametrize(("kind", "name"), [("pods", "kwok-pods"), ("nodes", "nodes")])
def test_lists_decode_to_the_json_decodings_dicts(kind, name):
    pb = protobuf.decode_list(kind, (DATA / f"{name}.pb").read_bytes())
    body = (DATA / f"{name}.json").read_bytes()
    typed = objects.decode_list(kind, body)
    assert len(pb.items) == len(json.loads(body)["items"]) >= 3
    assert pb.items == typed.items
    assert (pb.version, pb.token) == (typed.version, typed.token)
    assert pb.version.isdigit() and pb.token


def test_a_streaming_list_decodes_event_for_event():
    data = (DATA / "pods-watch.pb").read_bytes()
    frames, used = protobuf.split_frames(data)
    assert used == len(data)
    events = [protobuf.decode_event("pods", frame) for frame in frames]
    lines = (DATA / "pods-watch.jsonl").read_bytes().splitlines()
    assert events == [objects.decode_event("pods", line) for line in lines]
    assert [e["type"] for e in events[:-1]] == ["ADDED"] * (len(events) - 1)
    assert initial_events_end(events[-1]) and not initial_events_end(events[0])


def test_frames_split_across_reads_come_out_whole():
    """A read ends anywhere: inside a length prefix, inside a frame. What is left waits."""
    data = (DATA / "pods-watch.pb").read_bytes()
    whole = [e for e in _pb_events("pods", data)[0]]
    for step in (1, 3, 7, 1000, 4096):
        got, rest = [], b""
        for start in range(0, len(data), step):
            found, rest = _pb_events("pods", rest + data[start : start + step])
            got.extend(found)
        assert got == whole and rest == b""


def test_an_expired_watch_says_so_in_both_encodings():
    frames, _ = protobuf.split_frames((DATA / "expired.pb").read_bytes())
    event = protobuf.decode_event("pods", frames[0])
    typed = objects.decode_event("pods", (DATA / "expired.jsonl").read_bytes().strip())
    assert event["type"] == typed["type"] == "ERROR"
    assert event["object"]["code"] == typed["object"]["code"] == 410
    assert event["object"]["reason"] == typed["object"]["reason"] == "Expired"
    assert event["object"]["message"] == typed["object"]["message"]
    assert "too old resource version" in event["object"]["message"]


def test_json_lines_split_the_same_way():
    data = (DATA / "pods-watch.jsonl").read_bytes()
    cut = data[:-10]  # the bookmark's line, cut short
    found, rest = _json_events("pods", cut)
    assert len(list(found)) == len(data.splitlines()) - 1
    assert rest == cut.rsplit(b"\n", 1)[1] and rest.startswith(b'{"type":"BOOKMARK"')


def test_what_is_not_kubernetes_protobuf_is_refused_with_why():
    body = (DATA / "kwok-pods.pb").read_bytes()
    with pytest.raises(ValueError, match="not a Kubernetes protobuf object"):
        protobuf.decode_list("pods", b"{" + body[1:])
    with pytest.raises(ValueError, match="does not parse"):
        protobuf.decode_list("pods", body[: len(body) // 2])
    with pytest.raises(ValueError, match="does not parse"):
        protobuf.decode_event("pods", b"\x12\xff\xff")


def test_a_field_read_without_its_wire_number_is_an_error(monkeypatch):
    """A field added to a shape of gpuhub.k8s.objects without its number in WIRE fails the
    first decoding, naming it: never a field silently missing from protobuf."""
    monkeypatch.setitem(protobuf.WIRE, "PodStatus", {})
    with pytest.raises(TypeError, match=r"no number for PodStatus\.phase"):
        protobuf._Schema()


class Thing(TypedDict, total=False):
    metadata: objects.ObjectMeta


def test_sources_ask_for_protobuf_where_the_kind_has_it(monkeypatch):
    pods = Source("pods", "/api/v1/pods")
    assert pods.accept(stream=True).startswith(protobuf.STREAM_CONTENT_TYPE + ",")
    assert pods.accept(stream=False).startswith(protobuf.CONTENT_TYPE + ",")
    assert "application/json" in pods.accept(stream=False)  # an aggregated API answers it
    assert Source("pods", "/api/v1/pods", encoding="json").accept(stream=True) == (
        "application/json"
    )
    # A custom resource: the apiserver serves it as JSON only, and so it is asked for.
    monkeypatch.setitem(objects.KINDS, "things", Thing)
    assert not protobuf.supports("things") and not protobuf.supports("no-such-kind")
    assert Source("things", "/apis/example.com/v1/things").accept(stream=True) == (
        "application/json"
    )
