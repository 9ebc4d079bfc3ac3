"""The process node's network as a kubelet's with kube-proxy and CoreDNS would give it
(docs/cluster.md, "Networking"): cluster DNS answers Services and pods by name, a Service's
ClusterIP serves from its port to a named target port, pods get their namespace's Service
variables, two pods listen on one wildcard port, and a PyTorchJob's workers find their
master by DNS with the Training Operator's own init container."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.cluster import PROCESS_NODE_SELECTOR, Kube

from .pod_specs import finished, phase, pod

pytestmark = pytest.mark.e2e  # a real kube-apiserver, CoreDNS, the process node

# Serves HTTP on port 8080 of the wildcard address (http.server binds ::, dual-stack), saying
# which pod answered.
WEB = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = os.environ['HOSTNAME'].encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "http.server.ThreadingHTTPServer(('', 8080), H).serve_forever()\n"
)


def web_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    spec = pod(
        name,
        "",
        container={
            "command": ["python", "-c", WEB],
            "ports": [{"name": "http", "containerPort": 8080}],
            # Ready once it listens, so a Service routes to it only then (as kube-proxy would).
            "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1},
        },
    )
    spec["metadata"]["labels"] = labels
    return spec


def service(name: str, selector: dict[str, str], port: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": port, **spec}]},
    }


def running(kube: Kube, *names: str) -> None:
    kube.wait_for(lambda: all(phase(kube, n) == "Running" for n in names), timeout=60)


def ready(kube: Kube, *names: str) -> None:
    """Wait until each pod's Ready condition is True: it answers its readiness probe."""

    def is_ready(name: str) -> bool:
        conditions = (kube.get("Pod", name) or {}).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    kube.wait_for(lambda: all(is_ready(n) for n in names), timeout=60)


def test_cluster_dns_answers_services_and_pods_by_name(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(service("api", {"app": "api"}, 80, targetPort="http"))
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "workers"},
            "spec": {"clusterIP": "None", "selector": {"app": "w"}, "ports": [{"port": 1}]},
        }
    )
    worker = pod("w-0", "sleep 60", hostname="rank-0", subdomain="workers")
    worker["metadata"]["labels"] = {"app": "w"}
    kube.create(worker)
    running(kube, "w-0")
    ns = kube.namespace
    script = (
        "nslookup api && nslookup rank-0.workers && cat /etc/resolv.conf && "
        'python -c \'import socket; print("addr", socket.gethostbyname("api"), '
        'socket.gethostbyname("rank-0.workers"), '
        f'socket.gethostbyname("workers.{ns}.svc.cluster.local"))\''
    )
    kube.create(pod("asker", script))
    assert finished(kube, "asker")["status"]["phase"] == "Succeeded", kube.logs("asker")
    cluster_ip = (kube.get("Service", "api") or {})["spec"]["clusterIP"]
    pod_ip = (kube.get("Pod", "w-0") or {})["status"]["podIP"]
    logs = kube.logs("asker")
    assert f"Name:\tapi.{ns}.svc.cluster.local\nAddress: {cluster_ip}" in logs
    assert f"Name:\trank-0.workers.{ns}.svc.cluster.local\nAddress: {pod_ip}" in logs
    assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in logs
    assert "options ndots:5" in logs
    assert f"addr {cluster_ip} {pod_ip} {pod_ip}" in logs


