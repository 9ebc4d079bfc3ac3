"""docs/admin-guide.md: every command and values snippet in it is exercised here.

YAML blocks (each named by a first-line comment, `# my-values.yaml`) are either Kubernetes
objects, validated against the official schema, or gpuhub values, rendered with `helm template`
on the chart (stand-in z2jh dependency, see test_helm.py) and their policy parsed by gpuhub.
Shell blocks are run where this machine can (helm, `make -n images`) and otherwise checked
against what the chart renders: `kubectl auth can-i` is evaluated against the rendered RBAC,
`kubectl logs deploy/X` needs a Deployment X, node labels and taints must be the ones the
guide's GPU types select and tolerate. A command this file does not know fails the test, so
the guide cannot grow an unchecked command.
"""

from __future__ import annotations

import functools
import http.server
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuhub.policy import Policy
from tests.deploy.test_helm import (
    EXAMPLES,
    HELM,
    KUBE_VERSION,
    ROOT,
    by_kind,
    helm,
    hub_values,
    make_chart,
    make_spawner,
    no_cluster,  # noqa: F401  (fixture)
    render,
    service_config,
    validate_all,
)

GUIDE = ROOT / "docs" / "admin-guide.md"

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")


@dataclass
class Guide:
    files: dict[str, str] = field(default_factory=dict)  # name -> YAML text
    commands: list[list[str]] = field(default_factory=list)


def parse_guide() -> Guide:
    guide = Guide()
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", GUIDE.read_text(), re.M | re.S):
        if lang == "":
            continue  # a diagram
        if lang == "yaml":
            first = body.splitlines()[0]
            match = re.fullmatch(r"# ([\w.-]+\.yaml)", first)
            assert match, f"YAML block without a file name comment: {first!r}"
            guide.files[match[1]] = body
        elif lang == "bash":
            text = body.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    guide.commands.append(shlex.split(line))
        else:
            raise AssertionError(f"code block of unknown language {lang!r} in the guide")
    return guide


GUIDE_CONTENT = parse_guide()


def is_manifest(doc: dict[str, Any]) -> bool:
    return "apiVersion" in doc and "kind" in doc


def documents(name: str) -> list[dict[str, Any]]:
    """The YAML documents of a guide file (Kubernetes manifests may be several, `---`)."""
    return [doc for doc in yaml.safe_load_all(GUIDE_CONTENT.files[name]) if doc]


def is_manifest_file(name: str) -> bool:
    return all(is_manifest(doc) for doc in documents(name))


def validate_manifest(doc: dict[str, Any]) -> None:
    """Built-ins against the official schema; custom resources (Kueue's) against the CRDs
    kubesim installs, strictly."""
    from tests.kubesim import crd_schemas

    if crd_schemas.serves(doc):
        crd_schemas.validate_strict(doc)
    else:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


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


def test_guide_has_commands_and_values() -> None:
    assert "my-values.yaml" in GUIDE_CONTENT.files
    assert len(GUIDE_CONTENT.commands) >= 10
    for section in ("MIG", "Time-slicing", "Insufficient nvidia.com/gpu", "sees no GPU", "Upgrad"):
        assert section in GUIDE.read_text()


@pytest.mark.parametrize("name", sorted(GUIDE_CONTENT.files))
def test_guide_yaml(name: str, chart: Path, files: Path) -> None:
    if is_manifest_file(name):
        for manifest in documents(name):
            validate_manifest(manifest)
        return
    (doc,) = documents(name)
    objects = render(chart, files / name)
    validate_all(objects)
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


