"""The process node agent: ``python -m localk8s.agent --kubeconfig-dir ... --port ...``.

It registers the Node (``local-0`` by default, label ``gpuhub.io/node-agent=process``,
simulated ``nvidia.com/gpu``), publishes the ResourceSlice of its GPUs claimed through DRA
(``--dra-gpus``, numbered after those; :mod:`localk8s.dra`), renews its Lease in ``kube-node-lease`` as a kubelet does,
runs the pods bound to it (:mod:`.pods`) and serves their logs (:mod:`.server`) on a unix
socket (``--socket``) to ``process-kubelet``, which serves the advertised kubelet port
(``--port``) and adds exec, attach and port-forward. The launcher
(``localk8s/launcher.py``) starts both; see docs/cluster.md. Without ``--socket`` it serves
the port itself, logs only (a cluster started by an older launcher).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import Any

from aiohttp import web

from .. import dra
from ..components import KUBERNETES
from . import shim
from .kube import ApiError, Kube
from .logs import timestamp
from .pods import GPU_RESOURCE, ProcessNode
from .server import make_app, tls_context

log = logging.getLogger("gpuhub.node-agent")

LABEL = "gpuhub.io/node-agent"
LEASE_SECONDS = 40
RENEW_SECONDS = 10


def node_object(name: str, gpus: int, cpu: str, memory: str, port: int) -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
    if gpus:
        capacity[GPU_RESOURCE] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                LABEL: "process",
                **(
                    {
                        "nvidia.com/gpu.product": "gpuhub-simulated-GPU",
                        "nvidia.com/gpu.count": str(gpus),
                    }
                    if gpus
                    else {}
                ),
            },
        },
        "spec": {},
        "status": _node_status(capacity, port),
    }


def _node_status(capacity: dict[str, str], port: int) -> dict[str, Any]:
    now = timestamp()[:19] + "Z"

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready", "True", "KubeletReady", "gpuhub process node agent is posting ready status"
            ),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": "127.0.0.1"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": "",
            "osImage": "gpuhub process node",
            "containerRuntimeVersion": "process://local",
            "kubeletVersion": KUBERNETES,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


async def register(kube: Kube, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    try:
        await kube.request(
            "POST", "/api/v1/nodes", {k: v for k, v in node.items() if k != "status"}
        )
    except ApiError as error:
        if error.status != 409:
            raise
        await kube.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": node["metadata"]["labels"]}},
            content_type="application/merge-patch+json",
        )
    await kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": node["status"]},
        content_type="application/merge-patch+json",
    )


async def publish_slice(kube: Kube, name: str, gpus: int, dra_gpus: int) -> None:
    """This node's ResourceSlice, as the NVIDIA driver's kubelet plugin publishes one: its
    DRA GPUs, shareable by memory (none: no slice)."""
    path = f"/apis/{dra.RESOURCE_API}/resourceslices/{dra.slice_name(name)}"
    current = None
    try:
        current = await kube.request("GET", path)
    except ApiError as error:
        if error.status != 404:
            raise
    if not dra_gpus:
        if current is not None:
            await kube.request("DELETE", path)
        return
    node = await kube.request("GET", f"/api/v1/nodes/{name}")
    spec = {"product": dra.SIMULATED_PRODUCT, "gpus": dra_gpus, "shares": "memory"}
    wanted = dra.resource_slice(name, node["metadata"]["uid"], dra.devices(name, spec, gpus))
    wanted["spec"]["pool"]["generation"] = dra.next_generation(current, wanted)
    await kube.request(
        "PATCH",
        path,
        wanted,
        params={"fieldManager": "gpuhub-node-agent", "force": "true"},
        content_type="application/apply-patch+yaml",
    )


async def keep_lease(kube: Kube, name: str, node: dict[str, Any]) -> None:
    """Renew the node's Lease every 10 s and post its status every minute, as a kubelet."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
    ticks = 0
    while True:
        now = timestamp()
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now[:26] + "Z",
            },
        }
        try:
            try:
                await kube.request(
                    "PUT", path, lease | {"metadata": await _lease_meta(kube, path, name)}
                )
            except ApiError as error:
                if error.status != 404:
                    raise
                await kube.request(
                    "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
                )
            if ticks % 6 == 0:
                status = _node_status(
                    node["status"]["capacity"],
                    node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
                )
                await kube.request(
                    "PATCH",
                    f"/api/v1/nodes/{name}/status",
                    {"status": status},
                    content_type="application/merge-patch+json",
                )
        except Exception as error:  # the apiserver may be restarting; keep trying
            log.warning("lease renewal failed: %s", error)
        ticks += 1
        await asyncio.sleep(RENEW_SECONDS)


