"""Fixtures the deployment tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """KubeSpawner loads a kubeconfig when constructed; these tests never reach a cluster."""
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import kube_config
    from kubespawner import clients

    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "n", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "n", "user": {"token": "unused"}}],
                "contexts": [{"name": "n", "context": {"cluster": "n", "user": "n"}}],
                "current-context": "n",
            }
        )
    )
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    default = Configuration.get_default_copy()
    clients.load_config.cache_clear()
    yield
    clients.load_config.cache_clear()
    Configuration.set_default(default)
