"""The real NVML path on a machine with an NVIDIA GPU and driver (CI has none; run on demand).

    PYTHONPATH=spawner:labextension python3 -m benchmarks.gpu_device_check [out.json]

Needs only ``nvidia-ml-py`` (``pynvml``), ``psutil`` and ``traitlets`` (PyTorch, if present,
makes the GPU busy). Checks, through gpuhub's own readers:

1. ``gpuhub.core.devices.discover()`` finds every GPU NVML lists (LocalGPUSpawner's ``"auto"``);
2. ``NVMLSource("pynvml")`` reads each with no error, in the API's units;
3. a process that holds GPU memory and computes shows among the device's processes with its
   memory, and the device's utilization rises (what the sidebar and the fleet page show);
4. ``CUDA_VISIBLE_DEVICES`` by index and by UUID limits what a server sees;
5. the cost of one read and of one sampler tick (budget: 5 ms for 8 GPUs).

Prints one JSON document (and writes it to the path given) and exits non-zero when a check
fails; the figures go to docs/benchmarks.md ("Real NVML").
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from typing import Any

from gpuhub.core.devices import discover
from gpuhub_lab.metrics.nvml import NVMLSource
from gpuhub_lab.metrics.sampler import GPUSampler

GIB = 2**30
HOLD_GIB = 4
BURN = textwrap.dedent(
    f"""
    import sys, time, torch
    block = torch.empty({HOLD_GIB} * 2**30, dtype=torch.uint8, device="cuda:0")
    a = torch.randn(8192, 8192, device="cuda:0")
    print("ready", flush=True)
    end = time.monotonic() + 60
    while time.monotonic() < end and not sys.stdin.closed:
        for _ in range(50):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    """
)


def wait_for(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    return None


def main() -> int:
    report: dict[str, Any] = {"checks": {}}
    checks = report["checks"]
    source = NVMLSource("pynvml")
    gpus, reason = source.read()
    report["gpus"] = [{k: g[k] for k in ("index", "name", "uuid", "memory_total")} for g in gpus]
    checks["nvml reads every GPU"] = (
        bool(gpus)
        and reason is None
        and all(
            g["error"] is None and g["uuid"].startswith(("GPU-", "MIG-")) and g["memory_total"] > 0
            for g in gpus
        )
    )
    found = discover()
    report["discovery"] = repr(found)
    checks["discovery matches NVML"] = len(getattr(found, "devices", ())) == len(
        [g for g in gpus if not g["mig"]]
    )

    # A busy process: its memory and the device's utilization, as NVML reports them.
    burner = None
    try:
        import torch  # noqa: F401

        burner = subprocess.Popen(
            [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert burner.stdout is not None
        checks["busy process started"] = burner.stdout.readline().strip() == "ready"

        def seen() -> dict[str, Any] | None:
            device = source.read()[0][0]
            mine = [p for p in device["processes"] if p["pid"] == burner.pid]
            busy = device["utilization"] and device["utilization"] > 50
            return {"device": device, "process": mine[0]} if mine and busy else None

        busy = wait_for(seen, 30)
        if busy is None:  # gVisor and some containers hide other processes' pids from NVML
            device = source.read()[0][0]
            report["busy_device"] = {k: device[k] for k in ("utilization", "memory_used")}
            report["busy_processes"] = device["processes"]
            checks["busy process seen with its memory"] = False
            checks["busy device's memory and utilization rise"] = (
                device["memory_used"] >= HOLD_GIB * GIB and (device["utilization"] or 0) > 50
            )
        else:
            memory = busy["process"].get("memory_used")
            report["busy_process"] = busy["process"]
            report["busy_utilization"] = busy["device"]["utilization"]
            checks["busy process seen with its memory"] = bool(memory and memory >= HOLD_GIB * GIB)
    except ImportError:
        report["busy_process"] = "skipped: no PyTorch here"
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()

    # What a server given one GPU sees.
    if gpus:
        first = gpus[0]
        for name, value in (("index", "0"), ("uuid", first["uuid"])):
            seen_gpus, _ = NVMLSource("pynvml", visible=value).read()
            checks[f"visible by {name} shows that GPU only"] = [g["uuid"] for g in seen_gpus] == [
                first["uuid"]
            ]
        hidden, why = NVMLSource("pynvml", visible="").read()
        checks["visible none shows no GPU"] = hidden == [] and bool(why)

    # Cost: one read of every GPU, one sampler tick (read + history + kernel mapping).
    reads = []
    for _ in range(200):
        start = time.perf_counter()
        source.read()
        reads.append((time.perf_counter() - start) * 1000)
    sampler = GPUSampler(nvml_module="pynvml")
    sampler._source = source
    ticks = []
    for _ in range(50):
        start = time.perf_counter()
        sampler.sample_once()
        ticks.append((time.perf_counter() - start) * 1000)
    source.close()
    report["cost_ms"] = {
        "read_p50": round(statistics.median(reads), 3),
        "read_p95": round(sorted(reads)[int(len(reads) * 0.95)], 3),
        "sample_p50": round(statistics.median(ticks), 3),
        "per_gpu_read_p50": round(statistics.median(reads) / max(len(gpus), 1), 3),
    }
    report["ok"] = all(checks.values())
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            out.write(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    sys.exit(main())
