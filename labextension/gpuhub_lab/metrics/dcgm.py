"""GPU figures from an NVIDIA DCGM exporter (Prometheus text format), for clusters.

On Kubernetes the GPU Operator usually runs ``dcgm-exporter`` on every GPU node; with its pod
mapping on, each series carries the ``pod``/``namespace`` that holds the GPU. Pointing
``GPUSampler.dcgm_url`` at it gives the same figures as NVML without NVML inside the user's
pod, and utilization for MIG slices. The answer has the metrics API's shape; DCGM has no
per-process memory, so ``processes`` is empty.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

MIB = 2**20

#: DCGM field -> (API key, factor to the API's unit)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used", MIB),
    "DCGM_FI_DEV_FB_FREE": ("memory_free", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power", 1.0),
}


def parse(text: str, pod: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
    """GPU dicts from exporter output, keeping only series of ``pod`` (when given)."""
    devices: dict[tuple[str, str], dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = FIELDS.get(sample.name)
            if field is None:
                continue
            labels = sample.labels
            if pod and labels.get("pod") != pod:
                continue
            if namespace and labels.get("namespace", namespace) != namespace:
                continue
            uuid = labels.get("UUID") or labels.get("uuid") or f"gpu-{labels.get('gpu', '?')}"
            instance = labels.get("GPU_I_ID", "")
            key = (uuid, instance)
            gpu = devices.get(key)
            if gpu is None:
                profile = labels.get("GPU_I_PROFILE")
                name = labels.get("modelName", "NVIDIA GPU")
                gpu = devices[key] = {
                    "index": int(labels.get("gpu", "0") or 0),
                    "uuid": uuid if not instance else f"{uuid}/{instance}",
                    "name": f"{name} MIG {profile}" if profile else name,
                    "utilization": None,
                    "memory_used": None,
                    "memory_total": None,
                    "temperature": None,
                    "power": None,
                    "mig": bool(instance),
                    "processes": [],
                    "error": None,
                }
                if instance:
                    gpu["parent_uuid"] = uuid
            api_key, factor = field
            value = sample.value * factor
            gpu[api_key] = int(value) if api_key.startswith("memory") else round(value, 1)
    gpus = []
    for gpu in devices.values():
        free = gpu.pop("memory_free", None)
        if gpu["memory_used"] is not None and free is not None:
            gpu["memory_total"] = gpu["memory_used"] + free
        gpus.append(gpu)
    gpus.sort(key=lambda g: (g["index"], g["uuid"]))
    return gpus


class DCGMSource:
    """Scrapes ``url`` once per sample; a failed scrape is a reason, never an exception."""

    kind = "dcgm"

    def __init__(
        self, url: str, pod: str | None = None, namespace: str | None = None, timeout: float = 2.0
    ) -> None:
        self.url = url
        self.pod = pod or None
        self.namespace = namespace or None
        self.timeout = timeout

    def read(self) -> tuple[list[dict[str, Any]], str | None]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                text = response.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return [], f"The DCGM exporter at {self.url} did not answer ({exc})."
        try:
            gpus = parse(text, self.pod, self.namespace)
        except ValueError as exc:
            return [], f"The DCGM exporter at {self.url} sent text that is not Prometheus ({exc})."
        if not gpus:
            who = f"pod {self.pod}" if self.pod else "this server"
            return [], f"The DCGM exporter reports no GPU for {who}."
        return gpus, None

    def close(self) -> None:
        pass
