"""A real Kubernetes for the benchmarks, filled fast, with its memory watched.

The test cluster's launcher (``localk8s``, docs/cluster.md) starts one at a root of its
own, with no nodes of its own file: a full cluster (controllers, scheduler, the process node,
the operators) where spawns must really run, or a *bare* one (etcd, kube-apiserver and kwok,
no node leases) for a scale run, where every other component would cache every pod too.

Nodes are kwok's (:func:`localk8s.nodes.node_object`); pods are created already bound
(``spec.nodeName``), so no scheduler stands in the way, and kwok marks them Running. Objects go
through the apiserver's REST API with many requests in flight, as the cluster's admin (whom
API Priority and Fairness exempts). While it grows, :class:`MemoryWatch` samples the RSS of
the cluster's processes and the machine's used memory, and filling stops at the limit.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from harness.cluster import A100_PRODUCT, GPU_TOLERATION
from localk8s.kubeapi import wait_for
from localk8s.launcher import Launcher, down
from localk8s.nodes import KWOK_TOLERATION, node_object, schedulable

NAMESPACE = "bench"
MiB = 2**20
GiB = 2**30
RETRY = (429, 500, 502, 503, 504)
Request = tuple[str, str, dict[str, Any]]  # method, path, body


class MemoryWatch:
    """The RSS of the cluster's processes (peaks kept) and the machine's used memory, sampled
    every ``interval`` seconds in a thread; ``exceeded`` names the limit once it is crossed."""

    def __init__(self, pids: dict[str, int], max_used_gib: float, interval: float = 2.0) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.max_used_gib = max_used_gib
        self.interval = interval
        self.rss_mb: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}
        self.used_gib = 0.0
        self.peak_used_gib = 0.0
        self.exceeded: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def sample(self) -> None:
        for name, process in self.processes.items():
            try:
                rss = process.memory_info().rss / MiB
            except psutil.Error:
                continue
            self.rss_mb[name] = rss
            self.peak_mb[name] = max(rss, self.peak_mb.get(name, 0.0))
        self.used_gib = psutil.virtual_memory().used / GiB
        self.peak_used_gib = max(self.peak_used_gib, self.used_gib)
        if self.used_gib > self.max_used_gib and self.exceeded is None:
            biggest = sorted(self.rss_mb.items(), key=lambda kv: -kv[1])[:2]
            self.exceeded = (
                f"the machine's used memory reached {self.used_gib:.1f} GiB, over the "
                f"{self.max_used_gib:.0f} GiB this run may use ("
                + ", ".join(f"{n} {mb / 1024:.1f} GiB" for n, mb in biggest)
                + ")"
            )

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class BenchCluster:
    """``with BenchCluster(bare=True) as cluster:``: a cluster of its own, gone afterwards."""

    def __init__(
        self,
        *,
        bare: bool,
        gpus: int = 4,
        max_used_gib: float = 15.0,
        root: Path | None = None,
    ) -> None:
        """``root``: keep the cluster there afterwards, and use the one already running there
        (filling 150,000 pods takes most of an hour; later runs reuse them)."""
        self.bare = bare
        self.gpus = gpus
        self.max_used_gib = max_used_gib
        self.keep = root is not None
        self.folder = root or Path(tempfile.mkdtemp(prefix="gpuhub-bench-cluster-"))
        self.root = self.folder / "cluster"
        self.up_s = 0.0

    def __enter__(self) -> BenchCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        nodes = self.folder / "nodes.yaml"
        nodes.write_text("[]\n")  # the benchmark makes its nodes
        start = time.perf_counter()
        launcher = Launcher(self.root, nodes, self.gpus, quiet=True, bare=self.bare)
        try:
            launcher.up()
        except BaseException:
            self._remove()
            raise
        self.up_s = time.perf_counter() - start
        self.cluster = launcher.cluster
        self.api = self.cluster.api()
        self.kubeconfig = self.cluster.kubeconfig
        state = self.cluster.state() or {}
        self.watch = MemoryWatch(state.get("pids", {}), self.max_used_gib)
        self.watch.start()
        self.namespace(NAMESPACE)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.watch.stop()
        if not self.keep:
            self._remove()

    def _remove(self) -> None:
        if self.keep:
            return
        down(self.root, quiet=True)
        shutil.rmtree(self.folder, ignore_errors=True)

    def namespace(self, name: str) -> None:
        """A namespace whose ``default`` ServiceAccount exists (made here on a bare cluster,
        which runs no controller to make it), so that pods are admitted."""
        self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        if self.bare:
            self.api.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name},
                }
            )
        wait_for(
            "the namespace's ServiceAccount",
            lambda: self.api.get("v1", "ServiceAccount", "default", name),
        )

    # -- filling -------------------------------------------------------------------------
    def send(self, requests: Iterable[Request], concurrency: int = 48) -> int:
        """Send ``requests`` in order, ``concurrency`` at a time, until they run out or the
        memory watch says stop; returns how many were done (always the first ones)."""
        return asyncio.run(self._send(iter(requests), concurrency))

    async def _send(self, requests: Iterator[Request], concurrency: int) -> int:
        import aiohttp

        context = ssl.create_default_context(cafile=str(self.api.ca))
        context.load_cert_chain(str(self.api.cert), str(self.api.key))
        done = 0
        connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
        async with aiohttp.ClientSession(self.api.server, connector=connector) as session:

            async def worker() -> None:
                nonlocal done
                while self.watch.exceeded is None:
                    try:
                        method, path, body = next(requests)
                    except StopIteration:
                        return
                    await _request(session, method, path, body)
                    done += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    def add_nodes(self, entries: list[dict[str, Any]], concurrency: int = 48) -> int:
        """kwok nodes from nodes-file entries: created, then their allocatable set (a Node's
        status is not taken on create); returns how many exist."""
        nodes = [node_object(e) for e in entries]
        created = self.send((("POST", "/api/v1/nodes", n) for n in nodes), concurrency)
        made = nodes[:created]
        statuses = (
            ("PATCH", f"/api/v1/nodes/{n['metadata']['name']}/status", {"status": n["status"]})
            for n in made
        )
        created = min(created, self.send(statuses, concurrency))
        if self.bare:
            # The apiserver taints every new node not-ready; with no node lifecycle controller
            # to lift the taint once kwok reports the node Ready, lift it here.
            taints = (
                ("PATCH", f"/api/v1/nodes/{n['metadata']['name']}", {"spec": n["spec"]})
                for n in made[:created]
            )
            created = min(created, self.send(taints, concurrency))
        return created

    def pod_path(self, namespace: str = NAMESPACE) -> str:
        return f"/api/v1/namespaces/{namespace}/pods"

    # -- waiting -------------------------------------------------------------------------
    def ready_nodes(self) -> int:
        """How many nodes are Ready and schedulable (a paged LIST)."""
        ready, token = 0, None
        while True:
            params = {"limit": 1000, **({"continue": token} if token else {})}
            page = self.api.request("GET", "/api/v1/nodes", params=params, timeout=120)
            ready += sum(map(schedulable, page["items"]))
            token = page["metadata"].get("continue")
            if not token:
                return ready

    def all_running(self, namespace: str = NAMESPACE) -> bool:
        """No pod of ``namespace`` is still Pending (kwok has run them all)."""
        page = self.api.request(
            "GET",
            self.pod_path(namespace),
            params={"fieldSelector": "status.phase=Pending", "limit": 1},
            timeout=120,
        )
        return not page["items"]

    def count(self, path: str) -> int:
        """How many objects a LIST of ``path`` would return (one object asked for)."""
        page = self.api.request("GET", path, params={"limit": 1}, timeout=120)
        return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)

    def etcd_db_mb(self) -> float:
        """The size of etcd's database file."""
        files = list((self.root / "etcd").rglob("db"))
        return sum(f.stat().st_size for f in files) / MiB