def run_helm_command(words: list[str], chart: Path, files: Path) -> list[dict[str, Any]]:
    """`helm upgrade --install` or `helm template` from the guide, rendered with `helm template`."""
    args = words[1:]
    if args[:2] == ["upgrade", "--install"]:
        args = ["template", *args[2:]]
    assert args[0] == "template"
    release, chart_path = args[1], args[2]
    assert chart_path == "helm/gpuhub", "the guide installs the chart from the repository"
    rest = [a for a in args[3:] if a != "--create-namespace"]
    rewritten = []
    for i, arg in enumerate(rest):
        if i > 0 and rest[i - 1] in ("--values", "-f"):
            assert arg in GUIDE_CONTENT.files, f"{arg} is not a file the guide shows"
            arg = str(files / arg)
        rewritten.append(arg)
    result = helm("template", release, chart, *rewritten, "--kube-version", KUBE_VERSION)
    assert result.returncode == 0, result.stderr
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    validate_all(objects)
    return objects


def option(words: list[str], *names: str) -> str | None:
    for i, word in enumerate(words):
        for name in names:
            if word == name:
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def can_i(
    objects: list[dict[str, Any]], verb: str, resource: str, namespace: str | None, who: str
) -> bool:
    """`kubectl auth can-i` for a ServiceAccount, over the rendered (Cluster)Role(Binding)s."""
    _, _, sa_namespace, sa_name = who.split(":")
    name, _, group = resource.partition(".")
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"].endswith("Role")}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(
            s["kind"] == "ServiceAccount"
            and s["name"] == sa_name
            and s["namespace"] == sa_namespace
            for s in binding["subjects"]
        ):
            continue
        if binding["kind"] == "RoleBinding" and binding["metadata"].get("namespace") != namespace:
            continue
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        for rule in (role or {}).get("rules", []):
            if group in rule["apiGroups"] and name in rule["resources"] and verb in rule["verbs"]:
                return True
    return False


