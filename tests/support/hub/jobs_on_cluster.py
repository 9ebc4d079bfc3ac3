"""A real JupyterHub with gpuhub's jobs service on the test cluster, under the Helm chart's RBAC:
the one home for the fixtures of the tests that drive the jobs service end to end.

What the chart deploys is made for real in the test's namespace: helm/gpuhub is rendered for
that namespace (``helm template``, harness/helm.py) and its ServiceAccounts, Roles,
ClusterRoles and bindings are created (:func:`install_chart_rbac`). The jobs service
(``python -m gpuhub.service``, its own process) and the hub each get a kubeconfig holding a
token of their chart ServiceAccount from the TokenRequest API (:func:`account_kubeconfig`):
``gpuhub-service``, and z2jh's ``hub`` with gpuhub's capacity ClusterRole and the fleet page's
cancel Role. Neither is the cluster's admin, so a permission the chart lacks fails the test
that needs it.

:func:`jobs_on_cluster` starts the lot. With ``ledger=True`` the hub runs GPUSpawner
(harness/hub/kube.py) and gpuhub's ledger endpoints, and the service asks it for every
submit; without, it is a plain JupyterHub with no gpuhub endpoints and no cluster access, and
the service counts quotas by itself (its fallback).
"""

from __future__ import annotations

import secrets
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from harness.cluster import Kube
from harness.helm import make_chart, render
from harness.hub.kube import hub_config
from harness.hub.process import Hub, free_port, start_hub
from harness.kube_faults import FaultProxy, proxy_for
from localk8s.kubeapi import kubeconfig
from tests.support.jobs_service import RunningService, jobs_service
from tests.support.policies import CLUSTER_CONFIG

SERVICE_ACCOUNT = "gpuhub-service"  # the chart's, for the jobs service
HUB_SERVICE_ACCOUNT = "hub"  # z2jh's, which the chart binds its hub roles to
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
JOB_IMAGE = "ghcr.io/gpuhub/gpuhub-notebook:0.1.0"
# What a user's token for the jobs service carries (the chart's user role, and the groups
# read the service needs to apply the user's limits).
USER_SCOPES = ["access:services!service=gpuhub", "read:users:groups!user"]
# The service's policy: the design policy with the test cluster's GPU types.
CLUSTER_POLICY = CLUSTER_CONFIG


def install_chart_rbac(
    kube: Kube, folder: Path, values: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Create the chart's ServiceAccounts, Roles, ClusterRoles and bindings, and z2jh's Role
    for the hub, rendered with ``values`` for the test's namespace (the test's cleanup deletes
    them). Returns them."""
    folder.mkdir(parents=True, exist_ok=True)
    values = dict(values or {})
    values["jupyterhub"] = {**values.get("jupyterhub", {}), "rbac": {"create": True}}
    objects = render(make_chart(folder), values=values, namespace=kube.namespace, tmp=folder)
    made = [o for o in objects if o["kind"] in RBAC_KINDS]
    for obj in made:
        kube.create(obj)
    return made


def account_kubeconfig(kube: Kube, account: str, path: Path) -> Path:
    """A kubeconfig for ServiceAccount ``account`` of the test's namespace (a token from the
    TokenRequest API, as a pod's projected volume holds), written to ``path``."""
    token = kube.api.token(kube.namespace, account, seconds=6 * 3600)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        kubeconfig(
            kube.api.server, kube.api.ca, token=token, user=account, namespace=kube.namespace
        )
    )
    return path


