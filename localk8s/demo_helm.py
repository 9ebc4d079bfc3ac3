"""``make demo-helm`` / ``make demo-helm-down``: gpuhub installed as admins install it.

``up``: starts the local cluster if it is not running (docs/cluster.md), then
`helm upgrade --install gpuhub helm/gpuhub -n gpuhub-helm --create-namespace -f
localk8s/values-local.yaml` (z2jh from :mod:`localk8s.charts`), so the hub, the proxy and the
jobs service run as the chart's own pods on the process node; waits until the hub answers
through the proxy (Service ``proxy-public``) and prints one line: the URL and the password.
``down``: `helm uninstall` and the namespace removed, waiting until both are gone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from .charts import HELM, LOCAL_VALUES, installable
from .kubeapi import KubeAPI
from .launcher import DEFAULT_ROOT, ClusterError, Launcher
from .nodes import DEFAULT_NODES_FILE

RELEASE = "gpuhub"
NAMESPACE = "gpuhub-helm"
PASSWORD_ENV = "GPUHUB_DEMO_PASSWORD"
DEFAULT_PASSWORD = "gpuhub-demo"  # as values-local.yaml, `make demo` and `make demo-k8s`
TIMEOUT = 600.0


def helm(kubeconfig: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """Helm with the cluster's kubeconfig and its cache and config kept under .demo-helm."""
    home = Path(__file__).resolve().parents[1] / ".demo-helm" / "helm"
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[name] = str(home / name.lower())
    return subprocess.run(
        [str(HELM), *map(str, args)], capture_output=True, text=True, env=env, timeout=TIMEOUT
    )


def hub_url(api: KubeAPI, namespace: str = NAMESPACE) -> str:
    """proxy-public's ClusterIP and port: on this cluster a loopback address the process
    node's Service proxy listens on."""
    service = api.get("v1", "Service", "proxy-public", namespace)
    if service is None:
        raise ClusterError(f"the Service proxy-public is missing from namespace {namespace}")
    port = service["spec"]["ports"][0]["port"]
    ip = service["spec"]["clusterIP"]
    return f"http://{ip}/" if port == 80 else f"http://{ip}:{port}/"


def wait_for_hub(url: str, timeout: float = TIMEOUT) -> None:
    """Until the hub answers its API through the proxy (``GET hub/api`` is 200)."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            answer = requests.get(url + "hub/api", timeout=5)
            if answer.status_code == 200:
                return
            last = f"HTTP {answer.status_code}"
        except requests.RequestException as error:
            last = str(error)
        time.sleep(1)
    raise ClusterError(f"the hub did not answer at {url}hub/api within {timeout:.0f} s: {last}")


def install(
    kubeconfig: Path,
    chart: Path,
    *extra: str,
    namespace: str = NAMESPACE,
    values: Path = LOCAL_VALUES,
) -> None:
    """`helm upgrade --install` of ``chart`` with the local values (and ``extra`` options),
    waiting until its Deployments are ready and its PVC bound."""
    args: list[str | Path] = ["upgrade", "--install", RELEASE, chart, "-n", namespace]
    args += ["--create-namespace", "-f", values, "--wait", "--timeout", "10m", *extra]
    password = os.environ.get(PASSWORD_ENV)
    if password:
        key = "jupyterhub.hub.config.SharedPasswordAuthenticator.user_password"
        args += ["--set-string", f"{key}={password}"]
    result = helm(kubeconfig, *args)
    if result.returncode != 0:
        raise ClusterError(f"helm upgrade --install failed: {result.stderr.strip()}")


def uninstall(kubeconfig: Path, api: KubeAPI, namespace: str = NAMESPACE) -> None:
    """`helm uninstall`, then the namespace, waiting until it is gone."""
    result = helm(kubeconfig, "uninstall", RELEASE, "-n", namespace, "--wait")
    if result.returncode != 0 and "not found" not in result.stderr:
        raise ClusterError(f"helm uninstall failed: {result.stderr.strip()}")
    if api.get("v1", "Namespace", namespace) is not None:
        api.delete("v1", "Namespace", namespace)
    deadline = time.monotonic() + TIMEOUT
    while api.get("v1", "Namespace", namespace) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {namespace} was not removed within {TIMEOUT:.0f} s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localk8s.demo_helm")
    parser.add_argument("action", choices=["up", "down"])
    action = parser.parse_args(argv).action
    root = Path(os.environ.get("GPUHUB_CLUSTER_ROOT", DEFAULT_ROOT))
    launcher = Launcher(root, DEFAULT_NODES_FILE, gpus=4)
    try:
        if action == "down":
            if not launcher.cluster.kubeconfig.exists():
                print("make demo-helm-down: no cluster, nothing installed")
                return 0
            uninstall(launcher.cluster.kubeconfig, launcher.cluster.api())
            print(f"gpuhub uninstalled; namespace {NAMESPACE} removed")
            return 0
        launcher.up()  # starts the cluster unless it runs; one line below is all it says
        kubeconfig = launcher.cluster.kubeconfig
        with tempfile.TemporaryDirectory(prefix="gpuhub-chart-") as tmp:
            chart, source = installable(Path(tmp))
            install(kubeconfig, chart)
        url = hub_url(launcher.cluster.api())
        wait_for_hub(url)
    except (ClusterError, ValueError) as error:
        print(f"make demo-helm: {error}", file=sys.stderr)
        return 1
    password = os.environ.get(PASSWORD_ENV) or DEFAULT_PASSWORD
    print(
        f"gpuhub (Helm release {RELEASE}, namespace {NAMESPACE}, {source}): open {url} and log "
        f"in as alice, bob or carol with password '{password}'",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
