"""Shared GPUs: a part of one GPU for a server or job (docs/architecture.md, "Shared GPUs").

A GPU type may offer parts of its devices instead of whole ones, in one of two ways:

* **by memory** (``"sharing": {"memory": "16G", "min": "1G"}``): a request asks for
  ``gpu_memory`` of one device, and devices are shared while what their holders asked adds
  up to at most ``memory``. On Kubernetes a GPU-sharing device plugin enforces it (HAMi:
  ``nvidia.com/gpu: 1`` plus ``memory_resource`` in MiB, optional ``cores_resource`` in
  percent of the device); on a workstation the device book hands out the memory and the
  CUDA MPS daemon, where the admin runs it, enforces each share
  (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``), else the hub's monitor warns and stops a holder that
  stays over its share.
* **by time** (``"sharing": {"replicas": 4}``): NVIDIA's device plugin advertises each GPU as
  ``replicas`` units (time-slicing or MPS, usually ``nvidia.com/gpu.shared``); a request asks
  for whole units, and nothing isolates one holder's memory from another's.

Either way a share counts as its fraction of a GPU (:meth:`Sharing.fraction`) in the quota,
the ledger, the wait line, GPU-hours and the metrics, exactly (:class:`fractions.Fraction`,
so three thirds are one GPU).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from gpuhub.core.env import MPS_MEMORY_LIMIT_ENV, SHARE_ENV, SHARE_MEMORY_ENV
from gpuhub.core.quantity import QuantityError, format_memory, human_memory, parse_memory

MIB = 1 << 20
# HAMi's default resource names (its chart's devicePlugin.resourceMem / resourceCores).
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"

# In the environment of every process or pod given a share (gpuhub.core.env): the GPUs it
# counts as ("1/2") and, shared by memory, its memory in bytes. Pods carry them for the hub's
# ledger (users cannot create pods, so they can be trusted there); the lab shows them. Where
# the admin runs the CUDA MPS control daemon, it caps each client's device memory at
# MPS_MEMORY_LIMIT_ENV (NVIDIA's pinned device memory limit, "<ordinal>=<size>"); elsewhere the
# hub's monitor watches the share.

Platform = Literal["kubernetes", "workstation"]
_KEYS = ("memory", "min", "max", "default", "memory_resource", "cores_resource", "replicas")


class SharingConfigError(ValueError):
    """An admin mistake in a ``sharing`` dict; the message names the setting."""


@dataclass(frozen=True)
class Sharing:
    """How a GPU type shares its devices (one of ``memory`` or ``replicas`` is set)."""

    memory: int | None = None  # bytes one device has to share
    min: int = 0  # the smallest share one request may ask for
    max: int = 0  # the largest (at most ``memory``)
    default: int = 0  # what a request that names no gpu_memory gets
    memory_resource: str = ""  # Kubernetes: the extended resource counting MiB (HAMi)
    cores_resource: str = ""  # Kubernetes: the one counting percent of a device (HAMi)
    replicas: int | None = None  # time-slicing / MPS: units each device is advertised as

    @property
    def by_memory(self) -> bool:
        return self.memory is not None

    @property
    def kind(self) -> str:
        """How the form and messages name the way of sharing."""
        return "shared by memory" if self.by_memory else "time-sliced"

    def fraction(self, gpus: int, gpu_memory: int | None = None) -> Fraction:
        """What a request of ``gpus`` units (``gpu_memory`` bytes of one device) counts as,
        in GPUs: ``gpu_memory / memory``, or ``gpus / replicas``."""
        if self.memory is not None:
            return Fraction(gpu_memory if gpu_memory is not None else self.default, self.memory)
        assert self.replicas is not None
        return Fraction(gpus, self.replicas)

    @staticmethod
    def mib(gpu_memory: int) -> int:
        """A share in MiB, as HAMi counts it (rounded up: the holder never gets less)."""
        return -(-gpu_memory // MIB)

    def cores(self, gpu_memory: int) -> int:
        """Percent of the device's compute for a share: the same part as of its memory."""
        assert self.memory is not None
        return max(1, min(100, math.ceil(100 * gpu_memory / self.memory)))

    def describe_range(self) -> str:
        """ "1G to 16G": what one request may ask for, as a person writes it."""
        return f"{format_memory(self.min)} to {format_memory(self.max)}"

    def describe(self) -> str:
        """ "16 GB of GPU memory per device, shared", "each GPU time-sliced 4 ways"."""
        if self.memory is not None:
            return f"{human_memory(self.memory)} per GPU, shared by memory"
        return f"each GPU time-sliced {self.replicas} ways, with no memory isolation"

    @classmethod
    def from_config(cls, name: str, value: Any) -> Sharing | None:
        """Validate an admin's ``sharing`` dict (``name`` is how messages call it)."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise SharingConfigError(
                f'{name} must be a dict like {{"memory": "16G", "min": "1G"}} or {{"replicas": 4}}'
            )
        extra = sorted(set(value) - set(_KEYS))
        if extra:
            raise SharingConfigError(
                f"{name} has unknown keys {extra}; known keys are {sorted(_KEYS)}"
            )
        if ("memory" in value) == ("replicas" in value):
            raise SharingConfigError(
                f'{name} needs either "memory" (share each GPU by memory, as HAMi or the CUDA MPS '
                'daemon do) or "replicas" (NVIDIA time-slicing or MPS), not both and not neither'
            )
        if "replicas" in value:
            return cls._by_time(name, value)
        return cls._by_memory(name, value)

    @classmethod
    def _by_time(cls, name: str, value: Mapping[str, Any]) -> Sharing:
        memory_keys = sorted(set(value) - {"replicas"})
        if memory_keys:
            raise SharingConfigError(
                f"{name} with replicas shares GPUs by time, with no memory isolation: "
                f"{memory_keys} apply only to sharing by memory"
            )
        replicas = value["replicas"]
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
            raise SharingConfigError(
                f"{name}.replicas must be a whole number of at least 2 (the device plugin's "
                f"replicas per GPU), not {replicas!r}"
            )
        return cls(replicas=replicas)

    @classmethod
    def _by_memory(cls, name: str, value: Mapping[str, Any]) -> Sharing:
        def size(key: str, default: int | None = None) -> int:
            if key not in value:
                assert default is not None
                return default
            try:
                found = parse_memory(value[key])
            except QuantityError as exc:
                raise SharingConfigError(f"{name}.{key}: {exc}") from None
            if found <= 0:
                raise SharingConfigError(f"{name}.{key} must be above zero")
            return found

        memory = size("memory")
        low = size("min", min(10**9, memory))
        high = size("max", memory)
        default = size("default", low)
        if high > memory:
            raise SharingConfigError(
                f"{name}.max ({format_memory(high)}) is more than one GPU has to share "
                f"({name}.memory, {format_memory(memory)})"
            )
        if not low <= default <= high:
            raise SharingConfigError(f"{name} needs min <= default <= max <= memory")
        for key in ("memory_resource", "cores_resource"):
            if not isinstance(value.get(key, ""), str):
                raise SharingConfigError(f"{name}.{key} must be a Kubernetes resource name")
        return cls(
            memory=memory,
            min=low,
            max=high,
            default=default,
            memory_resource=value.get("memory_resource", ""),
            cores_resource=value.get("cores_resource", ""),
        )

    def check_for(self, name: str, platform: Platform, resource_name: str) -> None:
        """What one platform needs of a sharing type (the other ignores): the admin learns it
        when the hub starts, naming the setting."""
        if platform == "workstation" and self.replicas is not None:
            raise SharingConfigError(
                f"{name}.replicas is for NVIDIA's device plugin on Kubernetes; on a workstation "
                'share a GPU by memory ("sharing": {"memory": "24G", "min": "2G"})'
            )
        if platform == "kubernetes" and self.memory is not None:
            if not self.memory_resource:
                raise SharingConfigError(
                    f"{name}.memory_resource is needed on Kubernetes: the resource your GPU "
                    f'sharing device plugin counts memory in, in MiB (HAMi: "{HAMI_MEMORY}")'
                )
            for key in ("memory_resource", "cores_resource"):
                if getattr(self, key) == resource_name:
                    raise SharingConfigError(
                        f"{name}.{key} must differ from the type's resource_name "
                        f"({resource_name!r}), which counts the devices"
                    )


def process_share_env(gpu_memory: int, share: Fraction) -> dict[str, str]:
    """The environment of a workstation process (a server, a local job) given ``gpu_memory``
    bytes of one GPU, which count as ``share`` of a GPU: the share for the ledger and the
    lab, and the MPS daemon's memory limit. Its GPU is the process's only CUDA device
    (``CUDA_VISIBLE_DEVICES`` names it alone), and CUDA numbers a process's devices after
    that variable, so the limit's ordinal is 0."""
    return {
        SHARE_ENV: str(share),
        SHARE_MEMORY_ENV: str(gpu_memory),
        MPS_MEMORY_LIMIT_ENV: f"0={Sharing.mib(gpu_memory)}M",
    }


def share_from_env(env: Mapping[str, Any]) -> tuple[Fraction | None, int]:
    """``(share, gpu memory in bytes)`` from a pod's or process's environment (``SHARE_ENV``,
    ``SHARE_MEMORY_ENV``); ``(None, 0)`` for whole GPUs or anything unreadable."""
    text = env.get(SHARE_ENV)
    if not isinstance(text, str) or not text or len(text) > 40:
        return None, 0
    try:
        share = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None, 0
    if share <= 0:
        return None, 0
    memory = env.get(SHARE_MEMORY_ENV)
    size = int(memory) if isinstance(memory, str) and memory.isdigit() else 0
    return share, size
