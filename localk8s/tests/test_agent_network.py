"""The process node's networking parts without a cluster: what a pod's ``/etc/hosts``,
``/etc/resolv.conf`` and Service variables say (the kubelet's rules), the names cluster DNS
serves from the node, the Service proxy on real loopback sockets, the wildcard-bind shim in
real processes, and the launcher's address ranges and Corefile."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from localk8s import launcher
from localk8s.agent import shim
from localk8s.agent.hosts import cluster_names, hosts_file, pod_hostname, pod_name, resolv_conf
from localk8s.agent.services import ServiceProxy, service_env, target_port


def a_pod(name: str = "web-0", namespace: str = "team", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main"}], **spec},
    }


def a_service(name: str, ip: str, ports: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"clusterIP": ip, "ports": ports, **spec},
    }


def test_service_variables_are_the_kubelets() -> None:
    proxy = a_service(
        "proxy-api",
        "127.130.0.7",
        [
            {"name": "http-api", "port": 8001, "protocol": "TCP"},
            {"name": "metrics", "port": 9090, "protocol": "UDP"},
        ],
    )
    headless = a_service("workers", "None", [{"port": 1}])
    env = service_env([proxy, headless])
    assert env == {
        "PROXY_API_SERVICE_HOST": "127.130.0.7",
        "PROXY_API_SERVICE_PORT": "8001",
        "PROXY_API_SERVICE_PORT_HTTP_API": "8001",
        "PROXY_API_SERVICE_PORT_METRICS": "9090",
        "PROXY_API_PORT": "tcp://127.130.0.7:8001",
        "PROXY_API_PORT_8001_TCP": "tcp://127.130.0.7:8001",
        "PROXY_API_PORT_8001_TCP_PROTO": "tcp",
        "PROXY_API_PORT_8001_TCP_PORT": "8001",
        "PROXY_API_PORT_8001_TCP_ADDR": "127.130.0.7",
        "PROXY_API_PORT_9090_UDP": "udp://127.130.0.7:9090",
        "PROXY_API_PORT_9090_UDP_PROTO": "udp",
        "PROXY_API_PORT_9090_UDP_PORT": "9090",
        "PROXY_API_PORT_9090_UDP_ADDR": "127.130.0.7",
    }


def test_resolv_conf_follows_the_dns_policy() -> None:
    host = "# the machine's\nnameserver 127.0.0.53\nsearch corp.example\noptions edns0\n"
    assert resolv_conf(a_pod(), "127.130.0.10", host) == (
        "search team.svc.cluster.local svc.cluster.local cluster.local\n"
        "nameserver 127.130.0.10\noptions ndots:5\n"
    )
    assert resolv_conf(a_pod(dnsPolicy="Default"), "127.130.0.10", host) == (
        "search corp.example\nnameserver 127.0.0.53\noptions edns0\n"
    )
    # A host-network pod's ClusterFirst is Default; no cluster DNS falls back to it too.
    assert resolv_conf(a_pod(hostNetwork=True), "127.130.0.10", host) == resolv_conf(
        a_pod(), None, host
    )
    custom = a_pod(
        dnsPolicy="None",
        dnsConfig={
            "nameservers": ["127.0.0.9"],
            "searches": ["a.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}],
        },
    )
    assert resolv_conf(custom, "127.130.0.10", host) == (
        "search a.example\nnameserver 127.0.0.9\noptions ndots:2 rotate\n"
    )
    merged = a_pod(dnsConfig={"options": [{"name": "ndots", "value": "1"}]})
    assert resolv_conf(merged, "127.130.0.10", host).endswith("options ndots:1\n")


def test_hosts_file_names_the_pod_and_its_host_aliases() -> None:
    pod = a_pod(
        hostname="node-0",
        subdomain="job",
        hostAliases=[{"ip": "127.0.0.7", "hostnames": ["db", "db.local"]}],
    )
    lines = hosts_file(pod, "127.5.0.2").splitlines()
    assert "127.5.0.2\tnode-0.job.team.svc.cluster.local node-0" in lines
    assert lines[-1] == "127.0.0.7\tdb db.local"


def test_cluster_dns_names_headless_services_and_subdomain_pods() -> None:
    worker = pod_name(a_pod(hostname="node-0", subdomain="job"), "127.5.0.2")
    other = pod_name(a_pod("other", "elsewhere"), "127.5.0.3")
    services = [
        a_service("web", "None", [{"port": 80}], selector={"app": "web"}),
        a_service("web-ip", "127.130.0.4", [{"port": 80}], selector={"app": "web"}),
    ]
    lines = cluster_names([worker, other], services).splitlines()[1:]
    assert lines == [
        "127.5.0.2\tnode-0.job.team.svc.cluster.local",
        "127.5.0.2\tweb.team.svc.cluster.local",
    ]
    # Without cluster DNS, a pod's hosts file carries them with what its search path would
    # have found: short names in its own namespace only.
    for_other = cluster_names([worker, other], services, me=other).splitlines()[1:]
    assert for_other == [
        "127.5.0.2\tnode-0.job.team.svc.cluster.local node-0.job.team.svc node-0.job.team",
        "127.5.0.2\tweb.team.svc.cluster.local web.team.svc web.team",
    ]
    assert cluster_names([worker], services, me=worker).splitlines()[2].endswith(" web")


def test_a_named_target_port_is_the_pods_container_port() -> None:
    pod = a_pod(containers=[{"name": "c", "ports": [{"name": "http", "containerPort": 8000}]}])
    assert target_port({"port": 80, "targetPort": "http"}, pod) == 8000
    assert target_port({"port": 80, "targetPort": 8080}, pod) == 8080
    assert target_port({"port": 80}, pod) == 80
    assert target_port({"port": 80, "targetPort": "api"}, pod) is None


async def test_the_service_proxy_forwards_a_cluster_ip_to_a_ready_endpoint() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pod says " + await reader.readline())
        await writer.drain()
        writer.close()

    backend = await asyncio.start_server(echo, "127.0.0.1", 0)
    backend_port = backend.sockets[0].getsockname()[1]
    ready: list[tuple[str, int]] = []
    proxy = ServiceProxy(lambda service, port: list(ready))
    ip = "127.250.0.7"  # a Service address of no cluster's range
    service = a_service("web", ip, [{"port": 8081, "targetPort": "http"}], selector={"a": "b"})
    proxy.update([service])
    try:
        await asyncio.wait_for(_listening(proxy, (ip, 8081)), 10)
        # No ready endpoint: the connection is closed, as kube-proxy rejects it.
        reader, writer = await asyncio.open_connection(ip, 8081)
        assert await reader.read() == b""
        writer.close()
        ready.append(("127.0.0.1", backend_port))
        reader, writer = await asyncio.open_connection(ip, 8081)
        writer.write(b"hello\n")
        assert await reader.read() == b"pod says hello\n"
        writer.close()
        proxy.update([])  # the Service is gone: its address no longer listens
        await asyncio.wait_for(_listening(proxy, (ip, 8081), False), 10)
        with pytest.raises(OSError):
            await asyncio.open_connection(ip, 8081)
    finally:
        await proxy.close()
        backend.close()


async def test_a_reset_from_the_pod_ends_the_clients_connection_too() -> None:
    """A pod that ends while a request through its Service waits (a hub pod deleted by
    ``helm upgrade``) resets its side; the client must see its connection end then, not wait
    for its own timeout, as it would through kube-proxy, which passes the reset on."""
    import struct

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # the request has come through; then the pod goes
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # closed with linger 0: the kernel sends a reset

    backend = await asyncio.start_server(reset, "127.0.0.1", 0)
    backend_port = backend.sockets[0].getsockname()[1]
    proxy = ServiceProxy(lambda service, port: [("127.0.0.1", backend_port)])
    ip = "127.250.0.8"
    proxy.update([a_service("hub", ip, [{"port": 8081}], selector={"a": "b"})])
    try:
        await asyncio.wait_for(_listening(proxy, (ip, 8081)), 10)
        reader, writer = await asyncio.open_connection(ip, 8081)
        writer.write(b"GET /hub/api HTTP/1.1\r\nHost: hub\r\n\r\n")  # and wait for an answer
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        await proxy.close()
        backend.close()


async def _listening(proxy: ServiceProxy, address: tuple[str, int], wanted: bool = True) -> None:
    while (address in proxy.listeners) != wanted:
        await asyncio.sleep(0.05)


SERVE = """
import socket, sys
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", int(sys.argv[1])))  # dual-stack wildcard, as Node and http.server bind
s.listen()
print(s.getsockname()[0], flush=True)
conn, _ = s.accept()
conn.sendall(sys.argv[2].encode())
conn.close()
"""


def test_the_shim_gives_two_pods_binding_the_wildcard_each_its_own_address(
    tmp_path: Path,
) -> None:
    library = shim.build(tmp_path)
    if library is None:
        pytest.skip("no C compiler on this machine")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pods = {}
    for ip in ("127.251.0.2", "127.251.0.3"):
        env = {"LD_PRELOAD": str(library), shim.POD_IP_ENV: ip, "PATH": "/usr/bin:/bin"}
        pods[ip] = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port), f"I am {ip}"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
    try:
        for ip, process in pods.items():
            assert process.stdout is not None
            assert process.stdout.readline().strip() == f"::ffff:{ip}"
            with socket.create_connection((ip, port), timeout=10) as client:
                assert client.recv(100) == f"I am {ip}".encode()
    finally:
        for process in pods.values():
            process.kill()
            process.wait()


# Listens on localhost, as configurable-http-proxy's API does (--api-ip 127.0.0.1), saying
# which pod it is.
SERVE_LOCALHOST = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print(s.getsockname()[0], flush=True)
while True:
    conn, _ = s.accept()
    conn.sendall(sys.argv[2].encode())
    conn.close()
"""
ASK_LOCALHOST = """
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as c:
    print(c.recv(100).decode())
"""