async def test_every_guide_command(
    chart: Path,
    files: Path,
    local_chart_repo: str,
    tmp_path: Path,
    no_cluster: None,  # noqa: F811
) -> None:
    # The name KubeSpawner's default template (which z2jh keeps) gives alice's server pod.
    from traitlets.config import Config

    pod_name = make_spawner(Config(), groups=[]).pod_name
    assert pod_name == "jupyter-alice"
    namespace: str | None = None
    install: list[dict[str, Any]] | None = None
    tags: set[str] = set()
    nodes: set[str] = set()
    gpu_types = all_gpu_types()
    resources = {t.get("resource_name", "nvidia.com/gpu") for t in gpu_types}
    products = {
        v
        for t in gpu_types
        for k, v in t.get("node_selector", {}).items()
        if k == "nvidia.com/gpu.product"
    }
    for words in GUIDE_CONTENT.commands:
        line = shlex.join(words)
        tool = words[0]
        if words[:3] == ["helm", "dependency", "update"]:
            assert words[3] == "helm/gpuhub"
            copy = tmp_path / "dep" / "gpuhub"
            shutil.copytree(chart, copy, ignore=shutil.ignore_patterns("charts"))
            meta = yaml.safe_load((copy / "Chart.yaml").read_text())
            assert meta["dependencies"][0]["repository"] == "https://hub.jupyter.org/helm-chart/"
            meta["dependencies"][0]["repository"] = local_chart_repo
            (copy / "Chart.yaml").write_text(yaml.safe_dump(meta))
            result = helm("dependency", "update", copy)
            assert result.returncode == 0, result.stdout + result.stderr
            version = meta["dependencies"][0]["version"]
            assert (copy / "charts" / f"jupyterhub-{version}.tgz").is_file()
            assert (copy / "Chart.lock").is_file()
        elif tool == "helm" and words[1] in ("upgrade", "template"):
            objects = run_helm_command(words, chart, files)
            ns = option(words, "--namespace", "-n")
            assert ns and (namespace in (None, ns)), line
            namespace = ns
            install = objects
        elif words[:2] == ["make", "images"]:
            result = subprocess.run(
                ["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, result.stderr
            for build in re.findall(r"^docker build .*$", result.stdout, re.M):
                tags.add(option(shlex.split(build), "-t") or "")
        elif words[:2] == ["docker", "push"]:
            assert words[2] in tags, f"{line}: `make images` does not build {words[2]}"
        elif tool == "kubectl":
            check_kubectl(words, line, namespace, install, products, resources, nodes, pod_name)
        else:
            raise AssertionError(f"guide command not exercised by this test: {line}")
    assert install is not None and namespace is not None and tags


def check_kubectl(
    words: list[str],
    line: str,
    namespace: str | None,
    install: list[dict[str, Any]] | None,
    products: set[str],
    resources: set[str],
    nodes: set[str],
    pod_name: str,
) -> None:
    ns = option(words, "-n", "--namespace")
    args = [
        w
        for i, w in enumerate(words[1:], 1)
        if not w.startswith("-") and words[i - 1] not in ("-n", "--namespace", "-o", "-L")
    ]
    verb = args[0]
    if verb == "get" and args[1] == "nodes":
        # JSONPath needs the dots of the resource and label names escaped (quoted for bash).
        columns = option(words, "-o") or ""
        assert ".status.allocatable.nvidia\\.com/gpu" in columns, line
        assert ".metadata.labels.nvidia\\.com/gpu\\.product" in columns, line
        assert "nvidia.com/gpu" in resources
    elif verb == "label" and args[1] == "node":
        node, label = args[2], args[3]
        key, _, value = label.partition("=")
        nodes.add(node)
        if key == "nvidia.com/gpu.product":
            assert value in products, f"{line}: no GPU type selects {value}"
        else:
            assert key == "nvidia.com/mig.config", line
            profile = re.fullmatch(r"all-(\d+g\.\d+gb)", value)
            assert profile and f"nvidia.com/mig-{profile[1]}" in resources, line
    elif verb == "taint" and args[1] == "node":
        nodes.add(args[2])
        key, _, rest = args[3].partition("=")
        value, _, effect = rest.partition(":")
        tolerated = [
            t
            for t in all_gpu_types()
            if any(
                tol["key"] == key
                and (tol.get("operator") == "Exists" or tol.get("value") == value)
                and tol.get("effect") in (None, effect)
                for tol in t.get("tolerations", [])
            )
        ]
        assert tolerated, f"{line}: no GPU type tolerates this taint"
    elif verb == "apply":
        name = option(words, "-f") or ""
        if name.startswith("https://"):
            # Kueue's own release manifests (kueue.sigs.k8s.io/docs/installation/).
            assert re.fullmatch(
                r"https://github\.com/kubernetes-sigs/kueue/releases/download/v0\.(9|1\d)\.\d+/"
                r"manifests\.yaml",
                name,
            ), line
            assert "--server-side" in words, (
                f"{line}: Kueue's CRDs are too big for client-side apply"
            )
        else:
            assert name in GUIDE_CONTENT.files and is_manifest_file(name), line
    elif verb == "get" and "--raw" in words:
        # Kueue's visibility API for the LocalQueue the guide's values name.
        queue = values_files()["kueue-values.yaml"]["jobs"]["kueue"]["queueName"]
        assert option(words, "--raw") == (
            f"/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{namespace}/localqueues/"
            f"{queue}/pendingworkloads"
        ), line
    elif verb == "auth":
        assert args[1] == "can-i" and install is not None
        who = option(words, "--as") or ""
        assert who.startswith("system:serviceaccount:"), line
        assert can_i(install, args[2], args[3], ns, who), f"{line}: the chart does not allow it"
    elif verb == "logs":
        kind, _, name = args[1].partition("/")
        assert kind == "deploy" and ns == namespace and install is not None
        by_kind(install, "Deployment", name)
    elif verb in ("describe", "exec") and (args[1] == "pod" or args[1].startswith("jupyter-")):
        pod = args[2] if args[1] == "pod" else args[1]
        assert ns == namespace, line
        assert pod == pod_name, f"{line}: user pods are not named {pod}"
        if verb == "exec":
            assert words[-1] == "nvidia-smi"
    elif verb == "describe" and args[1] == "node":
        assert args[2] in nodes, f"{line}: the guide never set up {args[2]}"
    else:
        raise AssertionError(f"guide command not exercised by this test: {line}")
