"""JupyterHub config for the local demo (`make demo`): one workstation, LocalGPUSpawner.

Every server runs as the hub's own OS user in ./gpuhub-users/<name> (``run_as_hub_user``),
so nothing needs root or system accounts, and so every user can read every other user's files
and API tokens: the hub refuses to start servers on an address other than loopback
(GPUHUB_DEMO_IP) unless LocalGPUSpawner.run_as_hub_user_acknowledge_shared_account is set. Users log in with any of the names below and the
shared password ``gpuhub-demo``. Set GPUHUB_DEMO_GPUS=0,1,2,3 to try the form on a machine without GPUs.
"""

import os

from gpuhub.hub_api import configure_hub

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

c.JupyterHub.ip = os.environ.get("GPUHUB_DEMO_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("GPUHUB_DEMO_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ.get("GPUHUB_DEMO_PASSWORD", "gpuhub-demo")
c.Authenticator.allow_all = True
c.JupyterHub.load_groups = {
    "staff": {"users": ["alice"]},
    "students": {"users": ["bob", "carol"]},
}

c.JupyterHub.spawner_class = "gpu-local"
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 60
c.LocalGPUSpawner.run_as_hub_user = True

_gpus = os.environ.get("GPUHUB_DEMO_GPUS", "auto").strip()
c.LocalGPUSpawner.gpu_devices = (
    "auto" if _gpus in ("", "auto") else [int(i) for i in _gpus.split(",") if i.strip()]
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

print(
    "\n  gpuhub demo: open http://{ip}:{port}/ and log in as alice (staff, up to 4 GPUs)\n"
    "  or bob (students, 1 GPU) with password '{pw}'. GPUs offered: {gpus}.\n"
    "  Warning: all users' servers run as one OS account (run_as_hub_user), so every user\n"
    "  can read every other user's files and API tokens; keep the demo on 127.0.0.1.\n".format(
        ip=c.JupyterHub.ip,
        port=c.JupyterHub.port,
        pw=c.SharedPasswordAuthenticator.user_password,
        gpus=_gpus
        if _gpus != "auto"
        else "discovered with NVML (none if no driver; "
        "run `make demo GPUHUB_DEMO_GPUS=0,1,2,3` to pretend)",
    ),
    flush=True,
)
