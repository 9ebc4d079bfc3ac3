"""The real kubectl, as an admin runs the commands of docs/admin-guide.md against the test
cluster: the one built with the cluster (localk8s, same Kubernetes release), else the
first on PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.cluster import Kube


def kubectl_binary() -> Path:
    from localk8s.build import binary_path
    from localk8s.components import BY_NAME

    built = binary_path(BY_NAME["kubectl"])
    if built.exists():
        return built
    found = shutil.which("kubectl")
    assert found, f"no kubectl: neither the cluster's build ({built}) nor one on PATH"
    return Path(found)


def kubectl(kube: Kube, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``kubectl ARGS`` with the test cluster's kubeconfig; ``cache`` keeps its discovery
    cache out of the user's home."""
    return subprocess.run(
        [str(kubectl_binary()), f"--kubeconfig={kube.kubeconfig}", f"--cache-dir={cache}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
