"""What both demos share (`make demo`: jupyterhub_config.py; `make demo-k8s`:
jupyterhub_config_k8s.py): where the hub listens, who logs in, who is the fleet admin, and
the limits of each group. Imported by both config files (they put this folder on sys.path).
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import warnings
from typing import Any

from gpuhub import configure_hub

# The demo's GPU fleet admin: the fleet page (GPUs in the hub's menu) shows her everyone's
# GPUs, she may stop their servers and cancel their jobs with a reason, grant extra GPU-hours
# of budgets, and read /hub/metrics: what the README says admins do. By gpuhub's own scopes
# and read:metrics rather than JupyterHub's admin role, which the shared password never
# grants (SharedPasswordAuthenticator asks admins for a separate admin password).
DEMO_ADMIN = "alice"
FLEET_ADMIN_SCOPES = ["custom:gpuhub:fleet", "custom:gpuhub:budgets", "read:metrics"]
GROUP_LIMITS = {"staff": {"max_gpus": 4}, "students": {"max_gpus": 1}}
DEFAULT_LIMITS = {"max_gpus": 1}
# At most this many GPUs per user at once, across named servers and their jobs.
GPU_QUOTA = {"default": 1, "groups": {"staff": 4}}


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens on it on loopback, else a port the kernel picks."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free port on 127.0.0.1")


def _stop_proxy() -> None:
    """At the hub's exit, stop the proxy it started if it still runs."""
    from jupyterhub.app import JupyterHub

    if not JupyterHub.initialized():
        return
    process = getattr(getattr(JupyterHub.instance(), "proxy", None), "proxy_process", None)
    if process is None or process.poll() is not None:
        return
    print(f"  stopping the hub's proxy (pid {process.pid}): the hub has exited", flush=True)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def configure_demo(c: Any) -> str:
    """Set what both demos share on ``c``; returns the banner's lines about logging in."""
    # JupyterHub 5's own event schemas give their version as a number (6 gives a string), which
    # jupyter_events warns about at every start; nothing a demo user can act on.
    warnings.filterwarnings("ignore", message="The `version` property of an event schema")
    c.JupyterHub.ip = os.environ.get("GPUHUB_DEMO_IP", "127.0.0.1")
    c.JupyterHub.port = int(os.environ.get("GPUHUB_DEMO_PORT", "8000"))
    c.JupyterHub.hub_ip = "127.0.0.1"
    # The hub's own port and the proxy's API follow the public one (8081 and 8001 for 8000,
    # as JupyterHub's defaults) where those are free, else any free port: a hub that cannot
    # bind its port exits after starting its proxy.
    c.JupyterHub.hub_port = free_port(c.JupyterHub.port + 81)
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{free_port(c.JupyterHub.port + 1)}"
    # JupyterHub starts the proxy in a session of its own and stops it only on a signal (on
    # Linux), so a hub that fails after starting it would leave it holding the demo's port.
    atexit.register(_stop_proxy)

    c.JupyterHub.authenticator_class = "shared-password"
    password = os.environ.get("GPUHUB_DEMO_PASSWORD", "gpuhub-demo")
    c.SharedPasswordAuthenticator.user_password = password
    c.Authenticator.allow_all = True
    c.JupyterHub.load_roles = [
        {
            "name": "gpu-fleet-admin",
            "users": [DEMO_ADMIN],
            "scopes": ["self", *FLEET_ADMIN_SCOPES],
        }
    ]
    c.JupyterHub.load_groups = {
        "staff": {"users": ["alice"]},
        "students": {"users": ["bob", "carol"]},
    }
    c.Spawner.default_url = "/lab"
    c.JupyterHub.allow_named_servers = True
    # The hub's GPU ledger endpoints: the lab's GPU sidebar shows what each user holds.
    configure_hub(c)
    url = f"http://{c.JupyterHub.ip}:{c.JupyterHub.port}"
    return (
        f"  open {url}/ and log in as alice (staff, up to 4 GPUs),\n"
        f"  bob or carol (students, 1 GPU each) with password '{password}'.\n"
        f"  {DEMO_ADMIN} is the demo's GPU fleet admin: GPUs in the hub's menu"
        f" ({url}/hub/gpuhub/fleet)\n"
        "  shows everyone's GPUs, stops a server or cancels a job with a reason and grants\n"
        f"  extra GPU-hours; she also reads {url}/hub/metrics.\n"
    )
