"""Services on the process node: their environment variables, and a userspace proxy for
their ClusterIPs (no kube-proxy runs here).

The Service CIDR is a loopback range (docs/cluster.md), so a ClusterIP is an address this
machine owns. For every Service with a ClusterIP and a selector, the node listens on
``clusterIP:port`` (TCP) and forwards each connection to a ready pod of this node that the
Service selects, at its ``targetPort`` (a number, or a container port's name). Endpoints come
from the node's own pods, not from EndpointSlices: the apiserver refuses slices with loopback
addresses, which every pod IP here is. ``default/kubernetes`` forwards to the apiserver. UDP
ports are not proxied (cluster DNS listens on its own ClusterIP).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gpuhub.node-agent")

MASTER = ("default", "kubernetes")


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def has_cluster_ip(service: dict[str, Any]) -> bool:
    """The Service has a ClusterIP this node serves: one on loopback. A cluster started with a
    Service range off loopback gets neither variables nor a proxy for it, since nothing here
    may dial an address off this machine."""
    ip = (service.get("spec") or {}).get("clusterIP")
    if not ip or ip == "None":
        return False
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def service_env(services: list[dict[str, Any]]) -> dict[str, str]:
    """The kubelet's Service links (``pkg/kubelet/envvars``) for ``services``:
    ``<SVC>_SERVICE_HOST``, ``<SVC>_SERVICE_PORT``, ``<SVC>_SERVICE_PORT_<NAME>``,
    ``<SVC>_PORT`` and ``<SVC>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]``."""
    env: dict[str, str] = {}
    for service in services:
        if not has_cluster_ip(service):
            continue
        spec = service["spec"]
        ip, ports = spec["clusterIP"], spec.get("ports") or []
        prefix = _env_name(service["metadata"]["name"])
        env[f"{prefix}_SERVICE_HOST"] = ip
        if not ports:
            continue
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{_env_name(port['name'])}"] = str(port["port"])
        for i, port in enumerate(ports):
            protocol = port.get("protocol") or "TCP"
            url = f"{protocol.lower()}://{ip}:{port['port']}"
            if i == 0:
                env[f"{prefix}_PORT"] = url
            link = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
            env[link] = url
            env[f"{link}_PROTO"] = protocol.lower()
            env[f"{link}_PORT"] = str(port["port"])
            env[f"{link}_ADDR"] = ip
    return env


def pod_env_services(
    services: dict[tuple[str, str], dict[str, Any]], pod: dict[str, Any]
) -> list[dict[str, Any]]:
    """The Services whose variables a pod gets: its namespace's (unless
    ``enableServiceLinks: false``), and ``default/kubernetes`` always, as the kubelet does."""
    namespace = pod["metadata"]["namespace"]
    links = pod["spec"].get("enableServiceLinks", True) is not False
    chosen = [
        s
        for (ns, name), s in sorted(services.items())
        if (links and ns == namespace) or (ns, name) == MASTER
    ]
    return chosen


def target_port(port: dict[str, Any], pod: dict[str, Any]) -> int | None:
    """A Service port's target on ``pod``: a number, or the pod's container port of that name
    (None when the pod has no such port)."""
    target = port.get("targetPort", port["port"])
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    protocol = port.get("protocol") or "TCP"
    for container in pod["spec"].get("containers") or []:
        for cport in container.get("ports") or []:
            if cport.get("name") == target and (cport.get("protocol") or "TCP") == protocol:
                return int(cport["containerPort"])
    return None


# (namespace, name of the Service, its port spec) -> (ip, port) of each ready endpoint
Endpoints = Callable[[dict[str, Any], dict[str, Any]], list[tuple[str, int]]]


@dataclass
class _Listener:
    server: asyncio.Server
    service: dict[str, Any]
    port: dict[str, Any]


class ServiceProxy:
    """Listens on each Service's ``clusterIP:port`` and forwards connections to an endpoint
    chosen when the connection arrives (round robin), so pods that come and go need no
    reconfiguration; listeners open and close as Services change."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self.listeners: dict[tuple[str, int], _Listener] = {}
        self._turn = itertools.count()
        self._sync: asyncio.Task[None] | None = None
        self._again = False
        self._services: list[dict[str, Any]] = []
        self._connections: set[asyncio.Task[None]] = set()

    def update(self, services: list[dict[str, Any]]) -> None:
        """The Services changed: reconcile the listeners in the background (never blocks)."""
        self._services = services
        if self._sync is not None and not self._sync.done():
            self._again = True
            return
        self._sync = asyncio.create_task(self._reconcile())

    async def _reconcile(self) -> None:
        while True:
            self._again = False
            wanted: dict[tuple[str, int], tuple[dict[str, Any], dict[str, Any]]] = {}
            for service in self._services:
                spec = service.get("spec") or {}
                key = (service["metadata"]["namespace"], service["metadata"]["name"])
                if not has_cluster_ip(service) or not (spec.get("selector") or key == MASTER):
                    continue
                for port in spec.get("ports") or []:
                    if (port.get("protocol") or "TCP") == "TCP":
                        wanted[(spec["clusterIP"], int(port["port"]))] = (service, port)
            for address in [a for a in self.listeners if a not in wanted]:
                listener = self.listeners.pop(address)
                listener.server.close()
            for address, (service, port) in wanted.items():
                current = self.listeners.get(address)
                if current is not None:
                    current.service, current.port = service, port
                    continue
                try:
                    server = await asyncio.start_server(
                        functools.partial(self._accept, address), *address
                    )
                except OSError as error:
                    log.warning("Service %s:%d cannot listen: %s", *address, error)
                    continue
                self.listeners[address] = _Listener(server, service, port)
            if not self._again:
                return

    def _accept(
        self, address: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.create_task(self._forward(address, reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _forward(
        self, address: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        listener = self.listeners.get(address)
        targets = self.endpoints(listener.service, listener.port) if listener else []
        if not targets:  # kube-proxy rejects a connection to a Service without endpoints
            writer.close()
            return
        ip, port = targets[next(self._turn) % len(targets)]
        try:
            up_reader, up_writer = await asyncio.open_connection(ip, port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()  # a half-close passes on; the other way goes on
            except OSError:
                # A reset on one side resets the other, as through kube-proxy: a client
                # whose pod went mid-request (a hub pod deleted by `helm upgrade`) would
                # otherwise wait out its own timeout on a connection nothing answers.
                for side in (writer, up_writer):
                    side.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    async def close(self) -> None:
        for listener in self.listeners.values():
            listener.server.close()
        self.listeners.clear()
        for task in list(self._connections):
            task.cancel()
