"""Benchmark: GPU metrics (budgets in docs/architecture.md), side by side with jupyterlab-nvdashboard.

* cost of one sample (NVML stand-in with 1 and 8 GPUs; real NVML too when this machine has
  a GPU);
* pushed at 10 Hz: server CPU per delivered update of gpuhub's metrics stream and of
  jupyterlab-nvdashboard 0.15.0, two real Jupyter servers on the same NVML stand-in, with 1,
  10 and 50 clients, interleaved and repeated (``benchmarks/metrics_push.py``, which says how
  it gets nvdashboard);
* ``GET /gpuhub/api/metrics`` latency p50/p95 with 1, 10 and 50 clients polling at 1 Hz (the
  fallback where a proxy refuses WebSockets), in a real Jupyter server, with the server's CPU
  share and how often it reads NVML;
* the sampler thread's CPU share at 1 Hz, and that nothing is sampled when nobody polls;
* the size of the shipped lab extension JS (gzip).

Run: ``python -m benchmarks metrics [--reps N] [--window S] [--seconds S] [--clients 1,10,50]``;
writes its section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import platform
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import percentile, write_section
from benchmarks.metrics_push import PERIOD_MS, TARGET_RATIO, cpu_seconds, run_comparison
from gpuhub_lab.metrics.nvml import NVMLSource
from gpuhub_lab.metrics.sampler import GPUSampler
from tests.support import fake_nvml as fake
from tests.support.jupyter.metrics_stats import ROUTE as STATS
from tests.support.jupyter.server import TOKEN, JupyterServer, jupyter_server

REPO = Path(__file__).resolve().parents[1]
BUILT = REPO / "labextension" / "gpuhub_lab" / "labextension" / "static"
FAKE = "tests.support.fake_nvml"
GIB = 2**30
BUDGET_SAMPLE_MS = 5.0  # one NVML sample of 8 GPUs
BUDGET_P50_MS = 2.0  # GET /gpuhub/api/metrics with 50 polling clients
BUDGET_CPU = 1.0  # percent of a core, sampler at 1 Hz
BUDGET_JS_KB = 250.0


def busy_machine(n_gpus: int) -> fake.Scenario:
    scenario = fake.a100s(n_gpus, utilization=70, memory_used=30 * GIB)
    for i, gpu in enumerate(scenario.gpus):
        gpu.processes = [fake.FakeProcess(100_000 + 10 * i + k, GIB) for k in range(3)]
    return scenario


# --- in-process measurements ------------------------------------------------------------
def sample_cost(n_gpus: int, module: str = FAKE, iterations: int = 2000) -> dict[str, float]:
    if module == FAKE:
        fake.install(busy_machine(n_gpus))
    source = NVMLSource(module)
    gpus, reason = source.read()
    if not gpus:
        raise RuntimeError(reason)
    start = time.perf_counter()
    for _ in range(iterations):
        source.read()
    read_ms = (time.perf_counter() - start) / iterations * 1000
    sampler = GPUSampler(nvml_module=module)
    sampler._source = source
    start = time.perf_counter()
    for _ in range(iterations // 4):
        sampler.sample_once()
    sample_ms = (time.perf_counter() - start) / (iterations // 4) * 1000
    source.close()
    return {"gpus": len(gpus), "read_ms": read_ms, "sample_ms": sample_ms}


def real_nvml_cost() -> dict[str, Any] | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) if count else ""
        pynvml.nvmlShutdown()
    except Exception:
        return None
    if not count:
        return None
    result: dict[str, Any] = sample_cost(count, "pynvml", iterations=200)
    result["model"] = name.decode() if isinstance(name, bytes) else name
    return result


def sampler_cpu_share(seconds: float) -> dict[str, float]:
    """CPU time of the sampler thread at 1 Hz while polled, then while nobody polls."""
    fake.install(busy_machine(8))
    sampler = GPUSampler(nvml_module=FAKE, interval=1.0, idle_timeout=2.0)
    sampler.touch()
    time.sleep(0.2)
    cpu0, samples0, t0 = sampler.cpu_seconds, sampler.samples_taken, time.monotonic()
    while time.monotonic() - t0 < seconds:
        sampler.touch()
        time.sleep(0.5)
    wall = time.monotonic() - t0
    busy = {
        "cpu_percent": (sampler.cpu_seconds - cpu0) / wall * 100,
        "samples_per_s": (sampler.samples_taken - samples0) / wall,
    }
    time.sleep(sampler.idle_timeout + 1.5)  # nobody polls: the thread goes to sleep
    cpu1, samples1 = sampler.cpu_seconds, sampler.samples_taken
    time.sleep(3.0)
    busy["idle_samples"] = sampler.samples_taken - samples1
    busy["idle_cpu_ms"] = (sampler.cpu_seconds - cpu1) * 1000
    sampler.stop()
    return busy


def bundle_size() -> dict[str, float]:
    files = sorted(BUILT.glob("*.js"))
    if not files:
        raise RuntimeError("The lab extension is not built; run `npm run build:prod`.")
    raw = sum(f.stat().st_size for f in files)
    gz = sum(len(gzip.compress(f.read_bytes(), 9)) for f in files)
    return {"files": len(files), "raw_kb": raw / 1024, "gzip_kb": gz / 1024}


# --- against a real Jupyter server -------------------------------------------------------
class Probe:
    """GET /api/status every 100 ms: how responsive the server's event loop is."""

    def __init__(self, session: aiohttp.ClientSession, server: JupyterServer) -> None:
        self.session, self.server = session, server
        self.latencies: list[float] = []

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t = time.perf_counter()
            async with self.session.get(self.server.url + "api/status") as r:
                await r.read()
            self.latencies.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.1)


