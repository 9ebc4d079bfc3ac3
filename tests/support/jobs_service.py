"""Shared by the Kubernetes-mode job tests: notebooks, requests, the manifests' checks
(offline schemas and the real apiserver's dry run) and the jobs service as its own process.

Job pods really run on the test cluster's process node (localk8s/agent), so the runner,
papermill and the service's log parsing are exercised end to end there.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import nbformat

from gpuhub.core.policy import Policy
from gpuhub.jobs.kinds import of_object
from gpuhub.jobs.model import JobRequest, Runtimes
from harness import e2e
from harness.cluster import Kube
from tests.support.policies import cluster_policy, design_policy

K8S_VERSION = "1.30"

NOTEBOOK_OK = [
    "epochs = 1",  # tagged "parameters" below
    "print(f'training for {epochs} epochs')\nresult = epochs * 2",
    "print('result', result)",
]
NOTEBOOK_FAILS = ["x = 1", "raise ValueError('loss is NaN')"]


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for n, source in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source)
        if n == 0:
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb))
    return path


# The Kubeflow Trainer runtime the test cluster has (localk8s/addons.py), offered to
# the requests made here so that a TrainJob request parses.
RUNTIMES = Runtimes(("torch-distributed",), "torch-distributed")


def make_request(
    root: Path,
    notebook: str = "train.ipynb",
    groups=("staff",),
    *,
    policy: Policy | None = None,
    runtimes: Runtimes = RUNTIMES,
    **body: Any,
):
    raw = {"notebook": notebook, **body}
    return JobRequest.parse(
        raw, policy=policy or design_policy(), groups=list(groups), root_dir=root, runtimes=runtimes
    )


def cluster_request(root: Path, notebook: str = "train.ipynb", **body: Any) -> JobRequest:
    """A request under the test cluster's GPU types (:func:`cluster_policy`): ``a100`` jobs
    run on kwok's fake nodes (until ``kube.finish_job``), ``local`` and CPU-only jobs on the
    process node, where papermill really runs the notebook."""
    return make_request(root, notebook, policy=cluster_policy(), **body)


def validate(manifest: dict[str, Any]) -> None:
    """The official schema, strict (unknown fields are errors)."""
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def accepted(kube: Kube, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the real apiserver answers to creating ``manifest`` in the test's namespace with
    ``dryRun=All`` and strict field validation: the object as it would be stored, after the
    webhooks of the operator that serves its kind. Raises ``KubeError`` on a refusal."""
    obj = copy.deepcopy(manifest)
    meta = obj.setdefault("metadata", {})
    _, namespaced = kube.api._resource(obj["apiVersion"], obj["kind"])
    if namespaced:
        meta["namespace"] = kube.namespace
    path = kube.api.path(obj["apiVersion"], obj["kind"], "", meta.get("namespace", ""))
    params = {"dryRun": "All", "fieldValidation": "Strict"}
    return kube.api.request("POST", path, json=obj, params=params)  # type: ignore[no-any-return]


def container_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The primary pod's container, as the object says it."""
    return of_object(obj).primary_container(obj)


@dataclass(frozen=True)
class RunningService:
    """The jobs service's URL, its process and its log."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path


@contextmanager
def jobs_service(
    workdir: Path,
    config: dict[str, Any],
    *,
    hub_api_url: str,
    token: str,
    port: int,
    kubeconfig: Path,
    extra_env: dict[str, str] | None = None,
) -> Iterator[RunningService]:
    """``python -m gpuhub.service`` as its own process, registered with the hub at
    ``hub_api_url`` as the service ``gpuhub`` with ``token``; yielded once healthy."""
    e2e.require("the jobs service")
    import requests
    import yaml

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "service.yaml").write_text(yaml.safe_dump(config))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "GPUHUB_"))},
        "JUPYTERHUB_API_TOKEN": token,
        "JUPYTERHUB_API_URL": hub_api_url,
        "JUPYTERHUB_SERVICE_NAME": "gpuhub",
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "JUPYTERHUB_SERVICE_PREFIX": "/services/gpuhub/",
        "KUBECONFIG": str(kubeconfig),
        "GPUHUB_LOG_LEVEL": "DEBUG",
        **(extra_env or {}),
    }
    log_path = workdir / "service.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuhub.service", "--config", str(workdir / "service.yaml")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/services/gpuhub/"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited:\n{log_path.read_text()}")
            try:
                if requests.get(url + "health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the service did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield RunningService(url, proc, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
