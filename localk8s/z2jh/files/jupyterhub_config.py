"""The stand-in z2jh hub's config: what zero-to-jupyterhub 4.4.0's own jupyterhub_config.py
does with the values gpuhub sets, written anew (not z2jh's code).

Like z2jh's, it reads the chart's values from the ``hub`` Secret mounted at
/usr/local/etc/jupyterhub/secret/, finds the proxy and the hub by their Services' names and
the kubelet's ``<NAME>_SERVICE_PORT`` variables, keeps the database in the working directory
(/srv/jupyterhub, the ``hub-db-dir`` PVC), runs KubeSpawner in the release's namespace, then
applies ``hub.config`` and runs ``hub.extraConfig`` (gpuhub's), so what gpuhub's chart sets
reaches the hub by the same road as on a real install.
"""

import os
import re
from pathlib import Path
from typing import Any

import yaml

c = get_config()  # noqa: F821  (given by JupyterHub)

SECRET = Path("/usr/local/etc/jupyterhub/secret")
values: dict[str, Any] = yaml.safe_load((SECRET / "values.yaml").read_text()) or {}


def get(path: str, default: Any = None) -> Any:
    """A value by its dotted path (``singleuser.storage.type``), or ``default``."""
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, dict) or node.get(key) is None:
            return default
        node = node[key]
    return node


def secret(key: str) -> str:
    return (SECRET / key).read_text()


def service_port(name: str) -> str:
    """The kubelet's variable for a Service's first port, as z2jh's get_name_env reads it."""
    return os.environ[name.upper().replace("-", "_") + "_SERVICE_PORT"]


def snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.ConfigurableHTTPProxy.api_url = f"http://proxy-api:{service_port('proxy-api')}"
c.ConfigurableHTTPProxy.should_start = False
c.JupyterHub.cleanup_servers = False  # servers outlive a hub restart
c.JupyterHub.last_activity_interval = 60
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.JupyterHub.hub_bind_url = "http://:8081"
c.JupyterHub.hub_connect_url = f"http://hub:{service_port('hub')}"
c.JupyterHub.cookie_secret = secret("hub.config.JupyterHub.cookie_secret").encode()

db_type = get("hub.db.type", "sqlite-pvc")
if db_type == "sqlite-pvc":
    c.JupyterHub.db_url = "sqlite:///jupyterhub.sqlite"
elif db_type == "sqlite-memory":
    c.JupyterHub.db_url = "sqlite://"
else:
    raise ValueError(
        f"FATAL: the stand-in z2jh keeps the hub's database in sqlite; hub.db.type is {db_type!r}"
    )
c.JupyterHub.base_url = get("hub.baseUrl", "/")
c.JupyterHub.allow_named_servers = get("hub.allowNamedServers", False)

c.KubeSpawner.namespace = os.environ.get("POD_NAMESPACE", "default")
release = os.environ.get("HELM_RELEASE_NAME", "")
c.KubeSpawner.common_labels = {
    "app": "jupyterhub",
    "app.kubernetes.io/name": "jupyterhub",
    "app.kubernetes.io/managed-by": "kubespawner",
    **({"release": release, "app.kubernetes.io/instance": release} if release else {}),
}
image = get("singleuser.image.name")
if image:
    tag = get("singleuser.image.tag")
    c.KubeSpawner.image = f"{image}:{tag}" if tag else image
for trait, key in (
    ("node_selector", "nodeSelector"),
    ("environment", "extraEnv"),
    ("start_timeout", "startTimeout"),
    ("default_url", "defaultUrl"),
    ("cmd", "cmd"),
):
    if get("singleuser." + key) is not None:
        setattr(c.KubeSpawner, trait, get("singleuser." + key))

storage = get("singleuser.storage.type", "dynamic")
if storage == "dynamic":
    volume = get("singleuser.storage.dynamic.volumeNameTemplate")
    c.KubeSpawner.storage_pvc_ensure = True
    c.KubeSpawner.pvc_name_template = get("singleuser.storage.dynamic.pvcNameTemplate")
    c.KubeSpawner.storage_capacity = get("singleuser.storage.capacity")
    c.KubeSpawner.storage_access_modes = get("singleuser.storage.dynamic.storageAccessModes")
    if get("singleuser.storage.dynamic.storageClass"):
        c.KubeSpawner.storage_class = get("singleuser.storage.dynamic.storageClass")
    c.KubeSpawner.volumes = [{"name": volume, "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
    c.KubeSpawner.volume_mounts = [
        {"name": volume, "mountPath": get("singleuser.storage.homeMountPath")}
    ]
elif storage != "none":
    raise ValueError(
        f"FATAL: the stand-in z2jh knows singleuser.storage.type dynamic and none; "
        f"{storage!r} given"
    )

# hub.services and hub.loadRoles: maps in values, lists in JupyterHub.
c.JupyterHub.services = [
    {
        "name": name,
        **{snake(k): v for k, v in (service or {}).items() if k != "apiToken"},
        "api_token": secret(f"hub.services.{name}.apiToken"),
    }
    for name, service in get("hub.services", {}).items()
]
c.JupyterHub.load_roles = [
    {"name": name, **(role or {})} for name, role in get("hub.loadRoles", {}).items()
]

for section, settings in get("hub.config", {}).items():
    if not section[:1].isupper():
        raise ValueError(
            f"FATAL: Invalid hub.config section name: {section}. hub.config sections must be "
            "Configurable class names (e.g. JupyterHub)."
        )
    c[section].update(settings)

for key, code in sorted(get("hub.extraConfig", {}).items()):
    exec(compile(code, f"hub.extraConfig.{key}", "exec"), globals())