def test_the_shim_gives_each_pod_its_own_localhost(tmp_path: Path) -> None:
    """Two pods' servers on 127.0.0.1 at one port do not collide, each pod's client reaches
    its own, and a pod that serves nothing there is refused (not handed another's)."""
    library = shim.build(tmp_path)
    if library is None:
        pytest.skip("no C compiler on this machine")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def env(ip: str) -> dict[str, str]:
        return {"LD_PRELOAD": str(library), shim.POD_IP_ENV: ip, "PATH": "/usr/bin:/bin"}

    pods = {
        ip: subprocess.Popen(
            [sys.executable, "-c", SERVE_LOCALHOST, str(port), f"I am {ip}"],
            env=env(ip),
            stdout=subprocess.PIPE,
            text=True,
        )
        for ip in ("127.251.0.4", "127.251.0.5")
    }
    try:
        for ip, process in pods.items():
            assert process.stdout is not None
            assert process.stdout.readline().strip() == ip
        for ip in pods:
            asked = subprocess.run(
                [sys.executable, "-c", ASK_LOCALHOST, str(port)],
                env=env(ip),
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert asked.stdout.strip() == f"I am {ip}", asked.stderr
        other = subprocess.run(
            [sys.executable, "-c", ASK_LOCALHOST, str(port)],
            env=env("127.251.0.6"),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "ConnectionRefusedError" in other.stderr
    finally:
        for process in pods.values():
            process.kill()
            process.wait()


def test_a_pods_host_name_is_the_kubelets() -> None:
    assert pod_hostname(a_pod("hub")) == "hub"
    assert pod_hostname(a_pod("web-0", hostname="web")) == "web"
    assert pod_hostname(a_pod("x" * 62 + "-y")) == "x" * 62


def test_services_and_cluster_dns_live_on_loopback_beside_the_pods() -> None:
    import ipaddress

    root = Path("/tmp/some-cluster")
    services = ipaddress.ip_network(launcher.service_range(root))
    pods = ipaddress.ip_network(launcher.pod_range(root))
    kwok = ipaddress.ip_network(launcher.POD_CIDR_KWOK)
    assert services.is_loopback and not services.overlaps(pods) and not services.overlaps(kwok)
    assert ipaddress.ip_address(launcher.dns_address(root)) == services[10]


def test_cluster_dns_forwards_only_to_a_resolver_on_loopback() -> None:
    text = "nameserver 10.255.255.53\nnameserver 127.0.0.53\nnameserver ::1\n"
    assert launcher._loopback_resolvers(text) == ["127.0.0.53", "::1"]
    assert launcher._loopback_resolvers("nameserver 192.168.1.1\n") == []