async def _request(session: Any, method: str, path: str, body: dict[str, Any]) -> None:
    """One request, retried on overload or a dropped connection; a create that finds its
    object made by an earlier try is done."""
    import aiohttp

    content_type = "application/json" if method == "POST" else "application/merge-patch+json"
    data = json.dumps(body)
    for attempt in range(8):
        try:
            async with session.request(
                method, path, data=data, headers={"Content-Type": content_type}
            ) as response:
                if response.status < 300 or (method == "POST" and response.status == 409):
                    await response.read()
                    return
                text = await response.text()
                if response.status not in RETRY:
                    raise RuntimeError(f"{method} {path}: HTTP {response.status}: {text[:300]}")
        except (TimeoutError, aiohttp.ClientConnectionError):
            pass
        await asyncio.sleep(min(0.2 * 2**attempt, 5))
    raise RuntimeError(f"{method} {path}: the apiserver kept refusing or dropping it")


def rss_line(watch: MemoryWatch, names: Iterable[str]) -> str:
    """``etcd 512 MiB, kube-apiserver 2.1 GiB`` for the named processes (peaks)."""

    def size(mb: float) -> str:
        return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"

    return ", ".join(f"{n} {size(watch.peak_mb[n])}" for n in names if n in watch.peak_mb)


# -- the benchmarks' cluster: eight-GPU A100 nodes, loaded --------------------------------------


def gpu_node(n: int) -> dict[str, Any]:
    """Node ``gpu-NNNN`` as a nodes-file entry: eight A100s, tainted for GPU pods only."""
    return {
        "name": f"gpu-{n:04d}",
        "labels": {"nvidia.com/gpu.product": A100_PRODUCT},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "allocatable": {"cpu": "96", "memory": "1Ti", "pods": 250, "nvidia.com/gpu": 8},
    }


def load_pod(node: int, name: str, gpu: bool, labels: dict[str, str] | None = None) -> Request:
    """A pod already bound to ``gpu-NNNN`` (one CPU, 2 GiB, and one GPU if ``gpu``)."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}}
    if gpu:
        resources["limits"] = {"nvidia.com/gpu": "1"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeName": f"gpu-{node:04d}",
            "tolerations": [GPU_TOLERATION, KWOK_TOLERATION],
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [{"name": "main", "image": "bench:1", "resources": resources}],
        },
    }
    return ("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)


def capacity_of(nodes: int, pods: int, per_node: int) -> tuple[int, int, int]:
    """(free, total, largest free on one node) once the first ``pods`` pods of
    :func:`load_pod`'s layout exist: node *n* holds ``per_node`` pods, *n* mod 9 of them with
    a GPU, filled node after node."""
    free = largest = 0
    for n in range(nodes):
        placed = min(max(pods - n * per_node, 0), per_node)
        left = 8 - min(n % 9, placed)
        free += left
        largest = max(largest, left)
    return free, nodes * 8, largest
