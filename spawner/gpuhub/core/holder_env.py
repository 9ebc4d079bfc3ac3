"""The environment a GPU holder gets, built once for pods and processes alike.

A server's pod (``GPUSpawner``), a job's pods (:mod:`gpuhub.k8s.pods`, every job kind) and a
workstation server's processes (``LocalGPUSpawner``) are told which GPUs they hold in the same
variables (:mod:`gpuhub.core.env`):

* ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` where the devices are known (a
  workstation): CUDA then numbers devices as NVML does, so index N is the same GPU to CUDA,
  NVML, the device book and the sidebar (CUDA's own default numbers the fastest GPU first); an
  empty list hides every GPU from CUDA. On Kubernetes the device plugin picks the devices and
  exposes them to the container.
* ``NVIDIA_VISIBLE_DEVICES=void`` in a container without GPUs: on a GPU node the NVIDIA runtime
  would otherwise expose every GPU to images that set ``NVIDIA_VISIBLE_DEVICES=all`` (all CUDA
  images do).
* ``GPUHUB_GPUS``, ``GPUHUB_GPU_TYPE``, ``GPUHUB_GPU_TYPE_NAME``: how many, and the GPU type's
  key and display name ("" without GPUs). The lab shows the assignment from them, driver or
  not (``gpuhub_lab.metrics.assigned``); the hub's ledger reads a pod's back.
* a share of one GPU (:mod:`gpuhub.core.sharing`): ``GPUHUB_GPU_SHARE`` (what it counts as) and,
  shared by memory, ``GPUHUB_GPU_MEMORY``; a workstation process also gets the CUDA MPS daemon's
  memory limit (:func:`gpuhub.core.sharing.process_share_env`).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from gpuhub.core.env import GPU_TYPE_ENV, GPU_TYPE_NAME_ENV, GPUS_ENV, SHARE_ENV, SHARE_MEMORY_ENV
from gpuhub.core.sharing import process_share_env


def holder_env(
    gpus: int,
    type_key: str = "",
    type_name: str = "",
    *,
    devices: Sequence[int | str] | None = None,
    share: Fraction | None = None,
    gpu_memory: int | None = None,
    container: bool = False,
) -> dict[str, str]:
    """The variables that tell a server or job which GPUs it holds.

    ``gpus``: how many (time-sliced units for a time-sliced share); ``type_key`` and
    ``type_name``: its GPU type's key and display name. ``devices``: the device indices, where
    gpuhub picks them (a workstation), else None. ``share`` and ``gpu_memory``: a share of one
    GPU, what it counts as and its memory in bytes (None for whole GPUs; the memory None for a
    time-sliced share). ``container``: a pod's container, which the NVIDIA runtime gives
    every GPU of its node unless told otherwise.
    """
    env: dict[str, str] = {}
    if container and not gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env[GPUS_ENV] = str(gpus)
    env[GPU_TYPE_ENV] = type_key
    env[GPU_TYPE_NAME_ENV] = type_name
    if share is not None:
        if devices is not None and gpu_memory is not None:
            # A workstation process: its share's device is its only CUDA device.
            env.update(process_share_env(gpu_memory, share))
        else:
            env[SHARE_ENV] = str(share)
            if gpu_memory is not None:
                env[SHARE_MEMORY_ENV] = str(gpu_memory)
    return env
