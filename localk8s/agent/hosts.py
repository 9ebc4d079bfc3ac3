"""Names on the process node: each pod's ``/etc/hosts`` and ``/etc/resolv.conf`` as the kubelet
writes them, and the pod names cluster DNS serves from this node.

Cluster DNS is CoreDNS with its ``kubernetes`` plugin (started by the launcher, see
docs/cluster.md): it answers a Service's name with its ClusterIP from the Service alone.
Names that it would answer from EndpointSlices, a headless Service's pods and a pod's
``hostname.subdomain``, need slices the apiserver refuses here: every pod IP of this node is
a loopback address, which EndpointSlice validation rejects ("may not be in the loopback
range"). So this node writes those names in hosts-file form (:func:`cluster_names`), and
CoreDNS's ``hosts`` plugin serves them in ``cluster.local`` before the ``kubernetes`` plugin.
That file, not each pod's ``/etc/hosts``, is how pods find each other by name.
"""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
DOMAIN = f"svc.{CLUSTER_DOMAIN}"


@dataclass(frozen=True)
class PodName:
    """What the names need of one pod on this node."""

    namespace: str
    name: str
    ip: str
    labels: tuple[tuple[str, str], ...]
    hostname: str
    subdomain: str


def pod_hostname(pod: dict[str, Any]) -> str:
    """A pod's host name as the kubelet sets it: ``spec.hostname``, else the pod's name, cut
    to 63 characters without a trailing ``-`` or ``.``."""
    name: str = pod["spec"].get("hostname") or pod["metadata"]["name"]
    return name[:63].rstrip("-.")


def pod_name(pod: dict[str, Any], ip: str) -> PodName:
    meta = pod["metadata"]
    return PodName(
        meta["namespace"],
        meta["name"],
        ip,
        tuple(sorted((meta.get("labels") or {}).items())),
        pod_hostname(pod),
        pod["spec"].get("subdomain") or "",
    )


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A Service's selector picks a pod: every label matches (an empty selector picks none)."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def hosts_file(pod: dict[str, Any], ip: str) -> str:
    """The pod's ``/etc/hosts``, as the kubelet writes it: localhost, the pod's own names
    (its FQDN first when it has a subdomain), then its ``hostAliases``."""
    me = pod_name(pod, ip)
    own = [me.hostname]
    if me.subdomain:
        own.insert(0, f"{me.hostname}.{me.subdomain}.{me.namespace}.{DOMAIN}")
    lines = [
        "# Kubernetes-managed hosts file (the gpuhub process node).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{me.ip}\t{' '.join(own)}",
    ]
    aliases = pod["spec"].get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        lines += [f"{a['ip']}\t{' '.join(a.get('hostnames') or [])}" for a in aliases]
    return "\n".join(lines) + "\n"


def resolv_conf(pod: dict[str, Any], cluster_dns: str | None, host: str) -> str:
    """The pod's ``/etc/resolv.conf`` by its ``dnsPolicy``, as the kubelet writes it:
    ``ClusterFirst`` (the default) names the cluster's DNS and the namespace's search path
    with ``ndots:5``; ``Default`` and a host-network pod's ``ClusterFirst`` take this
    machine's file (``host``); ``None`` is only the pod's ``dnsConfig``, which the other
    policies merge in. Without cluster DNS, ``ClusterFirst`` falls back to ``Default``."""
    spec = pod["spec"]
    namespace = pod["metadata"]["namespace"]
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        policy = "Default"
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not cluster_dns:
        policy = "Default"
    servers: list[str] = []
    searches: list[str] = []
    options: dict[str, str | None] = {}
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
        servers = [str(cluster_dns)]
        searches = [f"{namespace}.{DOMAIN}", DOMAIN, CLUSTER_DOMAIN]
        options = {"ndots": "5"}
    elif policy == "Default":
        for line in host.splitlines():
            fields = line.split()
            if not fields or fields[0].startswith(("#", ";")):
                continue
            if fields[0] == "nameserver" and len(fields) > 1:
                servers.append(fields[1])
            elif fields[0] in ("search", "domain"):
                searches = fields[1:]
            elif fields[0] == "options":
                for option in fields[1:]:
                    name, _, value = option.partition(":")
                    options[name] = value or None
    config = spec.get("dnsConfig") or {}
    servers += [s for s in config.get("nameservers") or [] if s not in servers]
    searches += [s for s in config.get("searches") or [] if s not in searches]
    for option in config.get("options") or []:
        options[option["name"]] = option.get("value")
    lines = []
    if searches:
        lines.append("search " + " ".join(searches))
    lines += [f"nameserver {s}" for s in servers]
    if options:
        lines.append(
            "options " + " ".join(k if v is None else f"{k}:{v}" for k, v in options.items())
        )
    return "\n".join(lines) + "\n"


