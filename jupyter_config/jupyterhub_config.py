"""JupyterHub config for the local demo (`make demo`): one workstation, LocalGPUSpawner.

Every server runs as the hub's own OS user in ./gpuhub-users/<name> (``run_as_hub_user``),
so nothing needs root or system accounts, and so every user can read every other user's files
and API tokens: the hub refuses to start servers on an address other than loopback
(GPUHUB_DEMO_IP) unless LocalGPUSpawner.run_as_hub_user_acknowledge_shared_account is set. Users log in with any of the names below and the
shared password ``gpuhub-demo``; ``alice`` is the demo's GPU fleet admin (the fleet page: every
user's GPUs, stop a server or cancel a job with a reason).

GPUHUB_DEMO_GPUS picks the GPUs: ``auto`` (the default) hands out this machine's NVIDIA GPUs,
or 4 simulated GPUs when there is no driver (the lab charts their notebooks' CPU and memory,
labelled "simulated"); ``simulated:N`` for N simulated GPUs; ``0,1`` for those indices.
Production configs never simulate: ``LocalGPUSpawner.gpu_devices`` defaults to ``"auto"``.
"""

import os
import warnings

from gpuhub.hub_api import configure_hub

# JupyterHub 5's own event schemas give their version as a number, which jupyter_events warns
# about at every start; nothing a demo user can act on.
warnings.filterwarnings("ignore", message="The `version` property of an event schema")

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

c.JupyterHub.ip = os.environ.get("GPUHUB_DEMO_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("GPUHUB_DEMO_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
# The hub's own port and the proxy's API follow the public one (8081 and 8001 for 8000, as
# JupyterHub's defaults), so a demo moved off a taken port does not collide on those either.
c.JupyterHub.hub_port = c.JupyterHub.port + 81
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{c.JupyterHub.port + 1}"

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ.get("GPUHUB_DEMO_PASSWORD", "gpuhub-demo")
c.Authenticator.allow_all = True
# The demo's GPU fleet admin: the fleet page (GPUs in the hub's menu) shows her everyone's
# GPUs, and she may stop their servers and cancel their jobs with a reason. By gpuhub's own
# scope rather than JupyterHub's admin role, which the shared password never grants
# (SharedPasswordAuthenticator asks admins for a separate admin password).
DEMO_ADMIN = "alice"
c.JupyterHub.load_roles = [
    {"name": "gpu-fleet-admin", "users": [DEMO_ADMIN], "scopes": ["self", "custom:gpuhub:fleet"]}
]
c.JupyterHub.load_groups = {
    "staff": {"users": ["alice"]},
    "students": {"users": ["bob", "carol"]},
}

c.JupyterHub.spawner_class = "gpu-local"
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 60
c.LocalGPUSpawner.run_as_hub_user = True


def _demo_gpus(value: str) -> tuple[object, str]:
    """``LocalGPUSpawner.gpu_devices`` for GPUHUB_DEMO_GPUS, and how the banner says it."""
    if value in ("", "auto"):
        from gpuhub.devices import discover

        found = discover()
        if found.devices:
            names = ", ".join(f"{d.index} ({d.name})" for d in found.devices)
            return "auto", f"this machine's GPUs {names}"
        value = "simulated:4"
    if value.startswith("simulated:"):
        count = value.removeprefix("simulated:")
        return value, (
            f"{count} simulated GPUs (no NVIDIA driver here; the lab charts each notebook's "
            "CPU and memory as its GPU figures)"
        )
    indices = [int(i) for i in value.split(",") if i.strip()]
    return indices, "GPUs " + ", ".join(map(str, indices)) + " (pretend: nothing reads them)"


c.LocalGPUSpawner.gpu_devices, _gpus_said = _demo_gpus(
    os.environ.get("GPUHUB_DEMO_GPUS", "auto").strip()
)
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": float(os.cpu_count() or 2), "default": 1}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "16G", "default": "2G"}
c.LocalGPUSpawner.group_limits = {"staff": {"max_gpus": 4}, "students": {"max_gpus": 1}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 1}
# At most this many GPUs per user at once, across named servers and their jobs.
c.LocalGPUSpawner.gpu_quota = {"default": 1, "groups": {"staff": 4}}
c.JupyterHub.allow_named_servers = True
# The hub's GPU ledger endpoints: the lab's GPU sidebar shows what each user holds.
configure_hub(c)

_pw = c.SharedPasswordAuthenticator.user_password
print(
    f"\n  gpuhub demo: open http://{c.JupyterHub.ip}:{c.JupyterHub.port}/ and log in as alice"
    f" (staff, up to 4 GPUs),\n  bob or carol (students, 1 GPU each) with password '{_pw}'.\n"
    f"  {DEMO_ADMIN} is the demo's GPU fleet admin: GPUs in the hub's menu"
    f" (http://{c.JupyterHub.ip}:{c.JupyterHub.port}/hub/gpuhub/fleet)\n"
    "  shows everyone's GPUs, and stops a server or cancels a job with a reason.\n"
    f"  GPUs offered: {_gpus_said}.\n"
    "  Warning: all users' servers run as one OS account (run_as_hub_user), so every user\n"
    "  can read every other user's files and API tokens; keep the demo on 127.0.0.1.\n",
    flush=True,
)