async def _calls(session: aiohttp.ClientSession, server: JupyterServer) -> int:
    async with session.get(server.url + STATS) as r:
        calls: int = (await r.json())["nvml_calls"]
        return calls


async def gpuhub_design(server: JupyterServer, clients: int, seconds: float) -> dict[str, Any]:
    headers = {"Authorization": f"token {TOKEN}"}
    rtt: list[float] = []
    handler: list[float] = []
    stop = asyncio.Event()
    async with aiohttp.ClientSession(headers=headers) as session:

        async def poller() -> None:
            await asyncio.sleep(random.random())  # clients are not in lockstep
            since: float | None = None
            while not stop.is_set():
                url = server.url + "gpuhub/api/metrics"
                params = {"since": str(since)} if since is not None else None
                t = time.perf_counter()
                async with session.get(url, params=params) as r:
                    body = await r.json()
                    timing = r.headers.get("Server-Timing", "")
                rtt.append((time.perf_counter() - t) * 1000)
                if "dur=" in timing:
                    handler.append(float(timing.split("dur=")[1]))
                if body["history"]:
                    since = body["history"][-1]["time"]
                await asyncio.sleep(1.0)

        # Warm up: the sampler starts on the first request.
        async with session.get(server.url + "gpuhub/api/metrics") as r:
            await r.read()
        probe = Probe(session, server)
        calls0, cpu0, t0 = (
            await _calls(session, server),
            cpu_seconds(server.process.pid),
            time.monotonic(),
        )
        tasks = [asyncio.create_task(poller()) for _ in range(clients)]
        tasks.append(asyncio.create_task(probe.run(stop)))
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        wall = time.monotonic() - t0
        cpu = (cpu_seconds(server.process.pid) - cpu0) / wall * 100
        reads = (await _calls(session, server) - calls0) / wall
    # The first second of each client includes its start; steady state is what matters.
    return {
        "clients": clients,
        "requests": len(rtt),
        "rtt_p50": percentile(rtt, 50),
        "rtt_p95": percentile(rtt, 95),
        "handler_p50": percentile(handler, 50),
        "handler_p95": percentile(handler, 95),
        "status_p50": percentile(probe.latencies, 50),
        "status_p95": percentile(probe.latencies, 95),
        "cpu_percent": cpu,
        "nvml_calls_per_s": reads,
    }


async def server_runs(clients: list[int], seconds: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="gpuhub-bench-") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "root"
        root.mkdir()
        scenario_path = tmp / "nvml.json"
        scenario_path.write_text(busy_machine(8).to_json())
        env = {"PYTHONPATH": str(REPO), "GPUHUB_FAKE_NVML": str(scenario_path)}
        config = (
            f"c.GPUSampler.nvml_module = {FAKE!r}\n"
            "c.GPUSampler.interval = 1.0\n"
            "c.GPUSampler.idle_timeout = 2.0\n"
            "c.ServerApp.jpserver_extensions['tests.support.jupyter.metrics_stats'] = True\n"
            "c.ServerApp.log_level = 'WARN'\n"
        )
        with jupyter_server(root, tmp, env=env, config=config) as server:
            return [await gpuhub_design(server, n, seconds) for n in clients]