def test_a_service_port_serves_its_named_target_port_from_another_pod(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(service("proxy-public", {"app": "web"}, 80, targetPort="http"))
    kube.create(web_pod("web-0", {"app": "web"}))
    ready(kube, "web-0")
    fetch = (
        "import urllib.request; "
        "print('got', urllib.request.urlopen('http://proxy-public/', timeout=10).read().decode())"
    )
    kube.create(pod("client", "", container={"command": ["python", "-c", fetch]}))
    assert finished(kube, "client")["status"]["phase"] == "Succeeded", kube.logs("client")
    assert kube.logs("client").strip() == "got web-0"


def test_the_kubernetes_service_reaches_the_apiserver(kube: Kube) -> None:
    kube.require_local("the process node")
    ask = (
        "import json, ssl, urllib.request\n"
        "ca = '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt'\n"
        "context = ssl.create_default_context(cafile=ca)\n"
        "answer = urllib.request.urlopen('https://kubernetes.default.svc/version', "
        "context=context, timeout=10)\n"
        "print(json.load(answer)['gitVersion'])\n"
    )
    kube.create(pod("asker", "", container={"command": ["python", "-c", ask]}))
    assert finished(kube, "asker")["status"]["phase"] == "Succeeded", kube.logs("asker")
    assert kube.logs("asker").strip().startswith("v1.")


def test_a_pod_gets_its_namespaces_service_variables(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(service("hub", {"app": "hub"}, 8081))
    created = kube.get("Service", "hub") or {}
    ip = created["spec"]["clusterIP"]
    kube.create(pod("env", "env | grep -E '^HUB_' | sort"))
    done = finished(kube, "env")
    assert done["status"]["phase"] == "Succeeded"
    lines = set(kube.logs("env").split())
    assert {
        f"HUB_SERVICE_HOST={ip}",
        "HUB_SERVICE_PORT=8081",
        "HUB_SERVICE_PORT_HTTP=8081",
        f"HUB_PORT=tcp://{ip}:8081",
        f"HUB_PORT_8081_TCP_ADDR={ip}",
    } <= lines
    unlinked = pod("unlinked", "env | grep -c '^HUB_' || true", enableServiceLinks=False)
    kube.create(unlinked)
    assert finished(kube, "unlinked")["status"]["phase"] == "Succeeded"
    assert kube.logs("unlinked").strip() == "0"


def test_two_pods_listen_on_one_wildcard_port(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(web_pod("one", {"app": "one"}))
    kube.create(web_pod("two", {"app": "two"}))
    ready(kube, "one", "two")
    ips = {n: (kube.get("Pod", n) or {})["status"]["podIP"] for n in ("one", "two")}
    fetch = (
        "import sys, urllib.request\n"
        "for ip in sys.argv[1:]:\n"
        "    print(urllib.request.urlopen(f'http://{ip}:8080/', timeout=10).read().decode())\n"
    )
    kube.create(pod("client", "", container={"command": ["python", "-c", fetch, *ips.values()]}))
    assert finished(kube, "client")["status"]["phase"] == "Succeeded", kube.logs("client")
    assert kube.logs("client").split() == ["one", "two"]


# The master accepts one connection per worker and prints what each said; the workers dial
# MASTER_ADDR (the master's headless Service, a DNS name) at MASTER_PORT, as torch.distributed
# does.
MASTER = (
    "import os, socket\n"
    "s = socket.create_server(('', int(os.environ['MASTER_PORT'])))\n"
    "for _ in range(int(os.environ['WORLD_SIZE']) - 1):\n"
    "    conn, _ = s.accept(); print(conn.recv(100).decode(), flush=True); conn.close()\n"
)
WORKER = (
    "import os, socket, time\n"
    "for attempt in range(300):\n"  # the master may not listen yet: dial as torch does
    "    try:\n"
    "        c = socket.create_connection((os.environ['MASTER_ADDR'], "
    "int(os.environ['MASTER_PORT'])), timeout=5); break\n"
    "    except ConnectionRefusedError:\n"
    "        time.sleep(0.2)\n"
    "c.sendall(f\"rank {os.environ['RANK']} via {os.environ['MASTER_ADDR']}\".encode())\n"
)


def test_a_multi_worker_pytorchjob_finds_its_master_by_dns(kube: Kube) -> None:
    kube.require_local("the process node")

    def replica(count: int, script: str) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "spec": {
                    "nodeSelector": PROCESS_NODE_SELECTOR,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {"name": "pytorch", "image": "pytorch", "command": ["python", "-c", script]}
                    ],
                }
            },
        }

    kube.create(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ddp"},
            "spec": {
                "pytorchReplicaSpecs": {"Master": replica(1, MASTER), "Worker": replica(2, WORKER)}
            },
        }
    )

    def succeeded() -> bool:
        job = kube.get("PyTorchJob", "ddp") or {}
        conditions = job.get("status", {}).get("conditions") or []
        return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)

    kube.wait_for(succeeded, timeout=120)
    workers = [f"ddp-worker-{i}" for i in range(2)]
    for name in workers:
        init = (kube.get("Pod", name) or {})["spec"]["initContainers"][0]
        # The Training Operator's own init container, unchanged: nslookup of the master.
        assert "nslookup ddp-master-0" in json.dumps(init["command"])
        assert kube.logs(name, "init-pytorch").count("Name:\tddp-master-0.") == 1
    said = sorted(kube.logs("ddp-master-0").splitlines())
    assert said == ["rank 1 via ddp-master-0", "rank 2 via ddp-master-0"]
