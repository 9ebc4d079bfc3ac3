"""gpuhub_lab: the JupyterLab side of gpuhub.

A Jupyter server extension (GPU metrics sampler, jobs REST API) and IPython magics. Imports
are lazy: ``%load_ext gpuhub_lab`` must stay fast (docs/architecture.md budget) and a plain ``import``
must not start anything.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "gpuhub_lab"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "gpuhub"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Enabled by jupyter_config/jupyter_server_config.d/gpuhub_lab.json."""
    import os

    from gpuhub.core.env import MACHINERY_ENV

    # This server is Jupyter's machinery, not a GPU user; the kernels it starts from now on
    # are (simulated GPUs count by this mark: gpuhub.core.simulated).
    os.environ.pop(MACHINERY_ENV, None)
    server_app.log.info("gpuhub_lab %s loaded", __version__)
    from .metrics.handlers import setup_metrics

    setup_metrics(server_app)
    from .jobs_api import setup_jobs

    setup_jobs(server_app)
    from .holdings import setup_holdings

    setup_holdings(server_app)
    from .bookings import setup_bookings

    setup_bookings(server_app)
    from .reclaim_api import setup_reclaim

    setup_reclaim(server_app)


def _unload_jupyter_server_extension(server_app: Any) -> None:
    """Called by jupyter_server on shutdown: stop background threads."""
    from .metrics.handlers import teardown_metrics

    teardown_metrics(server_app)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext gpuhub_lab``: register gpuhub's magics."""
    from .gpu_magic import register as register_gpu_magic

    register_gpu_magic(ipython)
    from .jobs_magics import register as register_job_magics

    register_job_magics(ipython)