# --- report ------------------------------------------------------------------------------
#: What the 10 Hz table shows, whatever a run's figures (kept here so a rerun keeps it).
PUSH_ANALYSIS = """Where the CPU goes, and why the 10x target is out of reach on this stand-in. Per delivered
update gpuhub pays its per-sample work divided by the number of clients, plus one write of
the shared frame per socket; nvdashboard pays a read of 8 numbers, an encoding and a write
per socket. The per-sample work is small when warm (a figures-only read of 8 stand-in GPUs
and its history entry take about 0.03 ms in a loop, the JSON about 0.035 ms), but on this
loaded machine (measured on 2026-11-27) each sample cost the server about 0.6 ms: the
sampler thread wakes, then
wakes the event loop, and both run with cold caches (the sampler thread alone measures about
0.25-0.3 ms of its own CPU per sample there; the same figures-only sample, in one process
without a server, costs 0.035 ms back to back and 0.23 ms taken every 100 ms). nvdashboard's socket wakes the loop once per
update. So with few clients gpuhub costs about as much per update as nvdashboard's
cheapest chart, or more; the fixed part fades as clients are added, leaving one write per
update. That write on loopback includes the kernel delivering the frame to
the receiving socket (the stime column), which nvdashboard pays too, so however many
clients, the ratio stays below nvdashboard's cost per update over the cost of one write
(figures below). A real driver changes the balance: NVML calls cost about 20 µs each on an
H200 (the real row of "One sample" above), which nvdashboard pays 8 times per update per
socket and gpuhub 4 times per GPU per sample, whatever the clients; this run does not
measure that, as both servers read the same stand-in. The 0.22 ms per nvdashboard update
an earlier version of this section reported came from a CPU window that included the
benchmark's own 10 Hz `/api/status` probe; here the probe runs after the window.
"""


