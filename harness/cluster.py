"""The Kubernetes cluster the tests run against, and how a test uses it.

The cluster is the one ``GPUHUB_TEST_KUBECONFIG`` names (``make test`` starts the local one,
``make cluster``, and names it), else the local cluster at ``.cluster``, started here if it
is not running (it is left running for the next run; ``make cluster-down`` stops it). The
same tests run unchanged against any cluster given that variable; the few that need what
only the local cluster has (kwok's fake nodes, the process node, its fault proxy) say so in
one line and skip elsewhere.

Fixtures (registered by ``tests/conftest.py``):

``kube``          a :class:`Kube` for this test: its own namespace (deleted after, waiting
                  until its pods are gone, so the next test sees the cluster's full
                  capacity), and the cluster-scoped objects it creates are deleted too.
``module_kube``   the same for a whole module (a hub the module shares spawns there).
``kube_api``      an async ``kubernetes_asyncio`` ApiClient for the cluster.
``kube_faults``   a :class:`~harness.kube_faults.FaultProxy` in front of the apiserver.

The local cluster's fake GPU nodes are those of ``localk8s/nodes.yaml``: ``cpu-0``,
``a100-0`` and ``a100-1`` (8 ``nvidia.com/gpu`` each) and ``a100-mig-0`` (7
``nvidia.com/mig-1g.10gb``), all with kwok's taint; pods that should land there tolerate it
(:data:`KWOK_TOLERATION`). The process node ``local-0`` (4 simulated ``nvidia.com/gpu``,
label ``gpuhub.io/node-agent=process``) really runs what lands on it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from harness import e2e
from localk8s.kubeapi import KubeAPI, KubeError
from localk8s.nodes import (
    EXIT_CODE_ANNOTATION,
    KWOK_TOLERATION,
    MISSING_IMAGE_SUFFIX,
    node_object,
    schedulable,
)

T = TypeVar("T")

A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
PROCESS_NODE_SELECTOR = {"gpuhub.io/node-agent": "process"}
__all__ = ["KWOK_TOLERATION", "MISSING_IMAGE_SUFFIX"]

# The apiVersion of each kind a test names by kind alone.
API_VERSIONS = {
    **dict.fromkeys(
        (
            "Pod",
            "Service",
            "ConfigMap",
            "Secret",
            "Event",
            "Namespace",
            "Node",
            "ServiceAccount",
            "PersistentVolumeClaim",
            "ResourceQuota",
            "LimitRange",
            "Endpoints",
        ),
        "v1",
    ),
    "Job": "batch/v1",
    "PyTorchJob": "kubeflow.org/v1",
    "TFJob": "kubeflow.org/v1",
    "TrainJob": "trainer.kubeflow.org/v1alpha1",
    "ClusterTrainingRuntime": "trainer.kubeflow.org/v1alpha1",
    "TrainingRuntime": "trainer.kubeflow.org/v1alpha1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    **dict.fromkeys(
        ("Workload", "ClusterQueue", "LocalQueue", "ResourceFlavor"), "kueue.x-k8s.io/v1beta2"
    ),
    "NetworkPolicy": "networking.k8s.io/v1",
    **dict.fromkeys(
        ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"), "rbac.authorization.k8s.io/v1"
    ),
    "PriorityClass": "scheduling.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
}

# The label that names the pods of each kind of job.
POD_LABEL_OF = {
    "Job": "batch.kubernetes.io/job-name",
    "PyTorchJob": "training.kubeflow.org/job-name",
    "TFJob": "training.kubeflow.org/job-name",
    "TrainJob": "jobset.sigs.k8s.io/jobset-name",
    "JobSet": "jobset.sigs.k8s.io/jobset-name",
}


def kubeconfig_path() -> Path:
    """The cluster's kubeconfig, starting the local cluster if nothing names another."""
    named = os.environ.get("GPUHUB_TEST_KUBECONFIG")
    if named:
        return Path(named)
    from localk8s.launcher import DEFAULT_ROOT, ClusterError, Launcher
    from localk8s.nodes import DEFAULT_NODES_FILE

    launcher = Launcher(DEFAULT_ROOT, DEFAULT_NODES_FILE, gpus=4, quiet=True)
    try:
        launcher.up()
    except ClusterError as error:
        pytest.exit(f"the test cluster did not start: {error}", returncode=3)
    return launcher.cluster.kubeconfig


