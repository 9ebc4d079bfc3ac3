"""The default scheduler's filters and its event wording.

Filters run in the default profile's order (NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit); a node is reported under the first filter that rejects it, and all of
NodeResourcesFit's shortfalls are reported together, as Kubernetes does. The FailedScheduling
message is assembled exactly like the scheduler's ``FitError.Error()``: sorted
``"<count> <reason>"`` strings, then the preemption post-filter's own summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .quantity import parse_quantity

Obj = dict[str, Any]

# Reasons the preemption post-filter considers unresolvable by evicting pods.
UNRESOLVABLE_PREFIXES = (
    "node(s) had untolerated taint",
    "node(s) didn't match Pod's node affinity/selector",
    "node(s) were unschedulable",
)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """Effective requests: sum over containers, max with each init container; 1 pod slot."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Fraction(0)) + parse_quantity(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Fraction(0)), parse_quantity(value))
    total["pods"] = Fraction(1)
    return total


def tolerates(tolerations: list[Obj], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        operator = toleration.get("operator", "Equal")
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _match_expression(labels: Mapping[str, str], expr: Mapping[str, Any]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    value = labels.get(key)
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            number, bound = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return number > bound if op == "Gt" else number < bound
    return False


def matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in terms:  # terms are ORed, expressions ANDed
        if (
            all(_match_expression(labels, e) for e in term.get("matchExpressions") or [])
            and all(_match_expression(fields, e) for e in term.get("matchFields") or [])
            and (term.get("matchExpressions") or term.get("matchFields"))
        ):
            return True
    return False


def allocatable(node: Mapping[str, Any]) -> dict[str, Fraction]:
    status = node.get("status") or {}
    values = status.get("allocatable") or status.get("capacity") or {}
    return {name: parse_quantity(value) for name, value in values.items()}


def filter_node(
    pod: Mapping[str, Any], node: Mapping[str, Any], used: Mapping[str, Fraction]
) -> list[str]:
    """Why ``pod`` cannot go on ``node`` (empty: it fits)."""
    spec = pod.get("spec") or {}
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(
        spec.get("tolerations") or [],
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ):
        return ["node(s) were unschedulable"]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
            spec.get("tolerations") or [], taint
        ):
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
            ]
    if not matches_node_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    free = allocatable(node)
    reasons = []
    requests = pod_requests(pod)
    if used.get("pods", Fraction(0)) + 1 > free.get("pods", Fraction(110)):
        reasons.append("Too many pods")
    for name, amount in sorted(requests.items()):
        if name == "pods" or amount == 0:
            continue
        if used.get(name, Fraction(0)) + amount > free.get(name, Fraction(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def fit_error(total_nodes: int, failures: Mapping[str, list[str]]) -> str:
    """The scheduler's FailedScheduling message for ``failures`` (node name -> reasons)."""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    histogram: Counter[str] = Counter()
    for reasons in failures.values():
        histogram.update(set(reasons))
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    message = f"0/{total_nodes} nodes are available: {', '.join(parts)}."
    # Preemption (PostFilter): all pods share priority 0 here, so nothing can be evicted.
    preemption: Counter[str] = Counter()
    for reasons in failures.values():
        if any(r.startswith(UNRESOLVABLE_PREFIXES) for r in reasons):
            preemption["Preemption is not helpful for scheduling"] += 1
        else:
            preemption["No preemption victims found for incoming pod"] += 1
    summary = ", ".join(sorted(f"{count} {reason}" for reason, count in preemption.items()))
    # The post-filter's message ends in a period and FitError adds another: real clusters
    # print "...for incoming pod.." (see kubernetes/kubernetes FitError.Error()).
    return f"{message} preemption: 0/{total_nodes} nodes are available: {summary}.."


def score(
    node: Mapping[str, Any], used: Mapping[str, Fraction], pod_req: Mapping[str, Fraction]
) -> Fraction:
    """NodeResourcesFit LeastAllocated over cpu and memory: prefer the emptier node."""
    free = allocatable(node)
    total = Fraction(0)
    for name in ("cpu", "memory"):
        capacity = free.get(name, Fraction(0))
        if capacity:
            total += (
                capacity - used.get(name, Fraction(0)) - pod_req.get(name, Fraction(0))
            ) / capacity
    return total
