"""The environment contract: every variable gpuhub sets for the processes it starts, and reads
back, in one place.

The job runner (:mod:`gpuhub.jobs.run_notebook`) runs in job pods without gpuhub, so it keeps
copies of the names it reads; ``tests/core/test_env.py`` checks that they agree with these.
"""

from __future__ import annotations

from collections.abc import Mapping

# Set on a server's Jupyter machinery (not its kernels) on simulated GPUs: its CPU is not GPU
# work, so the simulated utilization leaves it out.
MACHINERY_ENV = "GPUHUB_SIMULATED_MACHINERY"


def server_of(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(user, server name) of a process of a single-user server, from its environment:
    processes of a server (its kernels and their children) inherit JupyterHub's variables."""
    user = environ.get("JUPYTERHUB_USER")
    return (user, environ.get("JUPYTERHUB_SERVER_NAME", "")) if user else None
