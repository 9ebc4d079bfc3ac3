"""GPUSpawner's pod manifests without a cluster: a spawner built from the design's config
(:data:`tests.support.policies.DESIGN_CONFIG`) for a user in some groups, the pod it writes for
some options (checked against the official schema), and the ``no_cluster`` fixture that keeps
KubeSpawner's own client off any cluster while a test builds one.

``no_cluster`` is registered for the folders whose tests use it by their ``conftest.py``; a
module asks for it with ``pytestmark = pytest.mark.usefixtures("no_cluster")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import kube_config
from kubespawner import clients as kubespawner_clients
from traitlets.config import Config

from gpuhub import GPUSpawner
from gpuhub.hub.spawn_options import apply_gpuhub_options
from tests.support.policies import DESIGN_CONFIG

# The Kubernetes release whose schema every manifest is validated against.
K8S_VERSION = "1.31"

# KubeSpawner loads a kubeconfig when constructed; these spawners never reach a cluster.
UNREACHABLE_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: none, user: {token: unused}}]
contexts: [{name: none, context: {cluster: none, user: none, namespace: jupyter}}]
current-context: none
"""


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    path = tmp_path / "kubeconfig"
    path.write_text(UNREACHABLE_KUBECONFIG)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    default = Configuration.get_default_copy()
    kubespawner_clients.load_config.cache_clear()
    yield
    kubespawner_clients.load_config.cache_clear()  # leave no process-wide client config behind
    Configuration.set_default(default)


def make_spawner(groups: list[str], **extra: Any) -> GPUSpawner:
    """alice's GPUSpawner, alice in ``groups``, the design's config with ``extra`` traits."""
    config = Config()
    for key, value in {**DESIGN_CONFIG, **extra}.items():
        setattr(config.GPUSpawner, key, value)
    user = SimpleNamespace(
        name="alice",
        id=1,
        url="/user/alice/",
        groups=[SimpleNamespace(name=g) for g in groups],
    )
    return GPUSpawner(_mock=True, user=user, config=config)


async def manifest(spawner: GPUSpawner, options: dict[str, Any]) -> dict[str, Any]:
    """The pod ``spawner`` writes for ``options``, as JSON, valid for :data:`K8S_VERSION`."""
    spawner.user_options = options
    await apply_gpuhub_options(spawner, options)
    pod = await spawner.get_pod_manifest()
    body = ApiClient().sanitize_for_serialization(pod)
    body.setdefault("apiVersion", "v1")
    body.setdefault("kind", "Pod")
    kubernetes_validate.validate(body, K8S_VERSION, strict=True)
    return body
