"""The kubelet's side of a pod's life that clients watch: readiness, back-off, the end, exec.

References: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/ (readiness
probes and the Ready condition; container states; since v1.27 a deleted pod's containers are
reported terminated and the pod reaches a terminal phase before it is removed),
https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/
(``Unhealthy`` events), the kubelet's ``BackOff`` event wording for CrashLoopBackOff, and the
apiserver's ``pods/exec`` connect checks (``cannot exec into a container in a completed pod``,
``pod ... does not have a host assigned``, ``Upgrade request required``) with the kubelet's
``container not found`` behind them.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def ready(kubesim: Any, name: str) -> str | None:
    conditions = (kubesim.get("Pod", name) or {}).get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_readiness_probe_holds_ready_until_it_passes(kubesim, kube_api):
    """A local HTTP server becomes Ready once its httpGet probe answers; a probe on a port
    nobody listens on keeps the pod unready with Unhealthy events."""
    kubesim.run_locally(lambda p, c: p["metadata"]["name"].startswith("web"))
    port = free_port()
    v1 = client.CoreV1Api(kube_api)

    def server(name: str, probe_port: int) -> dict[str, Any]:
        body = pod(name, restartPolicy="Never")
        body["spec"]["containers"][0].update(
            command=[sys.executable, "-m", "http.server", str(port), "--bind", "0.0.0.0"],
            ports=[{"name": "http", "containerPort": port}],
            readinessProbe={
                "httpGet": {"path": "/", "port": "http" if probe_port == port else probe_port},
                "periodSeconds": 1,
                "failureThreshold": 1,
            },
        )
        return body

    await v1.create_namespaced_pod("default", server("web", port))
    kubesim.wait_for(
        lambda: (kubesim.get("Pod", "web") or {}).get("status", {}).get("phase") == "Running"
    )
    kubesim.wait_for(lambda: ready(kubesim, "web") == "True", timeout=15)
    await v1.create_namespaced_pod("default", server("web-bad", free_port()))
    unhealthy = kubesim.wait_for(
        lambda: [e for e in kubesim.events(involved="web-bad") if e["reason"] == "Unhealthy"],
        timeout=15,
    )
    assert unhealthy[0]["message"].startswith("Readiness probe failed: Get ")
    assert ready(kubesim, "web-bad") == "False"


async def test_simulated_container_with_probe_turns_ready(kubesim, kube_api):
    body = pod("sim")
    body["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["true"]},
        "initialDelaySeconds": 1,
    }
    await client.CoreV1Api(kube_api).create_namespaced_pod("default", body)
    kubesim.wait_for(lambda: ready(kubesim, "sim") == "False")
    kubesim.wait_for(lambda: ready(kubesim, "sim") == "True", timeout=10)


async def test_final_deleted_event_shows_containers_terminated(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("bye"))
    kubesim.wait_for(lambda: kubesim.get("Pod", "bye")["status"].get("phase") == "Running")
    listed = await v1.list_namespaced_pod("default")
    events: list[dict[str, Any]] = []

    async def follow() -> None:
        async with watch.Watch().stream(
            v1.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            _request_timeout=20,
        ) as stream:
            async for event in stream:
                events.append(event)
                if event["type"] == "DELETED":
                    return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.2)
    await v1.delete_namespaced_pod("bye", "default", grace_period_seconds=1)
    await asyncio.wait_for(task, 20)
    final = events[-1]["object"]
    state = final.status.container_statuses[0].state
    assert state.running is None and state.terminated.exit_code == 143
    assert final.status.phase == "Failed"


async def test_crash_loop_back_off_event(kubesim, kube_api):
    await client.CoreV1Api(kube_api).create_namespaced_pod("default", pod("crash"))
    created = kubesim.wait_for(
        lambda: (p := kubesim.get("Pod", "crash")) and p["status"].get("phase") == "Running" and p
    )
    kubesim.finish_pod("crash", exit_code=1)
    event = kubesim.wait_for(
        lambda: next(
            (e for e in kubesim.events(involved="crash") if e["reason"] == "BackOff"), None
        )
    )
    assert event["type"] == "Warning"
    assert event["message"] == (
        f"Back-off restarting failed container main in pod crash_default({created['metadata']['uid']})"
    )


async def test_exec_answers_as_the_apiserver_does(kubesim, kube_api):
    v1 = client.CoreV1Api(kube_api)
    base = f"{kubesim.url}/api/v1/namespaces/default/pods"
    await v1.create_namespaced_pod(
        "default", pod("nowhere", nodeSelector={"kubernetes.io/hostname": "absent"})
    )
    await v1.create_namespaced_pod("default", pod("done", restartPolicy="Never"))
    kubesim.wait_for(lambda: kubesim.get("Pod", "done")["status"].get("phase") == "Running")
    kubesim.finish_pod("done")
    kubesim.wait_for(lambda: kubesim.get("Pod", "done")["status"].get("phase") == "Succeeded")
    kubesim.fail_image("broken:1")
    broken = pod("broken")
    broken["spec"]["containers"][0]["image"] = "broken:1"
    await v1.create_namespaced_pod("default", broken)
    kubesim.wait_for(
        lambda: any(e["reason"] == "BackOff" for e in kubesim.events(involved="broken"))
    )
    await v1.create_namespaced_pod("default", pod("up"))
    kubesim.wait_for(lambda: kubesim.get("Pod", "up")["status"].get("phase") == "Running")
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket"}
    cases = [
        (
            "done",
            {},
            400,
            "cannot exec into a container in a completed pod; current phase is Succeeded",
        ),
        ("nowhere", {}, 400, "pod nowhere does not have a host assigned"),
        ("broken", {"container": "other"}, 400, "container other is not valid for pod broken"),
        ("broken", {}, 400, "Upgrade request required"),
        ("broken", {"upgrade": True}, 500, 'container not found ("main")'),
        (
            "up",
            {"upgrade": True},
            501,
            "kubesim runs exec only in containers it runs as local processes (run_locally)",
        ),
    ]
    async with aiohttp.ClientSession() as http:
        for name, params, code, message in cases:
            query = {"command": "ls", **{k: v for k, v in params.items() if k != "upgrade"}}
            headers = upgrade if params.get("upgrade") else {}
            async with http.post(f"{base}/{name}/exec", params=query, headers=headers) as response:
                assert response.status == code, (name, await response.text())
                assert (await response.json())["message"] == message


async def test_exec_into_a_local_container_streams_over_the_channel_protocol(kubesim):
    """For a container kubesim runs as a local process, exec runs the command beside it with the
    container's environment: stdout on channel 1, the exit Status on channel 3 (v4.channel)."""
    from kubernetes_asyncio import config
    from kubernetes_asyncio.stream import WsApiClient

    kubesim.run_locally(lambda p, c: p["metadata"]["name"] == "shell")
    body = pod("shell", restartPolicy="Never")
    body["spec"]["containers"][0].update(
        command=[sys.executable, "-c", "import time; time.sleep(60)"],
        env=[{"name": "GREETING", "value": "hello"}],
    )
    kubesim.create({"apiVersion": "v1", "kind": "Pod", **body})
    kubesim.wait_for(lambda: kubesim.get("Pod", "shell")["status"].get("phase") == "Running")
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(kubesim.kubeconfig), client_configuration=configuration
    )
    async with WsApiClient(configuration=configuration) as ws_api:
        v1 = client.CoreV1Api(api_client=ws_api)
        script = (
            "import os, sys; print(os.environ['GREETING']); sys.stderr.write('oops'); sys.exit(3)"
        )
        output = await v1.connect_get_namespaced_pod_exec(
            "shell",
            "default",
            command=[sys.executable, "-c", script],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
        assert output == "hello\noops"
        channels: dict[int, bytes] = {}
        async with await v1.connect_get_namespaced_pod_exec(
            "shell",
            "default",
            command=[sys.executable, "-c", script],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
        ) as ws:
            async for message in ws:
                channels[message.data[0]] = channels.get(message.data[0], b"") + message.data[1:]
        assert WsApiClient.parse_error_data(channels[3]) == 3
        assert channels[1] == b"hello\n"
