"""docs/admin-guide.md: every command and values snippet in it is exercised here, against the
test cluster's real kube-apiserver (with Kueue and the Kubeflow operators).

YAML blocks (each named by a first-line comment, `# my-values.yaml`) are either Kubernetes
objects, which the apiserver must take as they are (a strict server-side dry run in the test's
namespace, no warning), or gpuhub values, rendered with `helm template` on the chart (stand-in
z2jh dependency, see test_helm.py) for the API versions the cluster serves, taken by the
apiserver the same way, and their policy parsed by gpuhub. The Kueue setup is applied for real
and must admit GPU jobs as the guide says. Shell blocks run where this machine can: helm,
`make -n images`, and kubectl against the cluster, with the guide's namespace `jhub` replaced
by the test's, its nodes `gpu-node-N` kwok nodes the test adds, and the chart installed for
real so that `kubectl auth can-i` asks the cluster's RBAC. "Try the chart on the local cluster"
runs for real: `make demo-helm`'s install (the stand-in z2jh's pods, the guide's
values-local.yaml) in a namespace of its own standing in for `gpuhub-helm`, its `kubectl get
pods` and `port-forward`, and `make demo-helm-down`. The rest (`docker push`, `kubectl logs`
and `exec` of pods that need real images) are checked against what the chart renders. A
command this file does not know fails the test, so the guide cannot grow an unchecked command.
"""

from __future__ import annotations

import copy
import functools
import http.server
import json
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from gpuhub.core.policy import Policy
from harness.cluster import Kube, new_namespace
from harness.helm import (
    EXAMPLES,
    HELM,
    KUBE_VERSION,
    ROOT,
    by_kind,
    helm,
    hub_values,
    install,
    localized,
    make_chart,
    make_spawner,
    render,
    served_api_versions,
    service_config,
    validate_all,
)
from harness.hub.process import free_port
from harness.kubectl import kubectl, kubectl_binary
from localk8s import demo_helm
from localk8s.charts import LOCAL_VALUES, with_standin
from tests.support.guide import GUIDE, GUIDE_CONTENT, documents, is_manifest_file
from tests.support.wait import until

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")


def values_files() -> dict[str, dict[str, Any]]:
    return {name: documents(name)[0] for name in GUIDE_CONTENT.files if not is_manifest_file(name)}


def all_gpu_types() -> list[dict[str, Any]]:
    """GPU types of the guide's values and the chart's examples."""
    sources = list(values_files().values())
    sources += [yaml.safe_load(path.read_text()) for path in EXAMPLES]
    types = []
    for doc in sources:
        spawner = doc.get("jupyterhub", {}).get("hub", {}).get("config", {}).get("GPUSpawner", {})
        types += list(spawner.get("gpu_types", {}).values())
    return types


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chart(tmp_path_factory.mktemp("guide-chart"))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("guide-files")
    for name, text in GUIDE_CONTENT.files.items():
        (where / name).write_text(text)
    return where


def test_guide_shows_the_local_values_as_they_are() -> None:
    """The local values the guide shows are the file `make demo-helm` installs with."""
    assert GUIDE_CONTENT.files["values-local.yaml"] == LOCAL_VALUES.read_text()


def test_guide_has_commands_and_values() -> None:
    assert "my-values.yaml" in GUIDE_CONTENT.files
    assert len(GUIDE_CONTENT.commands) >= 10
    for section in ("MIG", "Time-slicing", "Insufficient nvidia.com/gpu", "sees no GPU", "Upgrad"):
        assert section in GUIDE.read_text()


@pytest.mark.parametrize("name", sorted(GUIDE_CONTENT.files))
@pytest.mark.e2e
def test_guide_yaml(name: str, chart: Path, files: Path, module_kube: Kube) -> None:
    if is_manifest_file(name):
        validate_all(module_kube, documents(name))
        return
    (doc,) = documents(name)
    objects = render(chart, files / name, api_versions=served_api_versions(module_kube))
    validate_all(module_kube, objects)
    policy = service_config(objects)["policy"]
    Policy.from_config(**policy)
    # What the snippet sets reaches the hub (z2jh values) or gpuhub's objects unchanged.
    hub = hub_values(objects)
    for section, settings in doc.get("jupyterhub", {}).items():
        assert_contains(hub[section], settings, f"jupyterhub.{section}")