def cluster_names(
    pods: Iterable[PodName], services: Iterable[dict[str, Any]], me: PodName | None = None
) -> str:
    """The names cluster DNS serves from this node, in hosts-file form: each pod with a
    ``hostname`` and ``subdomain`` as ``hostname.subdomain.<ns>.svc.cluster.local``, and
    each headless Service's name as each pod of this node it selects. Full names only: a
    pod's search path finds the short ones, as on any cluster.

    Without cluster DNS (a cluster started by a launcher older than CoreDNS here) these lines
    go into each pod's ``/etc/hosts`` instead; for that pod, ``me``, they also carry the
    shorter names its search path would have found (``<name>.<ns>``, and ``<name>`` in its own
    namespace)."""

    def names(name: str, namespace: str) -> str:
        found = [f"{name}.{namespace}.{DOMAIN}"]
        if me is not None:
            found += [f"{name}.{namespace}.svc", f"{name}.{namespace}"]
            if namespace == me.namespace:
                found.append(name)
        return " ".join(found)

    pods = list(pods)
    lines = ["# Pods' and headless Services' names on the gpuhub process node (see hosts.py)."]
    for pod in pods:
        if pod.subdomain:
            lines.append(f"{pod.ip}\t{names(f'{pod.hostname}.{pod.subdomain}', pod.namespace)}")
    for service in services:
        meta, spec = service["metadata"], service.get("spec") or {}
        if spec.get("clusterIP") != "None":
            continue  # the kubernetes plugin answers with its ClusterIP
        selector = spec.get("selector") or {}
        lines += [
            f"{pod.ip}\t{names(meta['name'], meta['namespace'])}"
            for pod in pods
            if pod.namespace == meta["namespace"] and selects(selector, dict(pod.labels))
        ]
    return "\n".join(lines) + "\n"


def names_of(ip: str, names: str) -> list[str]:
    """The names ``names`` (a :func:`cluster_names` file) gives the pod at ``ip``."""
    return [
        n for line in names.splitlines() if line.startswith(f"{ip}\t") for n in line.split()[1:]
    ]


def answers(server: str, name: str, timeout: float = 0.5) -> bool:
    """Whether the DNS server at ``server`` (port 53, UDP) answers ``name`` with an address:
    one A query, as a resolver sends it. The node asks before a pod's containers start, so
    that its names are served by then (CoreDNS rereads the names file on a timer)."""
    ident = random.randrange(1 << 16)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.strip(".").split(".")) + b"\0"
    query = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(timeout)
        try:
            udp.sendto(query, (server, 53))
            reply = udp.recv(512)
        except OSError:
            return False
    if len(reply) < 12:
        return False
    got, flags, _, count = struct.unpack("!HHHH", reply[:8])
    return got == ident and flags & 0xF == 0 and count > 0


def write_in_place(path: Path, text: str) -> None:
    """Rewrite ``path`` keeping its inode: a bind mount of it shows the new content."""
    if path.exists() and path.read_text() == text:
        return
    with path.open("a+") as f:
        f.seek(0)
        f.truncate()
        f.write(text)