def _push_section(push: dict[str, Any]) -> tuple[str, bool, bool]:
    """The 10 Hz comparison: its table, whether the CPU target and the status p95 hold."""
    rows = push["rows"]
    version = push["peer_version"]
    table = []
    for r in rows:
        ours, theirs = r["gpuhub"], r["nvdashboard"]
        for name, d in (("gpuhub stream", ours), (f"nvdashboard {version}", theirs)):
            low, high = d["cpu_us_spread"]
            table.append(
                f"| {r['clients']} | {name} | {d['updates_per_s']:.0f} | "
                f"{d['cpu_percent']:.2f} % | **{d['cpu_us_per_update']:.0f} µs** "
                f"({low:.0f}-{high:.0f}) | {d['system_us_per_update']:.0f} µs | "
                f"{d['precise_us_per_update']:.0f} µs | "
                f"{d['nvml_calls_per_s']:.0f} | {d['status_p50']:.1f} / {d['status_p95']:.1f} ms |"
            )
        table.append(
            f"| {r['clients']} | **nvdashboard / gpuhub** | | | **{r['ratio']:.2f}x** | | "
            f"{theirs['precise_us_per_update'] / ours['precise_us_per_update']:.2f}x | | |"
        )
    cpu_ok = all(r["ratio"] >= TARGET_RATIO for r in rows)
    status_ok = all(r["gpuhub"]["status_p95"] <= r["nvdashboard"]["status_p95"] for r in rows)
    met = [r["clients"] for r in rows if r["ratio"] >= TARGET_RATIO]
    calm = [
        r["clients"] for r in rows if r["gpuhub"]["status_p95"] <= r["nvdashboard"]["status_p95"]
    ]
    counts = ", ".join(str(r["clients"]) for r in rows)
    bound = ""
    if len(rows) >= 2:
        low, high = rows[-2], rows[-1]

        def spent(r: dict[str, Any]) -> float:  # µs of server CPU per second
            return float(r["gpuhub"]["cpu_us_per_update"] * r["gpuhub"]["updates_per_s"])

        added = high["gpuhub"]["updates_per_s"] - low["gpuhub"]["updates_per_s"]
        write = (spent(high) - spent(low)) / added if added > 0 else 0.0
        if write > 0:
            bound = (
                f"\nIn this run one more client cost gpuhub about {write:.0f} µs per update "
                f"(between {low['clients']} and {high['clients']} clients): even with no "
                f"per-sample cost at all, {high['clients']} clients could not pass about "
                f"{high['nvdashboard']['cpu_us_per_update'] / write:.1f}x against nvdashboard's "
                f"{high['nvdashboard']['cpu_us_per_update']:.0f} µs.\n"
            )
    verdict = (
        f"target ({TARGET_RATIO:g}x less CPU per update than nvdashboard with {counts} clients) "
        + ("met" if cpu_ok else f"**NOT MET** (met with: {', '.join(map(str, met)) or 'none'})")
        + "; gpuhub's `/api/status` p95 no worse than nvdashboard's with "
        + (", ".join(map(str, calm)) or "none")
        + " of them"
    )
    calls = [r["gpuhub"]["nvml_calls_per_s"] for r in rows]
    load0, load1 = push["load_before"], push["load_after"]
    body = f"""### Pushed at 10 Hz: gpuhub's stream beside jupyterlab-nvdashboard {version}

`benchmarks/metrics_push.py`: two real Jupyter servers at once on the same NVML stand-in (8
busy A100s, one scenario file). gpuhub: `GPUSampler.interval = 0.1`, each client one socket on
`/gpuhub/api/metrics/stream` (every figure of every GPU and the processes on it, about 3.6 KB).
nvdashboard {version} from PyPI in `.bench/nvdashboard` (`pip install --no-deps --target`, done
by the benchmark when missing; never in the project's environment), its `import pynvml`
answered by `benchmarks/nvml_shim`; each client one `gpu_utilization` socket at {PERIOD_MS} ms,
as its frontend asks: its cheapest chart (8 numbers, one NVML call per GPU), so the
comparison favours nvdashboard. Per configuration, interleaved (the order flips every
repetition) and repeated {push["reps"]} times: the clients settle, then for {push["window"]:g} s
the updates they receive are counted and the server's CPU time is read from
`/proc/<pid>/stat` (utime + stime, all threads; 10 ms ticks), then, still loaded,
`GET /api/status` is timed every 100 ms for {push["probe"]:g} s (outside the CPU window).
Medians of the repetitions; the µs range is the lowest and highest repetition; the schedstat
column is the same CPU read in nanoseconds (`/proc/<pid>/task/*/schedstat`) as a cross-check.
Idle (no client), both servers use {push["idle"]["gpuhub"]:.2f} % and
{push["idle"]["nvdashboard"]:.2f} % of a core. The machine is shared: load average
{load0[0]:.1f} on {os.cpu_count()} CPUs when the run began, {load1[0]:.1f} when it ended
({push["minutes"]:.1f} minutes).

| clients | server | updates/s delivered | server CPU | CPU per update (range) | of which kernel (stime) | per update, schedstat | NVML calls/s | `/api/status` p50 / p95 |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(table)}

NVML calls per second stay at {min(calls):.0f}-{max(calls):.0f} for gpuhub whatever the number of
clients (one sampler; names and processes re-read once a second, the moving figures every
sample), while nvdashboard's grow with every socket.

Verdict: {verdict}.

{PUSH_ANALYSIS}{bound}"""
    return body, cpu_ok, status_ok