def assert_contains(actual: Any, expected: Any, where: str) -> None:
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} missing after rendering"
            assert_contains(actual[key], value, f"{where}.{key}")
    else:
        assert actual == expected, where


# -- commands -----------------------------------------------------------------------------------


class RepoHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def local_chart_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Helm chart repository on 127.0.0.1 serving the stand-in z2jh chart."""
    work = tmp_path_factory.mktemp("repo")
    standin = make_chart(work / "src") / "charts" / "jupyterhub"
    repo = work / "repo"
    repo.mkdir()
    assert helm("package", standin, "-d", repo).returncode == 0
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(RepoHandler, directory=str(repo))
    )
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    result = helm("repo", "index", repo, "--url", url)
    assert result.returncode == 0, result.stderr
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url
    server.shutdown()
    server.server_close()


GPU_NODE = {"cpu": "64", "memory": "512Gi", "pods": 110, "nvidia.com/gpu": 8}


def option(words: list[str], *names: str) -> str | None:
    for i, word in enumerate(words):
        for name in names:
            if word == name:
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def localize_words(words: list[str], guide_namespace: str | None, namespace: str) -> list[str]:
    """A guide command for the test cluster: the guide's namespace is the test's."""
    if not guide_namespace:
        return list(words)
    out = []
    for word in words:
        if word == guide_namespace:
            word = namespace
        for before, after in (
            (f"--namespace={guide_namespace}", f"--namespace={namespace}"),
            (f"system:serviceaccount:{guide_namespace}:", f"system:serviceaccount:{namespace}:"),
            (f"/namespaces/{guide_namespace}/", f"/namespaces/{namespace}/"),
        ):
            word = word.replace(before, after)
        out.append(word)
    return out


def _answers(url: str) -> bool:
    """The hub's API answers 200 at ``url`` (an unanswered connection is not yet)."""
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