async def _lease_meta(kube: Kube, path: str, name: str) -> dict[str, Any]:
    current = await kube.request("GET", path)
    return {
        "name": name,
        "namespace": "kube-node-lease",
        "resourceVersion": current["metadata"]["resourceVersion"],
    }


async def main(args: argparse.Namespace) -> None:
    pki = Path(args.pki)
    kube = Kube(args.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    async with kube:
        node = node_object(args.name, args.gpus, args.cpu, args.memory, args.port)
        await register(kube, node)
        await publish_slice(kube, args.name, args.gpus, args.dra_gpus)
        agent = ProcessNode(
            kube,
            args.name,
            Path(args.state),
            gpus=args.gpus,
            dra_gpus=args.dra_gpus,
            ip_range=args.pod_range,
            apiserver_port=int(args.server.rsplit(":", 1)[1]),
            cluster_dns=args.cluster_dns,
            names_file=Path(args.dns_names) if args.dns_names else None,
            shim=shim.install(shim.build(Path(args.state))),
        )
        agent.refresh_names()  # CoreDNS reads the file from the start
        runner = web.AppRunner(make_app(agent), access_log=None)
        await runner.setup()
        site: web.BaseSite
        if args.socket:
            socket = Path(args.socket)
            socket.parent.mkdir(parents=True, exist_ok=True)
            socket.unlink(missing_ok=True)  # a stale one from an agent that ended
            site = web.UnixSite(runner, str(socket))
        else:
            site = web.TCPSite(
                runner,
                "127.0.0.1",
                args.port,
                ssl_context=tls_context(pki / "serving.crt", pki / "serving.key", pki / "ca.crt"),
            )
        await site.start()
        if args.socket:
            socket.chmod(0o600)  # root only: it answers with pods' environments
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        async def watch_pods() -> None:
            async for kind, pod in kube.watch("/api/v1/pods", f"spec.nodeName={args.name}"):
                try:
                    await agent.handle(kind, pod)
                except Exception:
                    log.exception("handling %s of a pod", kind)

        async def watch_services() -> None:
            async for kind, service in kube.watch("/api/v1/services"):
                agent.service_event(kind, service)

        tasks = [
            asyncio.create_task(watch_pods()),
            asyncio.create_task(watch_services()),
            asyncio.create_task(keep_lease(kube, args.name, node)),
        ]
        for task in tasks:  # none of them may end; if one does, say why and stop the node
            task.add_done_callback(lambda t: t.cancelled() or _died(t, stop))
        log.info(
            "node %s ready: %d simulated GPUs, %d more through DRA, kubelet port %d (%s)",
            args.name,
            args.gpus,
            args.dra_gpus,
            args.port,
            f"process-kubelet, agent on {args.socket}" if args.socket else "logs only",
        )
        await stop.wait()
        for task in tasks:
            task.cancel()
        await agent.shutdown()
        with contextlib.suppress(Exception):
            await runner.cleanup()


def _died(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    log.error("the node agent's %s ended", task.get_coro().__qualname__, exc_info=task.exception())
    stop.set()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m localk8s.agent", description=__doc__)
    parser.add_argument("--server", required=True, help="https://127.0.0.1:<apiserver port>")
    parser.add_argument("--pki", required=True, help="the cluster's certificate folder")
    parser.add_argument("--state", required=True, help="where pods' files and logs go")
    parser.add_argument(
        "--port", type=int, required=True, help="the kubelet port the Node advertises"
    )
    parser.add_argument(
        "--socket", default=None, help="serve process-kubelet on this unix socket, not --port"
    )
    parser.add_argument("--name", default="local-0")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--dra-gpus", type=int, default=0, help="GPUs claimed through DRA")
    parser.add_argument(
        "--pod-range", default="127.1.0.0/16", help="the loopback addresses pods get"
    )
    parser.add_argument(
        "--cluster-dns", default=None, help="the cluster DNS address pods' resolv.conf names"
    )
    parser.add_argument(
        "--dns-names", default=None, help="where to write pods' names for cluster DNS"
    )
    parser.add_argument("--cpu", default="16")
    parser.add_argument("--memory", default="64Gi")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main(parse()))
