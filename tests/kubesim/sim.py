"""KubeSim: the whole simulated cluster, and a thread-safe handle for tests.

``KubeSim`` lives on one asyncio loop. ``KubeSimThread`` runs it on a loop of its own in a
daemon thread and offers plain (blocking, thread-safe) methods, so that synchronous tests,
asyncio tests and a JupyterHub child process can all use the same cluster.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from .apiserver import APIServer
from .controllers import (
    GarbageCollector,
    JobController,
    NamespaceController,
    QuotaController,
    Scheduler,
    ServiceAccountController,
)
from .errors import APIError
from .faults import Faults, Rule
from .kubelet import Kubelet, RunLocally
from .kueue import Kueue
from .server import Server
from .storage import VolumeController
from .store import Obj, Store, now
from .training import TrainingOperator

T = TypeVar("T")
CRD_DIR = Path(__file__).parent / "crds"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def node_object(spec: Mapping[str, Any], index: int = 0) -> Obj:
    """A Node from the NODES.yaml form: name, labels, taints, allocatable, unschedulable."""
    name = spec["name"]
    allocatable = {k: str(v) for k, v in (spec.get("allocatable") or {}).items()}
    allocatable.setdefault("pods", "110")
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        **{k: str(v) for k, v in (spec.get("labels") or {}).items()},
    }
    stamp = now()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            **({"taints": list(spec["taints"])} if spec.get("taints") else {}),
            **({"unschedulable": True} if spec.get("unschedulable") else {}),
        },
        "status": {
            "capacity": dict(spec.get("capacity") or allocatable),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                },
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"172.18.{index // 250}.{index % 250 + 2}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.30.0",
                "containerRuntimeVersion": "containerd://1.7.15",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "kubesim",
                "kernelVersion": "6.1.0",
                "kubeProxyVersion": "v1.30.0",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
            "images": [],
        },
    }


def kubeconfig_text(url: str, namespace: str = "default") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubesim", "cluster": {"server": url}}],
            "users": [{"name": "kubesim", "user": {"token": "kubesim"}}],
            "contexts": [
                {
                    "name": "kubesim",
                    "context": {"cluster": "kubesim", "user": "kubesim", "namespace": namespace},
                }
            ],
            "current-context": "kubesim",
        }
    )


class KubeSim:
    """Apiserver, scheduler, kubelets and controllers on the running event loop."""

    def __init__(self, *, history: int = 2000) -> None:
        self.store = Store(history)
        self.api = APIServer(self.store)
        self.faults = Faults()
        self.kubelet = Kubelet(self.store)
        self.scheduler = Scheduler(self.store)
        self.jobs = JobController(self.store)
        self.gc = GarbageCollector(self.store, self.api)
        self.namespaces = NamespaceController(self.store, self.api)
        self.training = TrainingOperator(self.store)
        self.kueue = Kueue(self.store)
        self.service_accounts = ServiceAccountController(self.store)
        self.quotas = QuotaController(self.store)
        self.volumes = VolumeController(self.store)
        self.server = Server(self.store, self.api, self.kubelet, self.faults)
        self.server.aggregated["visibility.kueue.x-k8s.io"] = self.kueue.visibility_request
        self._runner: web.AppRunner | None = None
        self.url = ""
        self._node_index = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0, crds: bool = True) -> str:
        for name in DEFAULT_NAMESPACES:
            self.api.create(self.store.by_kind("Namespace"), None, {"metadata": {"name": name}})
            self.service_accounts.ensure(name)  # a running cluster has them already
        if crds:
            for path in sorted(CRD_DIR.glob("*.yaml")):
                self.api.create(
                    self.store.by_kind("CustomResourceDefinition"),
                    None,
                    yaml.safe_load(path.read_text()),
                )
        self._runner = web.AppRunner(
            self.server.app, handle_signals=False, access_log=None, shutdown_timeout=1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        actual = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{host}:{actual}"
        return self.url

    async def stop(self) -> None:
        self.server.drop_watches()
        await self.kubelet.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- cluster shape ----------------------------------------------------------------------
    def add_node(self, spec: Mapping[str, Any]) -> Obj:
        self._node_index += 1
        return self.store.create(self.store.by_kind("Node"), node_object(spec, self._node_index))

    def add_nodes(self, specs: Iterable[Mapping[str, Any]]) -> None:
        for spec in specs:
            self.add_node(spec)

    def remove_node(self, name: str) -> None:
        rt = self.store.by_kind("Node")
        self.store.remove(rt, self.store.get(rt, "", name))

    def add_running_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        requests: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
    ) -> Obj:
        """Place a Running pod directly (bulk set-up for benchmarks): no validation, no kubelet."""
        pod = {
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {
                "nodeName": node,
                "schedulerName": "default-scheduler",
                "restartPolicy": "Always",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "resources": {
                            "requests": {k: str(v) for k, v in requests.items()},
                            "limits": {k: str(v) for k, v in requests.items()},
                        },
                    }
                ],
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [],
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "state": {"running": {"startedAt": now()}},
                        "restartCount": 0,
                        "image": "busybox:1.36",
                        "imageID": "",
                    }
                ],
            },
        }
        return self.store.create(self.store.by_kind("Pod"), pod, namespace)

    def install_crd(self, crd: Mapping[str, Any]) -> Obj:
        return self.api.create(
            self.store.by_kind("CustomResourceDefinition"), None, copy.deepcopy(dict(crd))
        )


class KubeSimThread:
    """A KubeSim on its own thread and loop, with blocking thread-safe controls for tests."""

    def __init__(
        self,
        nodes: Iterable[Mapping[str, Any]] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig: str | Path | None = None,
        history: int = 2000,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kubesim", daemon=True)
        self._thread.start()
        self.sim: KubeSim = self.call(lambda: KubeSim(history=history))
        self.url = self.run(self.sim.start(host, port))
        self.call(lambda: self.sim.add_nodes(list(nodes)))
        self.kubeconfig = Path(kubeconfig) if kubeconfig else None
        if self.kubeconfig is not None:
            self.kubeconfig.write_text(kubeconfig_text(self.url))

    # -- plumbing ---------------------------------------------------------------------------
    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 60) -> T:
        """Run ``fn()`` on the simulator's loop (where the store lives) and return its result."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.run(self.sim.stop(), timeout=30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)

    # -- cluster ----------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        allocatable: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        taints: list[Mapping[str, Any]] | None = None,
        unschedulable: bool = False,
    ) -> Obj:
        spec = {
            "name": name,
            "allocatable": dict(allocatable),
            "labels": dict(labels or {}),
            "taints": list(taints or []),
            "unschedulable": unschedulable,
        }
        return self.call(lambda: self.sim.add_node(spec))

    def remove_node(self, name: str) -> None:
        self.call(lambda: self.sim.remove_node(name))

    # -- reading and writing objects --------------------------------------------------------------
    def _rt(self, kind: str, group: str | None = None):  # type: ignore[no-untyped-def]
        return self.sim.store.by_kind(kind, group)

    def get(
        self, kind: str, name: str, namespace: str = "default", group: str | None = None
    ) -> Obj | None:
        """A copy of the stored object, or None (``kind`` as in the object, e.g. ``"Pod"``)."""
        return self.call(
            lambda: copy.deepcopy(self.sim.store.peek(self._rt(kind, group), namespace, name))
        )

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        group: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        def read() -> list[Obj]:
            items = self.sim.store.list(self._rt(kind, group), namespace)
            if labels:
                items = [
                    o
                    for o in items
                    if all(
                        (o["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items()
                    )
                ]
            return copy.deepcopy(items)

        return self.call(read)

    def create(self, obj: Mapping[str, Any], namespace: str | None = None) -> Obj:
        """Create through the apiserver's own path (defaulting and validation included)."""
        group, _, _version = obj["apiVersion"].rpartition("/")
        return self.call(
            lambda: copy.deepcopy(
                self.sim.api.create(
                    self._rt(obj["kind"], group), namespace, copy.deepcopy(dict(obj))
                )
            )
        )

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str = "default",
        group: str | None = None,
        **options: Any,
    ) -> Obj:
        return self.call(
            lambda: copy.deepcopy(
                self.sim.api.delete(self._rt(kind, group), namespace, name, options)
            )
        )

    def events(self, namespace: str = "default", involved: str | None = None) -> list[Obj]:
        """Events in ``namespace`` (of the object named ``involved``), oldest first."""
        items = self.list("Event", namespace)
        if involved is not None:
            items = [e for e in items if e["involvedObject"]["name"] == involved]
        return sorted(items, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = 30,
        interval: float = 0.05,
        message: str = "",
    ) -> T:
        """Poll ``predicate()`` (from the test's thread) until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(message or f"condition not met in {timeout}s")
            time.sleep(interval)

    # -- containers and jobs ------------------------------------------------------------------
    def finish_pod(
        self, name: str, namespace: str = "default", exit_code: int = 0, logs: str = ""
    ) -> None:
        """The simulated containers of a Running pod exit with ``exit_code``, after printing ``logs``."""
        self.call(lambda: self.sim.kubelet.finish(namespace, name, exit_code, logs))

    def finish_job(
        self,
        name: str,
        namespace: str = "default",
        succeed: bool = True,
        logs: str = "",
        exit_code: int | None = None,
        after: float = 0.0,
    ) -> None:
        """Make the Job's pods (running now and created later) exit: 0 if ``succeed`` else 1."""
        code = exit_code if exit_code is not None else (0 if succeed else 1)

        def cue() -> None:
            self.sim.kubelet.cues[(namespace, name)] = (code, after, logs)
            for pod in self.sim.store.list(self._rt("Pod"), namespace):
                labels = pod["metadata"].get("labels") or {}
                owner = labels.get("batch.kubernetes.io/job-name") or labels.get(
                    "training.kubeflow.org/job-name"
                )
                if owner == name and pod["status"].get("phase") == "Running":
                    self.sim.kubelet.finish(namespace, pod["metadata"]["name"], code, logs)

        self.call(cue)

    def write_log(
        self, pod: str, text: str, namespace: str = "default", container: str | None = None
    ) -> None:
        def write() -> None:
            obj = self.sim.store.get(self._rt("Pod"), namespace, pod)
            name = container or obj["spec"]["containers"][0]["name"]
            self.sim.kubelet.log(namespace, pod, name).write(text)

        self.call(write)

    def set_pull_seconds(self, image: str, seconds: float) -> None:
        self.call(lambda: self.sim.kubelet.pull_seconds.__setitem__(image, seconds))

    def forget_images(self) -> None:
        """Nodes forget the images they pulled: the next pods pull again."""

        def forget() -> None:
            rt = self.sim.store.by_kind("Node")
            for node in self.sim.store.list(rt):
                self.sim.store.mutate(
                    rt, "", node["metadata"]["name"], lambda o: o["status"].update(images=[])
                )

        self.call(forget)

    def fail_image(self, image: str) -> None:
        """Pulls of ``image`` fail (ErrImagePull, then ImagePullBackOff)."""
        self.call(lambda: self.sim.kubelet.failing_images.add(image))

    def run_locally(self, predicate: RunLocally | Iterable[str] | None) -> None:
        """Which containers really run as local processes: a predicate ``(pod, container)``, or
        executable names (``{"jupyterhub-singleuser"}``); None for none."""
        if predicate is None:
            chosen: RunLocally = lambda pod, container: False  # noqa: E731
        elif callable(predicate):
            chosen = predicate
        else:
            names = set(predicate)

            def chosen(pod: Obj, container: Obj) -> bool:
                argv = [*(container.get("command") or []), *(container.get("args") or [])]
                return bool(argv) and Path(argv[0]).name in names

        self.call(lambda: setattr(self.sim.kubelet, "run_locally", chosen))

    # -- faults -----------------------------------------------------------------------------------
    def fail_requests(
        self,
        status: int = 500,
        *,
        nth: int = 1,
        count: int | None = 1,
        method: str | None = None,
        path: str | None = None,
        watch: bool | None = None,
    ) -> Rule:
        """The ``nth`` matching request from now (and ``count - 1`` more) gets HTTP ``status``."""
        return self.call(
            lambda: self.sim.faults.error(
                status, nth=nth, count=count, method=method, path=path, watch=watch
            )
        )

    def slow_requests(
        self,
        seconds: float,
        *,
        method: str | None = None,
        path: str | None = None,
        count: int | None = None,
        watch: bool | None = None,
    ) -> Rule:
        return self.call(
            lambda: self.sim.faults.slow(
                seconds, method=method, path=path, count=count, watch=watch
            )
        )

    def clear_faults(self) -> None:
        self.call(self.sim.faults.clear)

    def drop_watches(self, abort: bool = False) -> int:
        """End all open watches now (``abort``: cut connections mid-stream)."""
        return self.call(lambda: self.sim.server.drop_watches(abort))

    def compact(self) -> None:
        """Forget watch history: resuming from any older resourceVersion gets 410 Gone."""
        self.call(self.sim.store.compact)

    @property
    def requests(self) -> int:
        return self.sim.faults.requests

    def set_service_account_delay(self, seconds: float) -> None:
        """How long after a namespace its ``default`` ServiceAccount appears (default 0.05 s)."""
        self.call(lambda: setattr(self.sim.service_accounts, "delay", seconds))

    def set_provisioning(self, seconds: float | None) -> None:
        """How long the simulated provisioner takes to bind a new claim (None: it never does)."""
        self.call(lambda: setattr(self.sim.volumes, "provision_seconds", seconds))

    def set_bookmark_interval(self, seconds: float) -> None:
        self.call(lambda: setattr(self.sim.server, "bookmark_seconds", seconds))


def load_nodes(path: str | Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(Path(path).read_text()) or []
    if isinstance(data, dict):
        data = data.get("nodes") or []
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of nodes")
    return data


__all__ = ["APIError", "KubeSim", "KubeSimThread", "kubeconfig_text", "load_nodes", "node_object"]