@dataclass
class GuideWalk:
    """The guide's commands, run in order on the test cluster, and what they leave behind."""

    kube: Kube
    chart: Path
    files: Path
    tmp: Path
    local_chart_repo: str
    pod_name: str
    namespace: str | None = None  # the guide's (jhub); the test's stands in for it
    install: list[dict[str, Any]] | None = None  # the chart, installed for real
    tags: set[str] = field(default_factory=set)
    nodes: dict[str, list[str]] = field(default_factory=dict)  # node -> what the guide set
    # The guide's gpuhub-helm (`make demo-helm`): a namespace of the test's own.
    demo_namespace: str | None = None

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kube, *args, cache=self.tmp / "kubectl-cache")

    def kubectl_ok(self, line: str, *args: str) -> str:
        result = self.kubectl(*args)
        assert result.returncode == 0, f"{line}: {result.stderr.strip()}"
        assert "Warning" not in result.stderr, f"{line}: {result.stderr.strip()}"
        return result.stdout

    def run(self, words: list[str]) -> None:
        line = shlex.join(words)
        if words[0] == "make" and words[1] in ("cluster", "demo-helm", "demo-helm-down"):
            self.run_make(words[1], line)
        elif words[0] == "kubectl" and demo_helm.NAMESPACE in words:
            self.run_demo_kubectl(words, line)
        elif words[:3] == ["helm", "dependency", "update"]:
            self.helm_dependency_update(words)
        elif words[0] == "helm" and words[1] in ("upgrade", "template"):
            self.helm_render(words, line)
        elif words[:2] == ["make", "images"]:
            result = subprocess.run(
                ["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, result.stderr
            for build in re.findall(r"^docker build .*$", result.stdout, re.M):
                self.tags.add(option(shlex.split(build), "-t") or "")
        elif words[:2] == ["docker", "push"]:
            assert words[2] in self.tags, f"{line}: `make images` does not build {words[2]}"
        elif words[0] == "kubectl":
            self.run_kubectl(words, line)
        else:
            raise AssertionError(f"guide command not exercised by this test: {line}")

    def run_make(self, target: str, line: str) -> None:
        """`make cluster` is the cluster this test runs on; `make demo-helm` and
        `make demo-helm-down` do what their module does, in the test's own namespace."""
        shown = subprocess.run(
            ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        module = {"cluster": "-m localk8s up", "demo-helm": "-m localk8s.demo_helm up"}
        module["demo-helm-down"] = "-m localk8s.demo_helm down"
        assert module[target] in shown.stdout, f"{line}: make runs {shown.stdout}"
        if target == "cluster":
            self.kube.require_local(f"{line}: the chart's pods run on the process node")
        elif target == "demo-helm":
            self.demo_namespace = new_namespace(self.kube.api, "guide-helm")
            chart = with_standin(self.tmp / "demo-chart")
            demo_helm.install(self.kube.kubeconfig, chart, namespace=self.demo_namespace)
            url = demo_helm.hub_url(self.kube.api, self.demo_namespace)
            demo_helm.wait_for_hub(url, timeout=180)
        else:
            assert self.demo_namespace, f"{line}: the guide never ran make demo-helm"
            demo_helm.uninstall(self.kube.kubeconfig, self.kube.api, self.demo_namespace)
            self.demo_namespace = None

    def run_demo_kubectl(self, words: list[str], line: str) -> None:
        """The guide's kubectl commands in `make demo-helm`'s namespace, run for real."""
        assert self.demo_namespace, f"{line}: the guide never ran make demo-helm"
        local = [self.demo_namespace if w == demo_helm.NAMESPACE else w for w in words[1:]]
        if "port-forward" not in words:
            assert local[-2:] == ["get", "pods"], line
            rows = [row.split() for row in self.kubectl_ok(line, *local).splitlines()[1:]]
            running = {row[0].rsplit("-", 2)[0] for row in rows if row[2] == "Running"}
            assert {"hub", "proxy", "gpuhub-service"} <= running, f"{line}: {rows}"
            return
        # `port-forward svc/proxy-public 8080:http` until stopped: on a free port here.
        mapping = next(w for w in local if w.endswith(":http"))
        port = free_port()
        local[local.index(mapping)] = f"{port}:http"
        command = [str(kubectl_binary()), f"--kubeconfig={self.kube.kubeconfig}", *local]
        forward = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            until(
                f"the hub through `{line}`",
                lambda: forward.poll() is None and _answers(f"http://127.0.0.1:{port}/hub/api"),
                timeout=60,
            )
        finally:
            forward.terminate()
            _, errors = forward.communicate(timeout=30)
        assert forward.returncode in (0, -15), f"{line}: {errors.strip()}"

    def helm_dependency_update(self, words: list[str]) -> None:
        assert words[3] == "helm/gpuhub"
        copy = self.tmp / "dep" / "gpuhub"
        shutil.copytree(self.chart, copy, ignore=shutil.ignore_patterns("charts"))
        meta = yaml.safe_load((copy / "Chart.yaml").read_text())
        assert meta["dependencies"][0]["repository"] == "https://hub.jupyter.org/helm-chart/"
        meta["dependencies"][0]["repository"] = self.local_chart_repo
        (copy / "Chart.yaml").write_text(yaml.safe_dump(meta))
        result = helm("dependency", "update", copy)
        assert result.returncode == 0, result.stdout + result.stderr
        version = meta["dependencies"][0]["version"]
        assert (copy / "charts" / f"jupyterhub-{version}.tgz").is_file()
        assert (copy / "Chart.lock").is_file()

    def helm_render(self, words: list[str], line: str) -> None:
        """`helm upgrade --install` is rendered with `helm template` for the API versions the
        cluster serves, and installed for real in the test's namespace; `helm template` (the
        preview) is rendered as written and validated by the apiserver."""
        args = words[1:]
        installing = args[:2] == ["upgrade", "--install"]
        if installing:
            args = ["template", *args[2:]]
        assert args[0] == "template"
        release, chart_path = args[1], args[2]
        assert chart_path == "helm/gpuhub", "the guide installs the chart from the repository"
        namespace = option(words, "--namespace", "-n")
        assert namespace and (self.namespace in (None, namespace)), line
        self.namespace = namespace
        rest = [a for a in args[3:] if a != "--create-namespace"]
        rewritten = []
        for i, arg in enumerate(rest):
            if i > 0 and rest[i - 1] in ("--values", "-f"):
                assert arg in GUIDE_CONTENT.files, f"{arg} is not a file the guide shows"
                arg = str(self.files / arg)
            rewritten.append(arg)
        if installing:
            rewritten = localize_words(rewritten, namespace, self.kube.namespace)
        versions = [a for v in served_api_versions(self.kube) for a in ("--api-versions", v)]
        result = helm(
            "template", release, self.chart, *rewritten, "--kube-version", KUBE_VERSION, *versions
        )
        assert result.returncode == 0, result.stderr
        objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        if installing:
            install(self.kube, objects)
            self.install = objects
        else:
            validate_all(self.kube, objects)

    def node(self, name: str) -> list[str]:
        """The guide's GPU node ``name``: a kwok node with eight GPUs, added on first use."""
        if name not in self.nodes:
            self.kube.add_node(name, GPU_NODE)
            self.nodes[name] = []
        return self.nodes[name]

    def run_kubectl(self, words: list[str], line: str) -> None:
        args = [
            w
            for i, w in enumerate(words[1:], 1)
            if not w.startswith("-") and words[i - 1] not in ("-n", "--namespace", "-o", "-L")
        ]
        local = localize_words(words[1:], self.namespace, self.kube.namespace)
        verb = args[0]
        gpu_types = all_gpu_types()
        if verb == "get" and args[1] == "nodes":
            # JSONPath needs the dots of the resource and label names escaped (quoted for bash).
            columns = option(words, "-o") or ""
            assert ".status.allocatable.nvidia\\.com/gpu" in columns, line
            assert ".metadata.labels.nvidia\\.com/gpu\\.product" in columns, line
            assert "nvidia.com/gpu" in {t.get("resource_name", "nvidia.com/gpu") for t in gpu_types}
            self.shows_gpu_nodes(self.kubectl_ok(line, *local), line)
        elif verb == "label" and args[1] == "node":
            node, label = args[2], args[3]
            key, _, value = label.partition("=")
            if key == "nvidia.com/gpu.product":
                products = {t.get("node_selector", {}).get(key) for t in gpu_types}
                assert value in products, f"{line}: no GPU type selects {value}"
            else:
                assert key == "nvidia.com/mig.config", line
                profile = re.fullmatch(r"all-(\d+g\.\d+gb)", value)
                resources = {t.get("resource_name") for t in gpu_types}
                assert profile and f"nvidia.com/mig-{profile[1]}" in resources, line
            self.node(node).append(label)
            self.kubectl_ok(line, *local)
            assert self.kube.get("Node", node)["metadata"]["labels"][key] == value, line
        elif verb == "taint" and args[1] == "node":
            node, taint = args[2], args[3]
            key, _, rest = taint.partition("=")
            value, _, effect = rest.partition(":")
            tolerated = [
                t
                for t in gpu_types
                if any(
                    tol["key"] == key
                    and (tol.get("operator") == "Exists" or tol.get("value") == value)
                    and tol.get("effect") in (None, effect)
                    for tol in t.get("tolerations", [])
                )
            ]
            assert tolerated, f"{line}: no GPU type tolerates this taint"
            self.node(node).append(taint)
            self.kubectl_ok(line, *local)
            taints = self.kube.get("Node", node)["spec"]["taints"]
            assert {"key": key, "value": value, "effect": effect} in taints, line
        elif verb == "apply":
            self.apply(words, local, line)
        elif verb == "get" and "--raw" in words:
            # Kueue's visibility API for the LocalQueue the guide's values name (run for real
            # in test_guide_kueue_setup_admits_gpu_jobs, which makes the queues).
            queue = values_files()["kueue-values.yaml"]["jobs"]["kueue"]["queueName"]
            assert option(words, "--raw") == (
                f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{self.namespace}/"
                f"localqueues/{queue}/pendingworkloads"
            ), line
        elif verb == "auth":
            assert args[1] == "can-i" and self.install is not None, line
            who = option(words, "--as") or ""
            assert who.startswith("system:serviceaccount:"), line
            answer = self.kubectl(*local)  # "no" exits 1
            assert answer.stdout.strip() == "yes", (
                f"{line}: the cluster answers {answer.stdout.strip() or answer.stderr.strip()}"
            )
        elif verb == "logs":
            # The chart's Deployment is only dry-run here (see helm.install): its pod would
            # start the jobs service on this machine's port 10101.
            kind, _, name = args[1].partition("/")
            ns = option(words, "-n", "--namespace")
            assert kind == "deploy" and ns == self.namespace and self.install is not None
            by_kind(self.install, "Deployment", name)
        elif verb in ("describe", "exec") and (args[1] == "pod" or args[1].startswith("jupyter-")):
            # A user's server needs its real image; the name is the one KubeSpawner gives it.
            pod = args[2] if args[1] == "pod" else args[1]
            assert option(words, "-n", "--namespace") == self.namespace, line
            assert pod == self.pod_name, f"{line}: user pods are not named {pod}"
            if verb == "exec":
                assert words[-1] == "nvidia-smi"
        elif verb == "describe" and args[1] == "node":
            assert args[2] in self.nodes, f"{line}: the guide never set up {args[2]}"
            shown = self.kubectl_ok(line, *local)
            for setting in self.nodes[args[2]]:
                assert setting in shown, f"{line}: does not show {setting}"
        else:
            raise AssertionError(f"guide command not exercised by this test: {line}")

    def shows_gpu_nodes(self, output: str, line: str) -> None:
        """The custom columns show every node's GPUs and product as the API has them."""
        rows = [row.split() for row in output.splitlines()]
        assert rows[0] == ["NAME", "GPUS", "PRODUCT"], line
        shown = {row[0]: row[1:] for row in rows[1:]}
        for node in self.kube.list("Node"):
            name = node["metadata"]["name"]
            gpus = node["status"].get("allocatable", {}).get("nvidia.com/gpu", "<none>")
            product = node["metadata"].get("labels", {}).get("nvidia.com/gpu.product", "<none>")
            assert shown.get(name) == [gpus, product], f"{line}: {name} shows {shown.get(name)}"

    def apply(self, words: list[str], local: list[str], line: str) -> None:
        name = option(words, "-f") or ""
        if name.startswith("https://"):
            # Kueue's own release manifests (kueue.sigs.k8s.io/docs/installation/), of a
            # release that serves the kueue.x-k8s.io/v1beta2 the guide's objects use.
            assert re.fullmatch(
                r"https://github\.com/kubernetes-sigs/kueue/releases/download/"
                r"v0\.(1[5-9]|[2-9]\d)\.\d+/manifests\.yaml",
                name,
            ), line
            assert "--server-side" in words, (
                f"{line}: Kueue's CRDs are too big for client-side apply"
            )
            return
        assert name in GUIDE_CONTENT.files and is_manifest_file(name), line
        # A server-side dry run (test_guide_kueue_setup_admits_gpu_jobs applies the queues
        # for real), with the objects' namespace the test's.
        placed = self.tmp / f"applied-{name}"
        placed.write_text(yaml.safe_dump_all([localized(self.kube, d) for d in documents(name)]))
        args = [str(placed) if w == name else w for w in local]
        shown = self.kubectl_ok(line, *args, "--dry-run=server", "--validate=strict")
        assert shown.count("(server dry run)") == len(documents(name)), shown


@pytest.mark.e2e
async def test_every_guide_command(
    chart: Path,
    files: Path,
    local_chart_repo: str,
    tmp_path: Path,
    no_cluster: None,
    kube: Kube,
) -> None:
    kube.require_local("kwok's fake nodes (the guide's gpu-node-1 and gpu-node-2)")
    # The name KubeSpawner's default template (which z2jh keeps) gives alice's server pod.
    from traitlets.config import Config

    pod_name = make_spawner(Config(), groups=[]).pod_name
    assert pod_name == "jupyter-alice"
    walk = GuideWalk(kube, chart, files, tmp_path, local_chart_repo, pod_name)
    try:
        for words in GUIDE_CONTENT.commands:
            walk.run(words)
    finally:
        if walk.demo_namespace:  # the walk stopped before `make demo-helm-down`
            demo_helm.uninstall(kube.kubeconfig, kube.api, walk.demo_namespace)
    assert walk.demo_namespace is None, "the guide never ran make demo-helm-down"
    assert walk.install is not None and walk.namespace is not None and walk.tags
    assert set(walk.nodes) == {"gpu-node-1", "gpu-node-2"}


# -- the Kueue setup, for real -------------------------------------------------------------------


def queued_job(name: str, queue: str, gpus: int) -> dict[str, Any]:
    """A Job as gpuhub sends it to Kueue: labelled with the queue, suspended."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "img:1",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                }
            },
        },
    }


def active(kube: Kube, kind: str, name: str) -> bool:
    """Kueue's Active condition on one of its queues."""
    return condition(kube.get(kind, name), "Active").get("status") == "True"


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    found = [
        c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind
    ]
    return found[0] if found else {}


@pytest.mark.e2e
def test_guide_kueue_setup_admits_gpu_jobs(chart: Path, tmp_path: Path, kube: Kube) -> None:
    """The guide's Kueue section for real: its ResourceFlavors and ClusterQueue applied with
    kubectl, the chart's LocalQueue from its values; Kueue marks both active, admits a GPU job
    on the A100 flavor up to the quota, holds the next one with its reason, and the guide's
    visibility command shows that one in line."""
    # Cluster-scoped names made this test's own (other tests make flavors named a100 too).
    suffix = kube.namespace.rsplit("-", 1)[-1]
    queues = documents("kueue-queues.yaml")
    names = {d["metadata"]["name"]: f"{d['metadata']['name']}-{suffix}" for d in queues}
    for doc in queues:
        doc["metadata"]["name"] = names[doc["metadata"]["name"]]
        for group in doc.get("spec", {}).get("resourceGroups", []):
            for flavor in group["flavors"]:
                flavor["name"] = names[flavor["name"]]
    (cluster_queue,) = [d for d in queues if d["kind"] == "ClusterQueue"]
    gpu_quota = next(
        r["nominalQuota"]
        for g in cluster_queue["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    )
    applied = tmp_path / "kueue-queues.yaml"
    applied.write_text(yaml.safe_dump_all(queues))
    values = copy.deepcopy(values_files()["kueue-values.yaml"])
    values["jobs"]["kueue"]["clusterQueue"] = names[values["jobs"]["kueue"]["clusterQueue"]]
    queue = values["jobs"]["kueue"]["queueName"]
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    cache = tmp_path / "kubectl-cache"
    try:
        result = kubectl(kube, "apply", "-f", str(applied), cache=cache)
        assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr
        objects = render(
            chart,
            tmp_path / "values.yaml",
            namespace=kube.namespace,
            api_versions=served_api_versions(kube),
        )
        install(kube, objects)
        for kind, name in (
            ("ClusterQueue", cluster_queue["metadata"]["name"]),
            ("LocalQueue", queue),
        ):
            kube.wait_for(functools.partial(active, kube, kind, name))

        def workload(job: str) -> dict[str, Any] | None:
            for w in kube.list("Workload"):
                if any(o["name"] == job for o in w["metadata"].get("ownerReferences", [])):
                    return w
            return None

        kube.create(queued_job("fills-the-quota", queue, gpu_quota))
        admitted = kube.wait_for(
            lambda: (
                (w := workload("fills-the-quota")) and w.get("status", {}).get("admission") and w
            )
        )
        (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
        assert assignment["flavors"]["nvidia.com/gpu"] == names["a100"]
        assert assignment["flavors"]["cpu"] == names["default-flavor"]
        kube.wait_for(lambda: kube.get("Job", "fills-the-quota")["spec"]["suspend"] is False)
        kube.create(queued_job("waits", queue, 1))
        waiting = kube.wait_for(
            lambda: condition(workload("waits"), "QuotaReserved").get("message")
        )
        assert "insufficient unused quota for nvidia.com/gpu" in waiting, waiting
        assert kube.get("Job", "waits")["spec"]["suspend"] is True
        # The guide's command, in the test's namespace.
        (raw,) = [w for w in GUIDE_CONTENT.commands if "--raw" in w]
        guide_namespace = raw[raw.index("--raw") + 1].split("/")[5]
        shown = kubectl(
            kube, *localize_words(raw[1:], guide_namespace, kube.namespace), cache=cache
        )
        assert shown.returncode == 0, shown.stderr
        line = json.loads(shown.stdout)["items"]
        assert [(w["metadata"]["name"], w["positionInLocalQueue"]) for w in line] == [
            (workload("waits")["metadata"]["name"], 0)
        ]
    finally:
        kubectl(
            kube, "delete", "-f", str(applied), "--wait=false", "--ignore-not-found", cache=cache
        )
