"""What a pod of the process node has of its own, as on a kubelet, that KubeSpawner's own
test suite relies on (docs/cluster.md, "Networking" and "The process node"): a container
with a readiness probe is Ready only once it answers; its host name is the pod's; a program
it starts in a session of its own ends with the pod."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import Kube

from .pod_specs import finished, phase, pod

pytestmark = pytest.mark.e2e  # a real kube-apiserver and the process node

# Listens on the wildcard port 8080 only after a few seconds, saying when.
SLOW_SERVER = (
    "import http.server, time\n"
    "time.sleep(4)\n"
    "print('listening', flush=True)\n"
    "http.server.ThreadingHTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler)"
    ".serve_forever()\n"
)


def ready(kube: Kube, name: str) -> bool:
    conditions = ((kube.get("Pod", name) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize(
    "check",
    [{"tcpSocket": {"port": 8080}}, {"httpGet": {"port": "http", "path": "/"}}],
    ids=["tcpSocket", "httpGet"],
)
def test_a_readiness_probe_holds_ready_until_the_server_answers(
    kube: Kube, check: dict[str, Any]
) -> None:
    kube.require_local("the process node")
    kube.create(
        pod(
            "slow",
            "",
            container={
                "command": ["python", "-c", SLOW_SERVER],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {**check, "periodSeconds": 1},
            },
        )
    )
    kube.wait_for(lambda: phase(kube, "slow") == "Running", timeout=60)
    assert "listening" in kube.logs("slow") or not ready(kube, "slow")
    kube.wait_for(lambda: ready(kube, "slow"), timeout=60)
    assert "listening" in kube.logs("slow")  # ready only once the server answers


def test_a_probe_that_never_passes_keeps_the_pod_unready(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(
        pod(
            "deaf",
            "echo started; sleep 600",
            container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
        )
    )
    unhealthy = kube.wait_for(
        lambda: [e for e in kube.events("deaf") if e["reason"] == "Unhealthy"], timeout=60
    )
    assert unhealthy[0]["type"] == "Warning"
    assert unhealthy[0]["message"].startswith("Readiness probe failed: ")
    assert phase(kube, "deaf") == "Running"
    assert not ready(kube, "deaf")


HOST_NAME = "import socket\nname = socket.gethostname()\nprint(name, socket.gethostbyname(name))\n"


@pytest.mark.parametrize("hostname", [None, "web"])
def test_a_pods_host_name_is_its_own(kube: Kube, hostname: str | None) -> None:
    kube.require_local("the process node")
    spec = {"hostname": hostname} if hostname else {}
    kube.create(pod("named", "", container={"command": ["python", "-c", HOST_NAME]}, **spec))
    kube.wait_for(lambda: phase(kube, "named") in ("Succeeded", "Failed"), timeout=60)
    ip = (kube.get("Pod", "named") or {})["status"]["podIP"]
    assert kube.logs("named").split() == [hostname or "named", ip]


# Starts a child in a session of its own (as JupyterHub starts configurable-http-proxy),
# prints its pid, and waits.
LEAVER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_process_that_left_its_container_ends_with_the_pod(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(pod("leaver", "", container={"command": ["python", "-c", LEAVER]}))
    kube.wait_for(lambda: phase(kube, "leaver") == "Running", timeout=60)
    pid = int(kube.wait_for(lambda: kube.logs("leaver").strip(), timeout=60))
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert any(entry.startswith(b"GPUHUB_POD_IP=") for entry in environ)
    kube.delete("Pod", "leaver")
    kube.wait_for(lambda: kube.get("Pod", "leaver") is None, timeout=60)
    kube.wait_for(lambda: not _alive(pid), timeout=10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_a_jupyter_image_that_would_not_run_as_root_starts_its_server(kube: Kube) -> None:
    """Jupyter's images run as jovyan; here every container runs as root, which a Jupyter
    server refuses unless told: the node tells it (``JUPYTER_CONFIG_PATH``), so KubeSpawner's
    user pods serve as they would on a kubelet."""
    kube.require_local("the process node")
    kube.create(
        pod(
            "lab",
            "",
            container={
                "image": "quay.io/jupyterhub/singleuser:5",
                "command": ["jupyter", "server", "--ServerApp.token=", "--ip=0.0.0.0"],
                "ports": [{"name": "http", "containerPort": 8888}],
                "readinessProbe": {"httpGet": {"port": "http", "path": "/api"}, "periodSeconds": 1},
            },
        )
    )
    kube.wait_for(lambda: ready(kube, "lab") or phase(kube, "lab") == "Failed", timeout=120)
    assert ready(kube, "lab"), kube.logs("lab")


# Binds the wildcard address and prints what it got, the mounted ConfigMap's key, and what
# the folder the emptyDir covers holds.
HIDDEN = (
    "import os, socket, sys\n"
    "s = socket.socket()\n"
    "s.bind(('0.0.0.0', 0))\n"
    "print(s.getsockname()[0])\n"
    "print(open('/etc/gpuhub-test/greeting').read())\n"
    "print(len(os.listdir(sys.argv[1])))\n"
)


def test_an_emptydir_over_the_clusters_folder_hides_nothing_the_pod_needs(kube: Kube) -> None:
    """A pod may mount an emptyDir at ``/tmp`` (many images' charts do) on a cluster rooted
    there (``--root /tmp/...``): its other volumes and the wildcard-bind shim, which the node
    keeps in the cluster's folder or outside it, must still reach its programs. On a cluster
    rooted elsewhere the emptyDir covers the cluster's folder itself, the same case."""
    kube.require_local("the process node")
    root = kube.kubeconfig.parent
    if not (root / "node-agent").is_dir():
        pytest.skip(f"the cluster's folder is not the kubeconfig's ({kube.kubeconfig})")
    over = "/tmp" if root.is_relative_to("/tmp") else str(root)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": {"greeting": "hello"},
        }
    )
    kube.create(
        pod(
            "covered",
            "",
            container={
                "command": ["python", "-c", HIDDEN, over],
                "volumeMounts": [
                    {"name": "scratch", "mountPath": over},
                    {"name": "settings", "mountPath": "/etc/gpuhub-test", "readOnly": True},
                ],
            },
            volumes=[
                {"name": "scratch", "emptyDir": {}},
                {"name": "settings", "configMap": {"name": "settings"}},
            ],
        )
    )
    done = finished(kube, "covered")
    logs = kube.logs("covered")
    assert done["status"]["phase"] == "Succeeded", logs
    assert "LD_PRELOAD" not in logs, logs  # ld.so's "cannot be preloaded"
    # The wildcard became the pod's own address (the shim ran), the ConfigMap mounted after
    # the emptyDir is there, and the emptyDir covering the cluster's folder is empty.
    assert logs.split() == [done["status"]["podIP"], "hello", "0"], logs
