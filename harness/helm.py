"""Helm as the chart tests use it: the real helm 3.10 from npm, a chart copy with a stand-in
zero-to-jupyterhub dependency, ``helm template``, and what it renders checked by the test
cluster's real kube-apiserver (with the CRDs and webhooks of Kueue and the Kubeflow operators).

The zero-to-jupyterhub dependency cannot be downloaded here, so :func:`make_chart` copies the
chart and puts gpuhub's stand-in ``jupyterhub`` chart (``localk8s/z2jh``) into its ``charts/``,
here rendering only the parts of z2jh 4.x the render tests check: the hub Secret named ``hub``
holding the chart values (``values.yaml``, which z2jh's hub turns into traitlets config) and
the generated ``hub.services.<name>.apiToken``, and the hub ServiceAccount; with
``jupyterhub.rbac.create`` (z2jh's default; off here, so that the chart tests see gpuhub's own
Roles only) also z2jh's Role for it, what KubeSpawner needs to start servers (pods, PVCs,
secrets, services, events). ``localk8s.charts.with_standin`` also makes its pods.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import yaml
from traitlets.config import Config

from harness.paths import REPO
from localk8s.charts import with_standin

if TYPE_CHECKING:
    from harness.cluster import Kube

ROOT = REPO


CHART = ROOT / "helm" / "gpuhub"


HELM = ROOT / "node_modules" / ".bin" / "helm"


EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))


KUBE_VERSION = "1.33.0"  # z2jh 4.x needs >= 1.28; Helm 3.10 assumes 1.25 without a cluster


NAMESPACE = "jhub"


def helm_env(home: Path) -> dict[str, str]:
    """Keep Helm's cache and config out of the user's home."""
    env = dict(os.environ)
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[name] = str(home / name.lower())
    return env


def make_chart(tmp: Path) -> Path:
    """A copy of helm/gpuhub with the stand-in z2jh dependency in charts/, rendering only
    the hub's Secret and RBAC (localk8s.charts.with_standin, ``pods=False``)."""
    return with_standin(tmp, pods=False)


