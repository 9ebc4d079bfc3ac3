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
With N >= 2 simulated GPUs the last one is shared by memory (a type of its own, 16G to share,
1G to 16G per server), to try the form's "GPU memory" on a workstation.
Production configs never simulate: ``LocalGPUSpawner.gpu_devices`` defaults to ``"auto"``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_common import DEFAULT_LIMITS, GPU_QUOTA, GROUP_LIMITS, configure_demo

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)
_login = configure_demo(c)

c.JupyterHub.spawner_class = "gpu-local"
c.Spawner.http_timeout = 60
c.LocalGPUSpawner.run_as_hub_user = True


def _demo_gpus(value: str) -> tuple[object, str]:
    """``LocalGPUSpawner.gpu_devices`` for GPUHUB_DEMO_GPUS, and how the banner says it."""
    if value in ("", "auto"):
        from gpuhub.core.devices import discover

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
SHARED_NAME = "Shared simulated GPU"


def _demo_gpu_types(devices: object) -> tuple[dict[str, object], str]:
    """Simulated GPUs: all but the last whole (type ``gpu``, as without types), the last
    shared by memory (type ``shared``), and how the banner says it; else no types (one type
    of all the GPUs, as LocalGPUSpawner makes by itself)."""
    count = str(devices).removeprefix("simulated:")
    if not str(devices).startswith("simulated:") or not count.isdigit() or int(count) < 2:
        return {}, ""
    last = int(count) - 1
    types = {
        "gpu": {
            "display_name": "Simulated GPU",
            "devices": list(range(last)),
            "max_gpus": last,
            "default": True,
        },
        "shared": {
            "display_name": SHARED_NAME,
            "devices": [last],
            "max_gpus": 1,
            "sharing": {"memory": "16G", "min": "1G", "default": "4G"},
            "description": "Ask for its memory in the GPU memory field, 1G to 16G",
        },
    }
    return types, (
        f'; GPU {last} is shared by memory ("{SHARED_NAME}": 1G to 16G of it per server)'
    )


c.LocalGPUSpawner.gpu_types, _shared_said = _demo_gpu_types(c.LocalGPUSpawner.gpu_devices)
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": float(os.cpu_count() or 2), "default": 1}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "16G", "default": "2G"}
c.LocalGPUSpawner.group_limits = GROUP_LIMITS
c.LocalGPUSpawner.default_limits = DEFAULT_LIMITS
c.LocalGPUSpawner.gpu_quota = GPU_QUOTA

print(
    f"\n  gpuhub demo:\n{_login}"
    f"  GPUs offered: {_gpus_said}{_shared_said}.\n"
    "  Warning: all users' servers run as one OS account (run_as_hub_user), so every user\n"
    "  can read every other user's files and API tokens; keep the demo on 127.0.0.1.\n",
    flush=True,
)