def api_from_kubeconfig(path: Path) -> KubeAPI:
    """A :class:`KubeAPI` for the first user of a kubeconfig (certificate files, inline
    data or a token)."""
    config = yaml.safe_load(path.read_text())
    context_name = config.get("current-context")
    context = next(
        (c["context"] for c in config.get("contexts", []) if c["name"] == context_name),
        config["contexts"][0]["context"],
    )
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    folder = path.parent / f".{path.name}.files"

    def material(key: str) -> Path | None:
        if f"{key}-data" in user or f"{key}-data" in cluster:
            folder.mkdir(exist_ok=True)
            target = folder / key
            target.write_bytes(base64.b64decode(user.get(f"{key}-data") or cluster[f"{key}-data"]))
            return target
        value = user.get(key) or cluster.get(key)
        return Path(value) if value else None

    api = KubeAPI(
        cluster["server"],
        material("certificate-authority") or Path(),
        material("client-certificate") or Path(),
        material("client-key") or Path(),
    )
    if not user.get("client-certificate") and not user.get("client-certificate-data"):
        api.session.cert = None
    if user.get("token"):
        api.session.headers["Authorization"] = f"Bearer {user['token']}"
    return api


@dataclass
class Kube:
    """A test's handle on the cluster: its namespace, and controls (create, wait, finish a
    job's pods, add a node) done with real API calls. Every call blocks; wrap it in ``asyncio.to_thread`` from async tests."""

    kubeconfig: Path
    api: KubeAPI
    namespace: str
    local: bool  # the local cluster: kwok's fake nodes and the process node are there
    _cluster_scoped: list[tuple[str, str]] = field(default_factory=list)

    # -- objects -------------------------------------------------------------------------
    @staticmethod
    def api_version(kind: str, api_version: str | None = None) -> str:
        if api_version:
            return api_version
        try:
            return API_VERSIONS[kind]
        except KeyError:
            raise ValueError(f"name the apiVersion of {kind}: api_version=...") from None

    def _path(
        self,
        kind: str,
        name: str = "",
        namespace: str | None = None,
        api_version: str | None = None,
    ) -> str:
        return self.api.path(
            self.api_version(kind, api_version), kind, name, namespace or self.namespace
        )

    def get(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return self.api.request("GET", self._path(kind, name, namespace, api_version))  # type: ignore[no-any-return]
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        api_version: str | None = None,
        all_namespaces: bool = False,
    ) -> list[dict[str, Any]]:
        version = self.api_version(kind, api_version)
        path = self.api.path(version, kind, "", namespace or self.namespace)
        if all_namespaces:
            path = self.api.path(version, kind, "", "x").replace("/namespaces/x", "")
        params = (
            {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else {}
        )
        return list(self.api.request("GET", path, params=params)["items"])

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        version = obj["apiVersion"]
        _, namespaced = self.api._resource(version, obj["kind"])
        if namespaced:
            meta.setdefault("namespace", namespace or self.namespace)
        else:
            self._cluster_scoped.append((version, obj["kind"] + "/" + meta["name"]))
        path = self.api.path(version, obj["kind"], "", meta.get("namespace", ""))
        return self.api.request("POST", path, json=obj)  # type: ignore[no-any-return]

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        _, namespaced = self.api._resource(obj["apiVersion"], obj["kind"])
        if namespaced:
            meta.setdefault("namespace", self.namespace)
        else:
            self._cluster_scoped.append((obj["apiVersion"], obj["kind"] + "/" + meta["name"]))
        return self.api.apply(obj)

    def patch(
        self,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        api_version: str | None = None,
        subresource: str = "",
    ) -> dict[str, Any]:
        path = self._path(kind, name, namespace, api_version) + (
            f"/{subresource}" if subresource else ""
        )
        return self.api.request(  # type: ignore[no-any-return]
            "PATCH",
            path,
            data=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        api_version: str | None = None,
        **options: Any,
    ) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        try:
            self.api.request("DELETE", self._path(kind, name, namespace, api_version), json=body)
        except KubeError as error:
            if error.status != 404:
                raise

    def events(
        self, involved: str | None = None, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        events = self.list("Event", namespace)
        if involved:
            events = [e for e in events if e["involvedObject"].get("name") == involved]
        return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def logs(self, pod: str, container: str | None = None, namespace: str | None = None) -> str:
        path = self._path("Pod", pod, namespace) + "/log"
        response = self.api.session.get(
            self.api.server + path, params={"container": container} if container else {}, timeout=30
        )
        response.raise_for_status()
        return str(response.text)

    @staticmethod
    def wait_for(predicate: Callable[[], T], timeout: float = 30, interval: float = 0.1) -> T:
        """Poll ``predicate`` until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout:.0f} s: {predicate}")
            time.sleep(interval)

    # -- what only the local cluster offers ----------------------------------------------
    def require_local(self, what: str) -> None:
        if not self.local:
            pytest.skip(f"needs {what}, which only the local cluster (make cluster) has")

    def job_pods(
        self, name: str, kind: str = "Job", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return self.list("Pod", namespace, labels={POD_LABEL_OF[kind]: name})

    def finish_pods(self, pods: list[dict[str, Any]], exit_code: int = 0) -> None:
        """Running pods on kwok's nodes end with ``exit_code`` (kwok's gpuhub-pod-finish)."""
        self.require_local("kwok's fake nodes")
        for pod in pods:
            meta = pod["metadata"]
            self.patch(
                "Pod",
                meta["name"],
                {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: str(exit_code)}}},
                meta["namespace"],
            )

    def finish_job(
        self,
        name: str,
        kind: str = "Job",
        succeed: bool = True,
        exit_code: int | None = None,
        namespace: str | None = None,
        timeout: float = 60,
    ) -> None:
        """The running pods of a job on kwok's nodes end: 0, or 1 (``exit_code``) if not
        ``succeed``. Waits until the job has a running pod first."""
        code = exit_code if exit_code is not None else (0 if succeed else 1)

        def running() -> list[dict[str, Any]]:
            return [
                p
                for p in self.job_pods(name, kind, namespace)
                if p.get("status", {}).get("phase") == "Running"
            ]

        self.finish_pods(self.wait_for(running, timeout), code)

    def add_node(
        self,
        name: str,
        allocatable: dict[str, Any],
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        unschedulable: bool = False,
    ) -> None:
        """A kwok node for this test (removed after it); returns once it is Ready."""
        self.require_local("kwok's fake nodes")
        node = node_object(
            {
                "name": name,
                "allocatable": allocatable,
                "labels": labels or {},
                "taints": taints or [],
                "unschedulable": unschedulable,
            }
        )
        status = node.pop("status")
        self.create(node)
        self.patch("Node", name, {"status": status}, subresource="status")

        self.wait_for(lambda: schedulable(self.get("Node", name)), 30)

    def remove_node(self, name: str) -> None:
        self.delete("Node", name)

    # -- lifecycle -----------------------------------------------------------------------
    def cleanup(self) -> None:
        """Delete what this test made: its namespace, waiting until its pods are gone so that
        the next test sees the cluster's full capacity, then its cluster-scoped objects.

        Namespace first: a pod on a node the test added ends while kwok still runs that node;
        with the node gone first it would wait for the pod garbage collector (about a minute).
        Then its pods and Workloads, at once: the namespace controller waits 5 s before it empties a
        terminating namespace (``namespaceDeletionGracePeriod``), and a terminating namespace
        admits no new pod, so no controller can make one again in their place.
        """
        with contextlib.suppress(KubeError):
            self.delete("Namespace", self.namespace, propagationPolicy="Background")
        # Its Kueue Workloads too, which hold their ClusterQueue's quota until they go (404:
        # a cluster without Kueue).
        for kind in ("Pod", "Workload"):
            with contextlib.suppress(KubeError):
                self.api.request(
                    "DELETE",
                    self._path(kind),
                    json={"apiVersion": "v1", "kind": "DeleteOptions"},
                )
        with contextlib.suppress(AssertionError, KubeError):
            self.wait_for(lambda: not self.list("Pod"), timeout=90, interval=0.25)
        for version, ref in reversed(self._cluster_scoped):
            kind, _, name = ref.partition("/")
            with contextlib.suppress(KubeError):
                self.delete(kind, name, api_version=version)
        self._cluster_scoped.clear()


def _is_local(api: KubeAPI) -> bool:
    try:
        node = api.get("v1", "Node", "local-0")
    except KubeError:
        return False
    return bool(
        node and node["metadata"].get("labels", {}).get("gpuhub.io/node-agent") == "process"
    )


@pytest.fixture(scope="session")
def kube_cluster_config() -> tuple[Path, KubeAPI, bool]:
    path = kubeconfig_path()
    api = api_from_kubeconfig(path)
    return path, api, _is_local(api)


def new_namespace(api: KubeAPI, hint: str) -> str:
    """A fresh namespace, once its ``default`` ServiceAccount exists (pods need it)."""
    slug = "".join(c if c.isalnum() else "-" for c in hint.lower()).strip("-")[:30].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"gpuhub.io/test": "true"}},
        }
    )
    deadline = time.monotonic() + 60
    while api.get("v1", "ServiceAccount", "default", name) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name} got no default ServiceAccount in 60 s")
        time.sleep(0.05)
    return name


@contextlib.contextmanager
def kube_for(config: tuple[Path, KubeAPI, bool], hint: str) -> Iterator[Kube]:
    e2e.require("the Kubernetes test cluster")
    path, api, local = config
    kube = Kube(path, api, new_namespace(api, hint), local)
    try:
        yield kube
    finally:
        kube.cleanup()


@pytest.fixture
def kube(
    kube_cluster_config: tuple[Path, KubeAPI, bool], request: pytest.FixtureRequest
) -> Iterator[Kube]:
    with kube_for(kube_cluster_config, request.node.name) as k:
        yield k


@pytest.fixture(scope="module")
def module_kube(
    kube_cluster_config: tuple[Path, KubeAPI, bool], request: pytest.FixtureRequest
) -> Iterator[Kube]:
    with kube_for(kube_cluster_config, request.module.__name__.rsplit(".", 1)[-1]) as k:
        yield k


@pytest.fixture
async def kube_api(kube_cluster_config: tuple[Path, KubeAPI, bool]) -> AsyncIterator[Any]:
    from kubernetes_asyncio import config

    e2e.require("the Kubernetes test cluster")
    client = await config.new_client_from_config(config_file=str(kube_cluster_config[0]))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def kube_faults(kube: Kube, tmp_path: Path) -> Iterator[Any]:
    from harness.kube_faults import proxy_for

    proxy = proxy_for(kube.kubeconfig, tmp_path)
    try:
        yield proxy
    finally:
        proxy.stop()


def namespaced_kubeconfig(kube: Kube, folder: Path) -> Path:
    """The cluster's kubeconfig with this test's namespace as the context's default."""
    config = yaml.safe_load(kube.kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = kube.namespace
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path