@dataclass
class JobsOnCluster:
    """The running hub and jobs service, and the cluster they act on."""

    hub: Hub
    service: RunningService
    kube: Kube
    service_token: str  # the service's JupyterHub API token
    service_kubeconfig: Path  # the service's credentials (its ServiceAccount)
    faults: FaultProxy | None  # between the service and the apiserver, with ``faults=True``

    @property
    def url(self) -> str:
        """The service's own URL, ``.../services/gpuhub/``."""
        return self.service.url

    def token(self, user: str, scopes: Sequence[str] = USER_SCOPES) -> str:
        """A JupyterHub token of ``user`` with ``scopes``."""
        answer = self.hub.api(
            "POST", f"/users/{user}/tokens", json={"scopes": list(scopes), "note": "test"}
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["token"])

    def call(
        self, method: str, path: str, token: str | None = None, **kwargs: Any
    ) -> requests.Response:
        """``method`` on the service's ``path`` (relative to its URL) with a user's token."""
        headers = dict(kwargs.pop("headers", {}))
        if token:
            headers["Authorization"] = f"token {token}"
        return requests.request(method, self.url + path, headers=headers, timeout=60, **kwargs)

    def holdings(self, user: str) -> dict[str, Any]:
        """What the hub's ledger says ``user`` holds (``ledger=True``), asked as the service."""
        answer = requests.get(
            f"{self.hub.api_url}/gpuhub/holdings/{user}",
            headers={"Authorization": f"token {self.service_token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def held(self, user: str) -> int:
        """How many GPUs the hub's ledger says ``user`` holds (``ledger=True``): given
        (pods bound to a node), not what waits for them."""
        return int(self.holdings(user)["held"])

    def counted(self, user: str) -> int:
        """What counts against ``user``'s quota: held, and waiting (a job queued in Kueue,
        a pod not bound yet)."""
        holdings = self.holdings(user)
        return int(holdings["held"] + holdings["waiting"])


def _hub_settings(
    port: int,
    token: str,
    users: Mapping[str, Sequence[str]],
    ledger: bool,
    quota: Mapping[str, Any] | None,
) -> str:
    groups: dict[str, dict[str, list[str]]] = {}
    for user, user_groups in users.items():
        for group in user_groups:
            groups.setdefault(group, {"users": []})["users"].append(user)
    # The chart's loadRoles (helm/gpuhub/values.yaml); the grants scope exists with the ledger.
    scopes = ["read:users:name", "read:users:groups"] + (["custom:gpuhub:grants"] if ledger else [])
    settings = f"""
        c.JupyterHub.services.append(
            {{"name": "gpuhub", "url": "http://127.0.0.1:{port}", "api_token": {token!r},
              "display": False}}
        )
        c.JupyterHub.load_roles.append(
            {{"name": "user", "scopes": ["self", "access:services!service=gpuhub"]}}
        )
        c.JupyterHub.load_roles.append(
            {{"name": "gpuhub-service", "services": ["gpuhub"], "scopes": {scopes!r}}}
        )
        c.JupyterHub.load_groups = {groups!r}
        c.Authenticator.allowed_users = {sorted(users)!r}
        """
    if ledger:
        settings += f"""
        from gpuhub.hub.web.api import configure_hub
        configure_hub(c)
        c.GPUSpawner.gpu_quota = {dict(quota) if quota else None!r}
        """
    return textwrap.dedent(settings)


def start_chart_hub(
    kube: Kube,
    workdir: Path,
    extra: str = "",
    chart_values: dict[str, Any] | None = None,
    port: int | None = None,
) -> Hub:
    """A hub with GPUSpawner spawning into the test's namespace as the chart runs it: under
    z2jh's ``hub`` ServiceAccount with the chart's roles (installed here unless they are)."""
    if kube.get("ServiceAccount", HUB_SERVICE_ACCOUNT) is None:
        install_chart_rbac(kube, workdir / "chart", chart_values)
    config = account_kubeconfig(kube, HUB_SERVICE_ACCOUNT, workdir / "hub-kubeconfig")
    return start_hub(
        workdir / "hub",
        hub_config(kube.namespace, extra),
        port=port,
        env={"KUBECONFIG": str(config)},
    )


@contextmanager
def jobs_on_cluster(
    kube: Kube,
    workdir: Path,
    *,
    users: Mapping[str, Sequence[str]],
    service_config: Mapping[str, Any],
    ledger: bool = False,
    hub_extra: str = "",
    chart_values: dict[str, Any] | None = None,
    faults: bool = False,
    service_env: dict[str, str] | None = None,
) -> Iterator[JobsOnCluster]:
    """Start the hub and the jobs service for ``kube``'s namespace; stop them after.

    ``users``: each user's hub groups (the users are created). ``service_config``: the
    service's ``service.yaml`` over the defaults (this namespace, :data:`CLUSTER_POLICY`,
    :data:`JOB_IMAGE`); with ``ledger`` its ``gpu_quota`` is the hub's ``gpu_quota`` too.
    ``chart_values``: Helm values for the chart whose RBAC both run under (say
    ``{"jobs": {"kueue": {"queueName": ...}}}`` with a Kueue queue). ``faults``: the service
    talks to the apiserver through a :class:`FaultProxy` (with its own token).
    """
    install_chart_rbac(kube, workdir / "chart", chart_values)
    config = {
        "namespace": kube.namespace,
        "policy": CLUSTER_POLICY,
        "job_image": JOB_IMAGE,
        **service_config,
    }
    port, hub_port = free_port(), free_port()
    token = secrets.token_hex(24)
    settings = _hub_settings(port, token, users, ledger, config.get("gpu_quota"))
    with ExitStack() as stack:
        # The service first, as its pod is up before a restarted hub's: JupyterHub 6 waits
        # for each service with a URL when it starts (up to the service's ``timeout``, 30 s).
        service_kubeconfig = account_kubeconfig(
            kube, SERVICE_ACCOUNT, workdir / "service-kubeconfig"
        )
        proxy = None
        if faults:
            proxy = proxy_for(service_kubeconfig, workdir)
            stack.callback(proxy.stop)
        running = stack.enter_context(
            jobs_service(
                workdir / "service",
                config,
                hub_api_url=f"http://127.0.0.1:{hub_port}/hub/api",
                token=token,
                port=port,
                kubeconfig=proxy.kubeconfig if proxy else service_kubeconfig,
                extra_env=service_env,
            )
        )
        extra = settings + textwrap.dedent(hub_extra)
        if ledger:
            hub = start_chart_hub(kube, workdir, extra, port=hub_port)
        else:
            hub = start_hub(workdir / "hub", extra, port=hub_port)
        stack.callback(hub.stop)
        for user in users:
            created = hub.api("POST", f"/users/{user}")
            assert created.status_code in (201, 409), created.text
        yield JobsOnCluster(hub, running, kube, token, service_kubeconfig, proxy)
