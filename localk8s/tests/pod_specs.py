"""Pods the process node's tests make and wait for, shared by the modules of this folder
(a test module never imports another)."""

from __future__ import annotations

from typing import Any

from harness.cluster import PROCESS_NODE_SELECTOR, Kube


def pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": PROCESS_NODE_SELECTOR,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            **spec,
        },
    }


def phase(kube: Kube, name: str) -> str:
    return str((kube.get("Pod", name) or {}).get("status", {}).get("phase", ""))


def finished(kube: Kube, name: str, timeout: float = 60) -> dict[str, Any]:
    kube.wait_for(lambda: phase(kube, name) in ("Succeeded", "Failed"), timeout)
    return kube.get("Pod", name) or {}
