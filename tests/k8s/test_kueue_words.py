"""What a spawn page says is in front of a server waiting in Kueue's line, and when Kueue
holds a pod back (pure functions of gpuhub.k8s.kueue; the real line is in
tests/hub/test_kube_kueue_servers.py)."""

from __future__ import annotations

from gpuhub.k8s.kueue import ADMISSION_GATE, Pending, gated, in_front


def pending(position: int, kind: str) -> Pending:
    return Pending(f"w{position}", position, ((kind, f"o{position}", f"u{position}"),))


def test_in_front_names_what_waits_ahead_servers_first() -> None:
    line = [
        pending(1, "PyTorchJob"),
        pending(2, "Pod"),
        pending(3, "Job"),
        pending(4, "Pod"),
        pending(5, "Pod"),
    ]
    assert in_front(line, 1) == ""
    assert in_front(line, 2) == "1 job"
    assert in_front(line, 4) == "1 server and 2 jobs"
    assert in_front(line, 6) == "3 servers and 2 jobs"
    odd = [*line[:2], Pending("w9", 3, (("RayCluster", "r", "u"),)), Pending("w8", 4, ())]
    assert in_front(odd, 5) == "1 server, 1 job and 2 workloads"


def test_gated_reads_kueues_admission_gate_only() -> None:
    assert gated({"spec": {"schedulingGates": [{"name": ADMISSION_GATE}]}})
    assert not gated({"spec": {"schedulingGates": [{"name": "example.com/other"}]}})
    assert not gated({"spec": {}})
    assert not gated(None)