def report(results: dict[str, Any], args: argparse.Namespace) -> tuple[str, bool]:
    s1, s8 = results["sample_1"], results["sample_8"]
    real = results["real"]
    cpu = results["sampler_cpu"]
    js = results["bundle"]
    ours = results["server"]
    at50 = next((r for r in ours if r["clients"] == max(args.clients)), ours[-1])
    push, push_cpu_ok, push_status_ok = _push_section(results["push"])
    checks = {
        "sample": s8["read_ms"] < BUDGET_SAMPLE_MS,
        "p50": at50["handler_p50"] < BUDGET_P50_MS,
        "cpu": cpu["cpu_percent"] < BUDGET_CPU,
        "idle": cpu["idle_samples"] == 0,
        "js": js["gzip_kb"] < BUDGET_JS_KB,
        "push": push_cpu_ok,
        "status": push_status_ok,
    }

    def ok(key: str) -> str:
        return "within budget" if checks[key] else "**OVER BUDGET**"

    real_row = (
        f"| real NVML, {real['gpus']} x {real['model']} | {real['read_ms']:.3f} ms | "
        f"{real['read_ms'] / real['gpus']:.3f} ms | {real['sample_ms']:.3f} ms |"
        if real
        else "| real NVML | no NVIDIA GPU on this machine | | |"
    )
    rows_ours = "\n".join(
        f"| {r['clients']} | {r['handler_p50']:.2f} / {r['handler_p95']:.2f} ms | "
        f"{r['rtt_p50']:.1f} / {r['rtt_p95']:.1f} ms | {r['status_p50']:.1f} / "
        f"{r['status_p95']:.1f} ms | {r['cpu_percent']:.1f} % | {r['nvml_calls_per_s']:.1f} |"
        for r in ours
    )
    body = f"""## GPU metrics (sampler, stream, `GET /gpuhub/api/metrics`, lab extension size)

`python -m benchmarks metrics --reps {args.reps} --window {args.window:g} --seconds {args.seconds:g}`
on {platform.machine()}, {os.cpu_count()} CPUs (shared with other work, so figures are noisy),
Python {platform.python_version()}. GPUs are the NVML stand-in (`tests/support/fake_nvml.py`:
A100s, three processes each) unless the row says real NVML. The stand-in answers in
microseconds, so NVML figures here measure gpuhub's own overhead; a real driver adds its call
latency, which nvdashboard pays per socket, on the event loop.

### One sample (budget: 8 GPUs < {BUDGET_SAMPLE_MS:g} ms) — {ok("sample")}

| GPUs | read (NVML calls) | per GPU | full sample (read + history entry) |
|---|---|---|---|
| stand-in, 1 | {s1["read_ms"]:.3f} ms | {s1["read_ms"]:.3f} ms | {s1["sample_ms"]:.3f} ms |
| stand-in, 8 | {s8["read_ms"]:.3f} ms | {s8["read_ms"] / 8:.3f} ms | {s8["sample_ms"]:.3f} ms |
{real_row}

{push}
### Polling at 1 Hz, the fallback where a proxy refuses WebSockets

Handler time is what gpuhub spends (`Server-Timing`); round trip includes HTTP on loopback
and the benchmark's own client on the same cores. `/api/status` is probed every 100 ms
during the window (its CPU is in the server CPU column). Budget: handler p50 <
{BUDGET_P50_MS:g} ms with {at50["clients"]} clients — {ok("p50")}.

| polling clients | metrics handler p50 / p95 | round trip p50 / p95 | `/api/status` p50 / p95 | server CPU | NVML calls/s |
|---|---|---|---|---|---|
{rows_ours}

### Sampler thread at 1 Hz (budget < {BUDGET_CPU:g} % of a core) — {ok("cpu")}

Thread CPU time measured with `time.thread_time()` around each sample (8 stand-in GPUs).

| while polled | samples/s | while nobody polls (3 s) |
|---|---|---|
| {cpu["cpu_percent"]:.3f} % of a core | {cpu["samples_per_s"]:.2f} | {cpu["idle_samples"]} samples, {cpu["idle_cpu_ms"]:.1f} ms CPU — {ok("idle")} |

### Lab extension JS (budget < {BUDGET_JS_KB:g} KB gzip) — {ok("js")}

{js["files"]} files in `labextension/gpuhub_lab/labextension/static`: {js["raw_kb"]:.1f} KB,
**{js["gzip_kb"]:.1f} KB gzip** (all gpuhub plugins; JupyterLab's shared packages are not
bundled). Charts are hand-written SVG paths, no chart library.
"""
    return body, all(checks.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0, help="per polling scenario")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of the 10 Hz runs")
    parser.add_argument("--window", type=float, default=10.0, help="CPU window per 10 Hz run")
    parser.add_argument("--probe", type=float, default=3.0, help="/api/status probe per run")
    parser.add_argument(
        "--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 10, 50]
    )
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "sample_1": sample_cost(1),
        "sample_8": sample_cost(8),
        "real": real_nvml_cost(),
        "bundle": bundle_size(),
    }
    print("sample cost done", flush=True)
    results["sampler_cpu"] = sampler_cpu_share(min(args.seconds, 10.0))
    print("sampler CPU done", flush=True)
    results["push"] = run_comparison(args.clients, args.reps, args.window, args.probe)
    results["server"] = asyncio.run(server_runs(args.clients, args.seconds))
    body, ok = report(results, args)
    if not args.no_doc:
        write_section("metrics", body)
    print(body)
    return 0 if ok else 1


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
