"""Benchmark: ``%load_ext gpuhub_lab`` in fresh, real IPython kernels (budget < 150 ms).

Each sample starts a new kernel (so nothing is cached in ``sys.modules``), times the magic
inside the kernel with ``time.perf_counter``, and lists the heavy modules the load pulled
in (there must be none: kfp, kubernetes, papermill, jupyter_server, ipywidgets...).
Run: ``python -m benchmarks load_ext [--samples N]``; writes its section of
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from jupyter_client import KernelManager

from benchmarks import DOC, percentile, write_section

REPO = Path(__file__).resolve().parents[1]

BUDGET_MS = 150.0
HEAVY = (
    "kfp",
    "kubernetes",
    "kubernetes_asyncio",
    "papermill",
    "nbformat",
    "jupyter_server",
    "ipywidgets",
    "tornado.web",
    "requests",
    "gpuhub.jobs.local",
)
PROBE = f"""
import sys, time, json
before = set(sys.modules)
start = time.perf_counter()
get_ipython().run_line_magic("load_ext", "gpuhub_lab")
elapsed = time.perf_counter() - start
heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in {HEAVY!r} or m in {HEAVY!r})
print(json.dumps({{"ms": elapsed * 1000, "heavy": heavy, "magics": sorted(get_ipython().magics_manager.magics["line"])}}))
"""


def sample() -> dict:
    manager = KernelManager(kernel_name="python3")
    # The sources themselves, whether or not an editable install is present.
    path = os.pathsep.join([str(REPO / "labextension"), str(REPO / "spawner")])
    manager.start_kernel(env={**os.environ, "PYTHONPATH": path})
    client = manager.blocking_client()
    client.start_channels()
    out: list[str] = []
    try:
        client.wait_for_ready(timeout=60)
        client.execute_interactive(
            PROBE,
            output_hook=lambda m: (
                out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None
            ),
            timeout=60,
        )
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return json.loads("".join(out).strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    results = [sample() for _ in range(args.samples)]
    times = sorted(r["ms"] for r in results)
    p50, p95, worst = percentile(times, 50), percentile(times, 95), times[-1]
    heavy = sorted({m for r in results for m in r["heavy"]})
    missing = {"submit", "jobs", "job"} - set(results[0]["magics"])
    ok = p95 < BUDGET_MS and not heavy and not missing
    body = f"""## `%load_ext gpuhub_lab` (budget < {BUDGET_MS:.0f} ms)

`python -m benchmarks load_ext --samples {args.samples}`: each sample is a fresh `python3`
kernel (jupyter_client), timing `%load_ext gpuhub_lab` inside it.

| samples | p50 | p95 | max | heavy modules imported | verdict |
|---|---|---|---|---|---|
| {len(times)} | {p50:.1f} ms | {p95:.1f} ms | {worst:.1f} ms | {", ".join(heavy) or "none"} | {"within budget" if ok else "OVER BUDGET"} |

Machine: {platform.machine()}, Python {platform.python_version()}, {platform.system()}.
Magics registered: {", ".join("%" + m for m in sorted({"submit", "jobs", "job"} & set(results[0]["magics"])))}, %%train.
"""
    write_section("load_ext", body, args.doc)
    print(body)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