def helm(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    home = Path(os.environ.get("TMPDIR", "/tmp")) / "gpuhub-test-helm-home"
    return subprocess.run(
        [str(HELM), *map(str, args)],
        capture_output=True,
        text=True,
        env=helm_env(home),
        cwd=cwd,
        timeout=120,
    )


def render(
    chart: Path,
    *values_files: Path,
    values: dict[str, Any] | None = None,
    release: str = "gpuhub",
    tmp: Path | None = None,
    namespace: str = NAMESPACE,
    api_versions: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """`helm template`; the rendered objects, or AssertionError with Helm's message.

    ``api_versions``: what the cluster serves (:func:`served_api_versions`), as `helm install`
    finds out itself; without them the chart renders as offline."""
    args: list[str | Path] = ["template", release, chart, "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION]
    for version in api_versions:
        args += ["--api-versions", version]
    for path in values_files:
        args += ["-f", path]
    if values is not None:
        extra = (tmp or chart.parent) / f"extra-{abs(hash(repr(values)))}.yaml"
        extra.write_text(yaml.safe_dump(values))
        args += ["-f", extra]
    result = helm(*args)
    if result.returncode != 0:
        raise AssertionError(result.stderr.strip())
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def hub_values(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The values the z2jh hub sees (its Secret's values.yaml)."""
    secret = by_kind(objects, "Secret", "hub")
    return yaml.safe_load(base64.b64decode(secret["data"]["values.yaml"]))


def service_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["service.yaml"])


def hub_yaml(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["hub.yaml"])


# -- what the real apiserver makes of it --------------------------------------------------------


def served_api_versions(kube: Kube) -> list[str]:
    """The group versions the cluster serves (discovery), for ``helm template --api-versions``."""
    groups = kube.api.request("GET", "/apis")["groups"]
    return ["v1", *(v["groupVersion"] for g in groups for v in g["versions"])]


def localized(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` placed in the test's namespace if it is namespaced (the chart's
    namespaces, ``jhub``, ``jupyter-users``, ``kubeflow``, do not exist on the test cluster).
    Raises AssertionError if the cluster does not serve its kind."""
    from localk8s.kubeapi import KubeError

    obj = copy.deepcopy(obj)
    try:
        _, namespaced = kube.api._resource(obj["apiVersion"], obj["kind"])
    except KubeError as error:
        raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: {error}") from None
    if namespaced:
        obj["metadata"]["namespace"] = kube.namespace
    else:
        obj["metadata"].pop("namespace", None)
    return obj


WARNING = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def dry_run(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as it is (its namespace must exist) through a server-side dry run of
    `kubectl apply --server-side` (a create, or an update of what is there), with
    ``fieldValidation=Strict`` (an unknown or duplicated field is an error), admission and
    the operators' webhooks. AssertionError with the apiserver's sentence if it refuses, or
    if it warns (a deprecated API version, say), as kubectl would print it."""
    meta = obj["metadata"]
    path = kube.api.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace", ""))
    response = kube.api.session.patch(
        kube.api.server + path,
        params={
            "dryRun": "All",
            "fieldValidation": "Strict",
            "fieldManager": "gpuhub-tests",
            "force": "true",
        },
        data=json.dumps(obj),
        headers={"Content-Type": "application/apply-patch+yaml"},
        timeout=30,
    )
    what = f"{obj['kind']} {meta['name']} ({obj['apiVersion']})"
    if response.status_code >= 400:
        message = response.json().get("message", response.text)
        raise AssertionError(f"{what}: the apiserver refused it: {message}")
    warnings = WARNING.findall(response.headers.get("Warning", ""))
    assert not warnings, f"{what}: the apiserver warns: {'; '.join(warnings)}"
    return response.json()  # type: ignore[no-any-return]


def validate_all(kube: Kube, objects: list[dict[str, Any]]) -> None:
    """Every object as the real apiserver takes it (server-side dry run, strict), in the
    test's namespace; nothing is kept."""
    for obj in objects:
        dry_run(kube, localized(kube, obj))


def install(kube: Kube, objects: list[dict[str, Any]]) -> None:
    """What `helm install` would make, made for real in the test's namespace (render with
    ``namespace=kube.namespace``, so that bindings name the test's ServiceAccounts); the
    test's cleanup deletes it. The Deployment is only a dry run: its pod would start the
    jobs service on the process node, listening on this machine's port 10101."""
    for obj in (localized(kube, o) for o in objects):
        dry_run(kube, obj)
        if obj["kind"] != "Deployment":
            kube.create(obj)


def can_i(kube: Kube, verb: str, resource: str, namespace: str | None, user: str) -> bool:
    """`kubectl auth can-i`: the apiserver's authorizer (RBAC) asked through a
    SubjectAccessReview. ``resource`` as kubectl writes it (``jobs.batch``,
    ``localqueues.visibility.kueue.x-k8s.io/pendingworkloads`` for a subresource)."""
    resource, _, subresource = resource.partition("/")
    name, _, group = resource.partition(".")
    attributes = {"verb": verb, "resource": name, "group": group}
    if subresource:
        attributes["subresource"] = subresource
    if namespace:
        attributes["namespace"] = namespace
    review = kube.api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        json={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": attributes},
        },
    )
    return bool(review["status"].get("allowed"))


def gpuhub_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What gpuhub's own templates made (not the stand-in)."""
    return [
        o
        for o in objects
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "gpuhub"
    ]


def hub_traitlets_config(values: dict[str, Any]) -> Config:
    """hub.config as z2jh's jupyterhub_config.py loads it: one traitlets section per key.

    z2jh 4.4 refuses to start the hub on a section that is no Configurable class name (one
    starting in lower case, e.g. ``hub.config.loadRoles``): so does this."""
    config = Config()
    for section, settings in values["hub"]["config"].items():
        if not section[:1].isupper():
            raise ValueError(f"FATAL: Invalid hub.config section name: {section}.")
        config[section].update(copy.deepcopy(settings))
    return config


def exec_extra_config(values: dict[str, Any], hub_yaml_text: str, tmp_path: Path) -> Config:
    """hub.config and hub.extraConfig as z2jh's hub runs them, with ``hub_yaml_text`` as the
    ConfigMap's hub.yaml it mounts: the traitlets config the hub starts with."""
    path = tmp_path / "hub.yaml"
    path.write_text(hub_yaml_text)
    config = hub_traitlets_config(values)
    # z2jh sets the spawner environment from singleuser.extraEnv before extraConfig runs.
    config.KubeSpawner.environment = {"EXISTING": "1"}
    namespace = {"c": config}
    old = os.environ.get("GPUHUB_HUB_CONFIG")
    os.environ["GPUHUB_HUB_CONFIG"] = str(path)
    try:
        for code in values["hub"]["extraConfig"].values():
            exec(compile(code, "extraConfig", "exec"), namespace)
    finally:
        if old is None:
            del os.environ["GPUHUB_HUB_CONFIG"]
        else:
            os.environ["GPUHUB_HUB_CONFIG"] = old
    return config


def make_spawner(config: Config, groups: list[str]) -> Any:
    """A real GPUSpawner with this config (call inside a running event loop, as the hub does)."""
    from gpuhub import GPUSpawner

    user = SimpleNamespace(
        name="alice", id=1, url="/user/alice/", groups=[SimpleNamespace(name=g) for g in groups]
    )
    return GPUSpawner(_mock=True, user=user, config=config)
