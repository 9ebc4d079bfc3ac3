"""A small synchronous Kubernetes client for the launcher: server-side apply, get, delete,
and waiting for a condition. Tests and gpuhub use kubernetes_asyncio; the launcher needs
only these few verbs and must not depend on an event loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

FIELD_MANAGER = "gpuhub-cluster"


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass
class KubeAPI:
    server: str
    ca: Path
    cert: Path
    key: Path
    _resources: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.session = requests.Session()
        # REQUESTS_CA_BUNDLE and proxy variables must not override the cluster's own CA.
        self.session.trust_env = False
        self.session.verify = str(self.ca)
        self.session.cert = (str(self.cert), str(self.key))

    # -- plumbing ----------------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", 30)
        response = self.session.request(method, self.server + path, **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise KubeError(response.status_code, message)
        return response.json() if response.content else None

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) for a kind, from discovery (cached per group version)."""
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for resource in self.request("GET", base)["resources"]:
                if "/" not in resource["name"]:
                    self._resources[(api_version, resource["kind"])] = (
                        resource["name"],
                        resource["namespaced"],
                    )
        if key not in self._resources:
            raise KubeError(404, f"the server does not serve {kind} in {api_version}")
        return self._resources[key]

    def path(self, api_version: str, kind: str, name: str = "", namespace: str = "") -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        scope = f"/namespaces/{namespace or 'default'}" if namespaced else ""
        return f"{base}{scope}/{plural}" + (f"/{name}" if name else "")

    # -- verbs -------------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply, so re-running ``make cluster`` converges instead of failing."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace", ""))
        result: dict[str, Any] = self.request(
            "PATCH",
            path,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            data=yaml.safe_dump(obj),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        return result

    def apply_all(self, objects: Iterable[dict[str, Any]]) -> None:
        for obj in objects:
            self.apply(obj)
            if obj["kind"] == "CustomResourceDefinition":
                self._resources.clear()  # a new kind is served

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Any:
        try:
            return self.request("GET", self.path(api_version, kind, name, namespace))
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> None:
        try:
            self.request("DELETE", self.path(api_version, kind, name, namespace))
        except KubeError as error:
            if error.status != 404:
                raise

    def token(self, namespace: str, service_account: str, seconds: int = 86400 * 30) -> str:
        """A token for a ServiceAccount (the TokenRequest API, as a projected volume gets)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            json=body,
        )
        return str(answer["status"]["token"])


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 0.2
) -> Any:
    """Poll ``check`` until it returns something truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except (requests.RequestException, KubeError, OSError) as error:
            last, result = error, None
        if result:
            return result
        time.sleep(interval)
    detail = f" (last error: {last})" if last else ""
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s{detail}")


def load_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kubeconfig(
    server: str,
    ca: Path,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
    user: str = "admin",
    namespace: str = "default",
) -> str:
    """A kubeconfig for one user of the local cluster."""
    credentials: dict[str, Any] = (
        {"token": token} if token else {"client-certificate": str(cert), "client-key": str(key)}
    )
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "gpuhub", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {
                    "name": f"{user}@gpuhub",
                    "context": {"cluster": "gpuhub", "user": user, "namespace": namespace},
                }
            ],
            "current-context": f"{user}@gpuhub",
        },
        sort_keys=False,
    )
