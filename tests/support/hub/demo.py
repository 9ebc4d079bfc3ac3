"""`make demo`'s hub for tests: jupyter_config/jupyterhub_config.py as it is, on free ports.

The walk a newcomer takes (log in, the form, a lab, the fleet page as the demo's admin) runs
against the demo's own config, loaded with ``load_subconfig``: its users, groups, quota,
simulated GPUs, admin and shared password. The test only adds what a test needs: free ports,
the API token of harness.hub.process, a quick monitor and the lab extension just built
(as ``make demo`` installs it).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.hub.process import Hub, free_port, start_hub
from harness.jupyter.server import expose_lab_extension
from harness.paths import REPO

DEMO_CONFIG = REPO / "jupyter_config" / "jupyterhub_config.py"
DEMO_PASSWORD = "gpuhub-demo"
DEMO_ADMIN = "alice"


def demo_config(workdir: Path, port: int, *, gpus: str = "simulated:4", extra: str = "") -> str:
    """The demo's config for a hub in ``workdir`` on ``port``, then ``extra``."""
    expose_lab_extension(workdir)
    environment = {
        "JUPYTER_CONFIG_DIR": str(workdir / "config"),
        "JUPYTER_DATA_DIR": str(workdir / "data"),
        # In a virtualenv Jupyter prefers the env's copy of the extension (installed by
        # `pip install -e .`, possibly older) over the fresh build linked in the data dir.
        "JUPYTER_PREFER_ENV_PATH": "0",
    }
    return f"""
import os
os.environ["GPUHUB_DEMO_PORT"] = "{port}"
os.environ["GPUHUB_DEMO_GPUS"] = {gpus!r}
os.environ.pop("GPUHUB_DEMO_PASSWORD", None)
os.environ.pop("GPUHUB_DEMO_IP", None)
load_subconfig({str(DEMO_CONFIG)!r})
c.JupyterHub.hub_port = {free_port()}
# The tests' API token (harness.hub.process) is an admin service.
c.JupyterHub.load_roles.append({{"name": "admin", "services": ["gpuhub-test"]}})
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.LocalGPUSpawner.home_dir_template = {str(workdir / "gpuhub-users" / "{username}")!r}
c.Spawner.environment = {json.dumps(environment)}
{extra}
"""


def start_demo_hub(workdir: Path, *, gpus: str = "simulated:4", extra: str = "") -> Hub:
    """Start the demo's hub in ``workdir``; log in with :data:`DEMO_PASSWORD`."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    return start_hub(workdir, demo_config(workdir, port, gpus=gpus, extra=extra), port=port)


def log_in(page: object, hub: Hub, user: str) -> None:
    """Log ``user`` in through the demo's login page (Playwright ``page``)."""
    hub.log_in_browser(page, user, DEMO_PASSWORD)
