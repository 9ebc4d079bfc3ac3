"""Which GPUs the hub gave this server, from the environment its spawner set.

The lab must agree with the hub even where it cannot read a GPU (no driver in the image, a
laptop, simulated GPUs): the spawner's word is the assignment, NVML only adds live figures.

* ``GPUHUB_GPUS``: how many (LocalGPUSpawner and the Kubernetes spawner both set it);
* ``CUDA_VISIBLE_DEVICES``: which indices (local); on Kubernetes the device plugin exposes
  the pod's GPUs as 0..n-1 and the variable is unset;
* ``GPUHUB_GPU_TYPE_NAME``: the GPU type's display name (``GPUHUB_GPU_TYPE`` is its key);
* ``GPUHUB_SIMULATED_GPUS``: set when the GPUs are simulated (see :mod:`.simulated`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gpuhub.devices import visible_devices


def assignment(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"devices", "gpu_type", "simulated"}`` for a server given GPUs, else None."""
    env = os.environ if environ is None else environ
    try:
        wanted = int(env.get("GPUHUB_GPUS", "0") or "0")
    except ValueError:
        wanted = 0
    if wanted <= 0:
        return None
    visible = visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    devices: list[int | str] = list(visible) if visible else list(range(wanted))
    simulated = bool(env.get("GPUHUB_SIMULATED_GPUS"))
    name = env.get("GPUHUB_GPU_TYPE_NAME") or ("Simulated GPU" if simulated else "GPU")
    return {"devices": devices, "gpu_type": name, "simulated": simulated}


def describe(assigned: Mapping[str, Any]) -> str:
    """ "GPUs 0, 1 (NVIDIA RTX A6000) assigned": the sentence the sidebar and ``%gpu`` use."""
    devices = list(assigned["devices"])
    noun = "GPU" if len(devices) == 1 else "GPUs"
    return f"{noun} {', '.join(str(d) for d in devices)} ({assigned['gpu_type']}) assigned"
