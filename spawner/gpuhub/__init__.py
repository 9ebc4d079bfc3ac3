"""gpuhub: GPU spawn form, spawners and jobs for JupyterHub on GPU clusters and workstations.

Where code runs is the folder it lives in (docs/architecture.md, "Layers"): ``core`` (every
process), ``k8s`` (the Kubernetes API), ``hub`` (the JupyterHub process), ``jobs`` (the user's
server, the jobs service and a job's pod) and ``service`` (the jobs service).

The names admins write in their config are served from here, lazily, so that
``import gpuhub`` (e.g. from the job API in a user server) does not pull in JupyterHub or
KubeSpawner: ``gpuhub.GPUSpawner``, ``gpuhub.LocalGPUSpawner`` and ``gpuhub.configure_hub``.
The module paths of gpuhub 0.1 (``gpuhub.kube``, ``gpuhub.local``, ``gpuhub.hub_api``) still
import, as aliases of their new homes, because configs and Helm values name them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from gpuhub.hub.gpu_spawner import GPUSpawner
    from gpuhub.hub.local_gpu_spawner import LocalGPUSpawner
    from gpuhub.hub.web.api import configure_hub

__all__ = ["GPUSpawner", "LocalGPUSpawner", "__version__", "configure_hub"]

_EXPORTS = {
    "GPUSpawner": "gpuhub.hub.gpu_spawner",
    "LocalGPUSpawner": "gpuhub.hub.local_gpu_spawner",
    "configure_hub": "gpuhub.hub.web.api",
}

# Module paths admins' configs may still name (spawner_class strings, extraConfig imports).
LEGACY_MODULES = {
    "gpuhub.kube": "gpuhub.hub.gpu_spawner",
    "gpuhub.local": "gpuhub.hub.local_gpu_spawner",
    "gpuhub.hub_api": "gpuhub.hub.web.api",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gpuhub' has no attribute {name!r}")


class _LegacyLoader(importlib.abc.Loader):
    """Loads an old module path as the very module object of its new home."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(LEGACY_MODULES[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name


class _LegacyFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LEGACY_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, _LegacyLoader())


if not any(isinstance(finder, _LegacyFinder) for finder in sys.meta_path):
    sys.meta_path.append(_LegacyFinder())
