"""gpuhub: GPU spawn form, spawners and jobs for JupyterHub on GPU clusters and workstations.

The spawners are imported lazily so that ``import gpuhub`` (e.g. from the job API in a user
server) does not pull in JupyterHub or KubeSpawner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .kube import GPUSpawner
    from .local import LocalGPUSpawner

__all__ = ["GPUSpawner", "LocalGPUSpawner", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "GPUSpawner":
        from .kube import GPUSpawner

        return GPUSpawner
    if name == "LocalGPUSpawner":
        from .local import LocalGPUSpawner

        return LocalGPUSpawner
    raise AttributeError(f"module 'gpuhub' has no attribute {name!r}")
