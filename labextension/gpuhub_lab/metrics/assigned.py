"""Which GPUs the hub gave this server, from the environment its spawner set.

The lab must agree with the hub even where it cannot read a GPU (no driver in the image, a
laptop, simulated GPUs): the spawner's word is the assignment, NVML only adds live figures.

* ``GPUHUB_GPUS``: how many (LocalGPUSpawner and the Kubernetes spawner both set it);
* ``CUDA_VISIBLE_DEVICES``: which indices (local); on Kubernetes the device plugin exposes
  the pod's GPUs as 0..n-1 and the variable is unset;
* ``GPUHUB_GPU_TYPE_NAME``: the GPU type's display name (``GPUHUB_GPU_TYPE`` is its key);
* ``GPUHUB_SIMULATED_GPUS``: set when the GPUs are simulated (see :mod:`.simulated`);
* ``GPUHUB_GPU_SHARE`` / ``GPUHUB_GPU_MEMORY``: a share of one GPU (:mod:`gpuhub.core.sharing`),
  what it counts as and, shared by memory, its memory in bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gpuhub.core import words
from gpuhub.core.devices import visible_devices
from gpuhub.core.env import GPU_TYPE_NAME_ENV, GPUS_ENV, SIMULATED_GPUS_ENV
from gpuhub.core.quantity import human_memory
from gpuhub.core.sharing import share_from_env


def assignment(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"devices", "gpu_type", "simulated", "share", "gpu_memory", "share_text"}`` for a
    server given GPUs (the last three None unless it holds a share of one), else None."""
    env = os.environ if environ is None else environ
    try:
        wanted = int(env.get(GPUS_ENV, "0") or "0")
    except ValueError:
        wanted = 0
    if wanted <= 0:
        return None
    visible = visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    devices: list[int | str] = list(visible) if visible else list(range(wanted))
    simulated = bool(env.get(SIMULATED_GPUS_ENV))
    name = env.get(GPU_TYPE_NAME_ENV) or ("Simulated GPU" if simulated else "GPU")
    share, memory = share_from_env(env)
    text = None
    if share is not None and memory:
        text = f"{human_memory(memory)} of {words.device_list(devices[:1], name)}"
    elif share is not None:  # time-sliced: no memory of its own
        text = f"{words.amount(share)} of {words.device_list(devices[:1], f'{name}, time-sliced')}"
    return {
        "devices": devices,
        "gpu_type": name,
        "simulated": simulated,
        "share": None if share is None else words.as_number(share),
        "gpu_memory": memory or None,
        "share_text": text,
    }


def describe(assigned: Mapping[str, Any]) -> str:
    """ "GPUs 0, 1 (NVIDIA RTX A6000) assigned", "8 GB of GPU 3 (T4) assigned": the sentence
    the sidebar and ``%gpu`` use."""
    if assigned.get("share_text"):
        return f"{assigned['share_text']} assigned"
    devices = list(assigned["devices"])
    noun = "GPU" if len(devices) == 1 else "GPUs"
    return f"{noun} {', '.join(str(d) for d in devices)} ({assigned['gpu_type']}) assigned"
