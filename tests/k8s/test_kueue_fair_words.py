"""A fair Kueue queue without a cluster: when gpuhub finds admission fair sharing on, how it
names each user's LocalQueue, and what the spawn page says while a server waits in one."""

from __future__ import annotations

import re

from gpuhub.k8s.kueue import (
    AFS_MODE,
    FAIR_QUEUE_WORDS,
    Pending,
    fair_sharing_of,
    user_queue_name,
    waiting_words,
)

LOCAL_ON = {
    "status": {
        "fairSharing": {
            "admissionFairSharingStatus": {
                "consumedResources": {"nvidia.com/gpu": "1146n"},
                "lastUpdate": "2026-11-27T06:00:00Z",
            }
        }
    }
}
# Kubernetes' rule for an object's name (RFC 1123 label), written out here, not imported.
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
CLUSTER_ON = {"metadata": {"name": "gpus"}, "spec": {"admissionScope": {"admissionMode": AFS_MODE}}}


def test_fair_sharing_needs_the_cluster_queue_and_kueues_configuration() -> None:
    assert fair_sharing_of(LOCAL_ON, CLUSTER_ON).on
    assert fair_sharing_of(LOCAL_ON, CLUSTER_ON).cluster_queue == "gpus"
    # The ClusterQueue does not ask for it.
    plain = {"metadata": {"name": "gpus"}, "spec": {}}
    off = fair_sharing_of(LOCAL_ON, plain)
    assert not off.on and off.why_not == (
        "the ClusterQueue 'gpus' has no spec.admissionScope.admissionMode: "
        "UsageBasedAdmissionFairSharing"
    )
    no_mode = {
        "metadata": {"name": "gpus"},
        "spec": {"admissionScope": {"admissionMode": "NoAdmissionFairSharing"}},
    }
    assert not fair_sharing_of(LOCAL_ON, no_mode).on
    # Kueue keeps no usage per LocalQueue: its Configuration or feature gate says no.
    off = fair_sharing_of({"status": {"fairSharing": {"weightedShare": 0}}}, CLUSTER_ON)
    assert not off.on and "admissionFairSharing" in off.why_not and "feature gate" in off.why_not


def test_each_user_gets_a_queue_of_their_own_with_a_valid_name() -> None:
    """A LocalQueue's name is an object name, a DNS-1123 label: stricter than a label value,
    which takes "john_doe", "Alice" and "a..b" (issue 39: those users lost fairness)."""
    assert user_queue_name("gpus", "alice") == "gpus-alice"
    users = (
        "alice",
        "Alice",
        "john_doe",
        "john-doe",
        "a..b",
        "a.b@example.org",
        "a-b-example-org",
        "x--y",
        "1st",
        "-",
        "ü" * 80,
    )
    names = {user_queue_name("gpus", user) for user in users}
    assert len(names) == len(users)  # nobody shares another's queue, whatever their names
    long_queue = "q" * 63
    for name in (
        *names,
        user_queue_name(long_queue, "x" * 100),
        user_queue_name(long_queue, "b"),
        user_queue_name("Team.GPUs", "alice"),
    ):
        assert len(name) <= 63 and DNS_1123_LABEL.fullmatch(name), name


def test_the_page_says_the_queue_favours_who_used_least() -> None:
    line = [Pending("w", 1, (("Pod", "jupyter-heavy", "uid"),), in_cluster_queue=3)]
    said = waiting_words("gpus", gpus=1, gpu_name="A100", place=3, line=line, fair=True)
    # The user's own queue lists only their workloads: no "behind ..." from it.
    assert (
        said == f'Waiting in queue "gpus" for 1 A100 GPU: you are 3rd in line; {FAIR_QUEUE_WORDS}.'
    )
    assert "favours who used least" in FAIR_QUEUE_WORDS
    assert FAIR_QUEUE_WORDS not in waiting_words("gpus", gpus=1, place=1, line=line)
