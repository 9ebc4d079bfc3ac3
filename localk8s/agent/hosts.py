"""Cluster names for the process node's pods, through each pod's ``/etc/hosts``.

The local cluster has no DNS server or kube-proxy. What distributed jobs need of cluster DNS
is to find each other by name: a PyTorchJob's workers dial ``<job>-master-0`` (a headless
Service), a TrainJob's nodes ``<job>-node-0-0.<job>`` (a pod's hostname in its subdomain). So
each pod's containers see a hosts file (bind-mounted at ``/etc/hosts``, as the kubelet manages
it) that names every pod of this node that a Service selects, under the Service's names
(``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.cluster.local``), and every pod with a
``hostname`` and ``subdomain`` under ``hostname.subdomain[.ns.svc.cluster.local]``. A Service
with a ClusterIP is named by its first selected pod's IP (ports must equal target ports:
there is no kube-proxy). The file is rewritten in place whenever pods or Services change, so
a worker waiting for its master sees the name appear.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOMAIN = "svc.cluster.local"


@dataclass(frozen=True)
class PodName:
    """What the hosts files need of one pod on this node."""

    namespace: str
    name: str
    ip: str
    labels: tuple[tuple[str, str], ...]
    hostname: str
    subdomain: str


def pod_name(pod: dict[str, Any], ip: str) -> PodName:
    meta, spec = pod["metadata"], pod["spec"]
    return PodName(
        meta["namespace"],
        meta["name"],
        ip,
        tuple(sorted((meta.get("labels") or {}).items())),
        spec.get("hostname") or meta["name"],
        spec.get("subdomain") or "",
    )


def _selects(selector: dict[str, str], pod: PodName) -> bool:
    labels = dict(pod.labels)
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def hosts_file(me: PodName, pods: Iterable[PodName], services: Iterable[dict[str, Any]]) -> str:
    """The ``/etc/hosts`` of pod ``me``."""
    pods = list(pods)
    own = [me.hostname, me.name] if me.hostname != me.name else [me.name]
    if me.subdomain:
        # The kubelet writes the full name only; cluster DNS answers the shorter ones through
        # the search path. Without DNS here, a pod must find its own short names too (a
        # TrainJob's node 0 is its own PET_MASTER_ADDR, "<job>-node-0-0.<job>").
        own = [
            f"{me.hostname}.{me.subdomain}.{me.namespace}.{DOMAIN}",
            f"{me.hostname}.{me.subdomain}.{me.namespace}",
            f"{me.hostname}.{me.subdomain}",
            *own,
        ]
    lines = [
        "# Kubernetes-managed hosts file (the gpuhub process node; no cluster DNS here).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{me.ip}\t{' '.join(dict.fromkeys(own))}",
    ]
    for pod in pods:
        if pod.subdomain and pod != me:
            names = [
                f"{pod.hostname}.{pod.subdomain}.{pod.namespace}.{DOMAIN}",
                f"{pod.hostname}.{pod.subdomain}.{pod.namespace}",
            ]
            if pod.namespace == me.namespace:
                names.append(f"{pod.hostname}.{pod.subdomain}")
            lines.append(f"{pod.ip}\t{' '.join(names)}")
    for service in services:
        meta, spec = service["metadata"], service.get("spec") or {}
        selector = spec.get("selector") or {}
        chosen = [p for p in pods if p.namespace == meta["namespace"] and _selects(selector, p)]
        if spec.get("clusterIP") != "None":
            chosen = chosen[:1]
        name, namespace = meta["name"], meta["namespace"]
        names = [f"{name}.{namespace}.{DOMAIN}", f"{name}.{namespace}.svc", f"{name}.{namespace}"]
        if namespace == me.namespace:
            names.append(name)
        lines += [f"{pod.ip}\t{' '.join(names)}" for pod in chosen]
    return "\n".join(lines) + "\n"


def write_in_place(path: Path, text: str) -> None:
    """Rewrite ``path`` keeping its inode: a bind mount of it shows the new content."""
    if path.exists() and path.read_text() == text:
        return
    with path.open("a+") as f:
        f.seek(0)
        f.truncate()
        f.write(text)
