"""``kubectl exec``, ``attach`` and ``port-forward`` on the process node, as an admin types
them (the real kubectl the cluster builds, through the real apiserver, to process-kubelet:
docs/cluster.md, "The process node"), the WebSocket exec KubeSpawner's tests use, and the
pause image."""

from __future__ import annotations

import functools
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import PROCESS_NODE_SELECTOR, Kube
from harness.kubectl import kubectl_binary
from localk8s.agent.images import PAUSE_PROGRAM, is_pause

SERVE = "import http.server, sys; http.server.test(http.server.SimpleHTTPRequestHandler, port=8888, bind=sys.argv[1])"


def pod(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": PROCESS_NODE_SELECTOR,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "busybox:1.36", **container}],
            **spec,
        },
    }


def kubectl(
    kube: Kube, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl_binary()), f"--kubeconfig={kube.kubeconfig}", "-n", kube.namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def logged(kube: Kube, name: str, text: str, timeout: float = 60) -> None:
    """Wait until the pod runs and its log says ``text`` (its process got that far)."""
    kube.wait_for(
        lambda: (kube.get("Pod", name) or {}).get("status", {}).get("phase") == "Running",
        timeout=timeout,
    )
    kube.wait_for(lambda: text in kube.logs(name), timeout=timeout, interval=0.2)


@pytest.fixture
def forwards() -> Iterator[list[subprocess.Popen[str]]]:
    """`kubectl port-forward` processes, ended after the test."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def port_forward(kube: Kube, forwards: list[subprocess.Popen[str]], target: str, ports: str) -> int:
    """Start ``kubectl port-forward target ports``; the local port once it listens."""
    process = subprocess.Popen(
        [
            str(kubectl_binary()),
            f"--kubeconfig={kube.kubeconfig}",
            "-n",
            kube.namespace,
            "port-forward",
            "--address=127.0.0.1",
            target,
            ports,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    forwards.append(process)
    assert process.stdout is not None
    line = process.stdout.readline()  # kubectl says where it listens, once it does
    found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
    assert found, f"kubectl port-forward {target} {ports} said {line!r}"
    return int(found.group(1))


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return str(response.read().decode())


@pytest.mark.e2e  # a real cluster, and its kubectl
def test_exec_runs_inside_the_container(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(
        pod(
            "box",
            {
                "command": [
                    "sh",
                    "-c",
                    "echo hi > /data/greeting && echo ready && exec sleep 3600",
                ],
                "workingDir": "/work",
                "env": [{"name": "GREETING", "value": "hello"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            volumes=[{"name": "data", "emptyDir": {}}],
        )
    )
    logged(kube, "box", "ready")
    # The pod's volume is at its mountPath inside the container only, not on this machine.
    done = kubectl(kube, "exec", "box", "--", "cat", "/data/greeting")
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr
    assert not Path("/data/greeting").exists()
    # Its environment and working directory; stdout and stderr apart; the exit code.
    done = kubectl(
        kube, "exec", "box", "--", "sh", "-c", "echo $GREETING; pwd; echo oops >&2; exit 3"
    )
    assert done.returncode == 3, done
    assert done.stdout == "hello\n/work\n"
    assert "oops" in done.stderr and "command terminated with exit code 3" in done.stderr
    # stdin, written into the volume the container sees.
    done = kubectl(
        kube,
        "exec",
        "-i",
        "box",
        "--",
        "sh",
        "-c",
        "cat > /data/in; wc -c < /data/in",
        stdin="12345\n",
    )
    assert (done.returncode, done.stdout.strip()) == (0, "6"), done.stderr
    done = kubectl(kube, "exec", "box", "--", "cat", "/data/in")
    assert done.stdout == "12345\n"
    # A command the container does not have, and a container the pod does not have.
    done = kubectl(kube, "exec", "box", "--", "no-such-program")
    assert done.returncode != 0 and "no-such-program" in done.stderr, done
    done = kubectl(kube, "exec", "box", "-c", "other", "--", "true")
    assert done.returncode != 0 and "other" in done.stderr, done


@pytest.mark.e2e  # a real cluster, and its kubectl
def test_attach_follows_output_and_feeds_stdin(kube: Kube) -> None:
    kube.require_local("the process node")
    echo = (
        "import sys\nprint('ready', flush=True)\nfor line in sys.stdin:\n"
        "    if line.strip() == 'quit': break\n    print('got', line.strip(), flush=True)\n"
        "print('bye', file=sys.stderr, flush=True)\n"
    )
    kube.create(pod("echo", {"command": ["python", "-c", echo], "stdin": True}))
    logged(kube, "echo", "ready")
    done = kubectl(kube, "attach", "-i", "echo", "-c", "main", stdin="hello\nworld\nquit\n")
    assert done.returncode == 0, done
    assert "got hello\ngot world\n" in done.stdout
    assert "ready" not in done.stdout  # output from the attach on, not the log
    assert "bye" in done.stderr
    kube.wait_for(lambda: (kube.get("Pod", "echo") or {})["status"]["phase"] == "Succeeded")


@pytest.mark.e2e  # a real cluster, and its kubectl
def test_port_forward_to_a_pod_and_a_services_named_port(
    kube: Kube, tmp_path: Path, forwards: list[subprocess.Popen[str]]
) -> None:
    kube.require_local("the process node")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "site"},
            "data": {"hello.txt": "served from the pod\n"},
        }
    )
    kube.create(
        pod(
            "web",
            {
                "command": ["python", "-u", "-c", SERVE, "0.0.0.0"],
                "workingDir": "/site",
                "ports": [{"name": "web", "containerPort": 8888}],
                "volumeMounts": [{"name": "site", "mountPath": "/site"}],
            },
            volumes=[{"name": "site", "configMap": {"name": "site"}}],
        )
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "web"}],
            },
        }
    )
    logged(kube, "web", "Serving HTTP")
    port = port_forward(kube, forwards, "pod/web", ":8888")
    assert get(port, "/hello.txt") == "served from the pod\n"
    assert get(port, "/hello.txt") == "served from the pod\n"  # one forward, many connections
    # kubectl resolves the Service to its pod and the named port to the target port.
    port = port_forward(kube, forwards, "svc/web", ":http")
    assert get(port, "/hello.txt") == "served from the pod\n"


@pytest.mark.e2e  # a real cluster, and its kubectl
def test_port_forward_to_a_port_nothing_serves_says_so(
    kube: Kube, forwards: list[subprocess.Popen[str]]
) -> None:
    kube.require_local("the process node")
    kube.create(pod("idle", {"command": ["sh", "-c", "echo ready; exec sleep 3600"]}))
    logged(kube, "idle", "ready")
    port = port_forward(kube, forwards, "pod/idle", ":9")
    with pytest.raises(OSError):
        get(port, "/")
    process = forwards[-1]
    process.terminate()
    out, _ = process.communicate(timeout=10)
    assert "nothing answers on port 9 of the pod" in out, out


@pytest.mark.e2e
async def test_websocket_exec_as_kubespawner_does(kube: Kube) -> None:
    """KubeSpawner's tests exec through kubernetes_asyncio's WsApiClient: a WebSocket with
    ``v4.channel.k8s.io``, which the apiserver passes to the node as it is."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    kube.require_local("the process node")
    kube.create(pod("box", {"command": ["sh", "-c", "echo ready; exec sleep 3600"]}))
    logged(kube, "box", "ready")
    configuration = client.Configuration()
    await config.load_kube_config(str(kube.kubeconfig), client_configuration=configuration)

    async def run(command: list[str], tty: bool = False) -> tuple[str, int]:
        async with WsApiClient(configuration=configuration) as ws:
            api = client.CoreV1Api(api_client=ws)
            connection = await api.connect_get_namespaced_pod_exec(
                "box",
                kube.namespace,
                command=command,
                stdin=False,
                stdout=True,
                stderr=True,
                tty=tty,
                _preload_content=False,
            )
            out, code = "", -1
            async with connection as socket:
                async for message in socket:
                    channel, data = message.data[0], message.data[1:]
                    if channel in (1, 2):
                        out += data.decode()
                    elif channel == 3:
                        code = WsApiClient.parse_error_data(data)
            return out, code

    assert await run(["sh", "-c", "echo $HOSTNAME"]) == ("box\n", 0)
    assert await run(["sh", "-c", "exit 7"]) == ("", 7)
    out, code = await run(["tty"], tty=True)
    assert code == 0 and out.strip().startswith("/dev/pts/"), out


@pytest.mark.e2e  # a real cluster, and its kubectl
def test_the_pause_image_pauses_and_ends_on_delete(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(
        pod(
            "placeholder",
            {"image": "registry.k8s.io/pause:3.10"},
            restartPolicy="Always",
        )
    )
    kube.wait_for(
        lambda: (kube.get("Pod", "placeholder") or {}).get("status", {}).get("phase") == "Running",
        timeout=60,
    )
    kube.delete("Pod", "placeholder")  # 30 s of grace: pause ends on SIGTERM, long before
    kube.wait_for(lambda: kube.get("Pod", "placeholder") is None, timeout=20)


@pytest.mark.e2e  # a real cluster, and its kubectl
def test_an_image_whose_entrypoint_is_unknown_says_what_is_missing(kube: Kube) -> None:
    kube.require_local("the process node")
    kube.create(pod("mystery", {"image": "example.org/tool:1"}))

    def waiting() -> dict[str, Any]:
        statuses = (kube.get("Pod", "mystery") or {}).get("status", {}).get(
            "containerStatuses"
        ) or [{}]
        return dict(statuses[0].get("state", {}).get("waiting") or {})

    state = kube.wait_for(lambda: waiting().get("reason") == "CreateContainerError" and waiting())
    assert "example.org/tool:1" in state["message"] and "command" in state["message"]


def test_pause_exits_0_on_sigterm_and_sigint() -> None:
    assert is_pause("registry.k8s.io/pause:3.10") and is_pause("registry.k8s.io/pause")
    assert not is_pause("example.org/pause:1") and not is_pause("registry.k8s.io/pause-x")
    for sig in (signal.SIGTERM, signal.SIGINT):
        process = subprocess.Popen([sys.executable, "-c", PAUSE_PROGRAM])
        # Its SIGTERM handler, set last, is in place (Python catches SIGINT from the start).
        Kube.wait_for(functools.partial(catches, process.pid, signal.SIGTERM), timeout=30)
        assert process.poll() is None  # paused
        process.send_signal(sig)
        assert process.wait(timeout=10) == 0


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (Linux: SigCgt in its status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
    return bool(mask >> (sig - 1) & 1)
