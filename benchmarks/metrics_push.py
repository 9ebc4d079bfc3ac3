"""GPU charts pushed at 10 Hz: gpuhub's metrics stream beside jupyterlab-nvdashboard 0.15.

Two real Jupyter servers run side by side on the same NVML stand-in (8 busy A100s of
``harness/fake_nvml.py``, one scenario file):

* **gpuhub**: ``GPUSampler.interval = 0.1``; each client is one socket on
  ``/gpuhub/api/metrics/stream`` (what the sidebar opens).
* **nvdashboard**: jupyterlab-nvdashboard 0.15.0 from PyPI, kept out of the project's
  environment in ``.bench/nvdashboard`` (``pip install --no-deps --target``; this module
  installs it there when it is missing) and put on that server's ``PYTHONPATH`` only, behind
  ``benchmarks/nvml_shim`` (its ``import pynvml`` gets the stand-in). Each client is one
  ``gpu_utilization`` socket at 100 ms, as its frontend asks: its cheapest chart (one NVML
  call per GPU per tick), so the comparison flatters nvdashboard, not gpuhub.
* **nvdashboard_resources**: the same server, each client one ``gpu_resource`` socket
  instead: its "GPU Resources" chart, utilization and memory of every GPU (three NVML calls
  per GPU per tick), the nearest of its charts to what gpuhub's stream carries.

* **floor**: not a chart server but the least any pushing server pays: a bare tornado process
  (:func:`floor_server`) whose one 10 Hz timer sends a prepared frame of gpuhub's size to
  every socket, one ``send()`` each: one wake-up per tick and one send per update, nothing
  else. Its cost per update bounds what any design can reach on this machine.

Both Jupyter servers load gpuhub_lab (the test harness always does; idle, its sampler sleeps
and nothing of it runs) and ``harness/jupyter/metrics_stats.py``, which counts NVML
calls and where gpuhub's samples were read.

For each number of clients and each server, interleaved and repeated: open the clients, let
them settle, then for ``window`` seconds count the updates they receive and the server's CPU
time: run time in nanoseconds summed over its threads (``/proc/<pid>/task/*/schedstat``, the
primary figure) and utime + stime (``/proc/<pid>/stat``, 10 ms ticks, a cross-check and the
kernel's share); then, still loaded, time ``GET /api/status`` every 100 ms for ``probe``
seconds (the probe's own CPU is outside the CPU window). Idle windows of every server are
interleaved the same way. Medians are reported: the machine is shared, so each figure is the
median of ``reps`` runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import percentile
from harness import fake_nvml as fake
from harness.hub.process import free_port
from harness.jupyter.metrics_stats import ROUTE as STATS
from harness.jupyter.server import TOKEN, jupyter_server

REPO = Path(__file__).resolve().parents[1]
FAKE = "harness.fake_nvml"
GIB = 2**30
PERIOD_MS = 100  # 10 Hz: nvdashboard's frontend default, gpuhub's fastest
PEER = "jupyterlab-nvdashboard"
PEER_VERSION = "0.15.0"
PEER_DIR = REPO / ".bench" / "nvdashboard"
SHIM_DIR = REPO / "benchmarks" / "nvml_shim"
TARGET_RATIO = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
AUTH = {"Authorization": f"token {TOKEN}"}


def peer_version() -> str | None:
    found = sorted(PEER_DIR.glob("jupyterlab_nvdashboard-*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").split("-")[1] if found else None


def ensure_peer() -> str:
    """jupyterlab-nvdashboard 0.15.0 under ``.bench/nvdashboard``, installed there if missing."""
    version = peer_version()
    if version is None:
        print(f"installing {PEER}=={PEER_VERSION} into {PEER_DIR} (pip --target)", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
             str(PEER_DIR), f"{PEER}=={PEER_VERSION}"],
            check=True,
        )  # fmt: skip
        version = peer_version()
    if version != PEER_VERSION:
        raise SystemExit(
            f"{PEER_DIR} holds {PEER} {version}, not {PEER_VERSION}; remove it and run again."
        )
    return version


def cpu_times(pid: int) -> tuple[float, float]:
    """utime and stime of process ``pid`` (all its threads) in seconds, from
    ``/proc/<pid>/stat`` (fields 14 and 15 of proc(5))."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid``."""
    return sum(cpu_times(pid))


def cpu_seconds_precise(pid: int) -> float:
    """The same from nanoseconds of run time (``/proc/<pid>/task/*/schedstat``): what a
    window of a few seconds at a fraction of a percent of a core needs, where 10 ms ticks
    count a handful of times."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
    return total / 1e9


def busy_machine() -> fake.Scenario:
    scenario = fake.a100s(8, utilization=70, memory_used=30 * GIB)
    for i, gpu in enumerate(scenario.gpus):
        gpu.processes = [fake.FakeProcess(100_000 + 10 * i + k, GIB) for k in range(3)]
    return scenario


@dataclass
class Design:
    name: str
    url: str  # base URL, ending in "/"
    pid: int
    path: str  # the socket's route
    hello: dict[str, Any] | None = None  # nvdashboard's frontend sends its period first
    jupyter: bool = True  # a Jupyter server: NVML counters and /api/status to probe


FLOOR_FRAME_BYTES = 3645  # gpuhub's per-sample message with this scenario, framed


def floor_server(port: int, size: int) -> None:
    """The floor (run as ``python -m benchmarks.metrics_push floor PORT SIZE``): a tornado
    WebSocket server that sends one prepared ``size``-byte frame to every socket every
    100 ms, one ``send()`` each, from one timer that runs while a socket is open."""
    from tornado.ioloop import IOLoop, PeriodicCallback
    from tornado.iostream import IOStream
    from tornado.web import Application
    from tornado.websocket import WebSocketHandler

    from gpuhub_lab.metrics.stream import text_frame

    frame = text_frame(json.dumps({"pad": "x" * (size - 14)}).encode())
    sockets: set[WebSocketHandler] = set()

    def tick() -> None:
        for handler in list(sockets):
            connection = handler.ws_connection
            stream = connection.stream if connection is not None else None
            if stream is None or connection is None or connection.is_closing():
                continue
            if type(stream) is IOStream and not stream.writing():
                try:
                    stream.socket.send(frame)
                    continue
                except OSError:
                    pass
            handler.write_message(frame[4:].decode())

    clock = PeriodicCallback(tick, PERIOD_MS)

    class Floor(WebSocketHandler):
        def check_origin(self, origin: str) -> bool:
            return True

        def open(self) -> None:
            self.set_nodelay(True)
            sockets.add(self)
            if not clock.is_running():
                clock.start()

        def on_close(self) -> None:
            sockets.discard(self)
            if not sockets:
                clock.stop()

    Application([(r"/floor", Floor)]).listen(port, address="127.0.0.1")
    print("ready", flush=True)
    IOLoop.current().start()


@contextmanager
def floor_process() -> Iterator[Design]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.metrics_push", "floor", str(port),
         str(FLOOR_FRAME_BYTES)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "labextension"), str(REPO)])},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the floor server did not start")
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            pass
        yield Design("floor", f"http://127.0.0.1:{port}/", process.pid, "floor", jupyter=False)
    finally:
        process.terminate()
        process.wait(timeout=30)


@dataclass
class Run:
    design: str
    clients: int
    updates_per_s: float
    cpu_percent: float  # from 10 ms ticks
    cpu_percent_precise: float  # from schedstat nanoseconds
    system_percent: float  # the kernel's share of cpu_percent (sockets, wakeups)
    nvml_calls_per_s: float
    status: list[float] = field(default_factory=list)
    samples: int = 0  # gpuhub: samples taken in the window
    samples_on_loop: int = 0  # of which read on the event loop
    load: float = 0.0  # the machine's 1-minute load average at the end of the window

    @property
    def cpu_us_per_update(self) -> float:
        return self.cpu_percent / 100 / self.updates_per_s * 1e6 if self.updates_per_s else 0.0

    @property
    def system_us_per_update(self) -> float:
        return self.system_percent / 100 / self.updates_per_s * 1e6 if self.updates_per_s else 0.0

    @property
    def precise_us_per_update(self) -> float:
        return (
            self.cpu_percent_precise / 100 / self.updates_per_s * 1e6 if self.updates_per_s else 0.0
        )


async def _stats(session: aiohttp.ClientSession, design: Design) -> dict[str, Any]:
    if not design.jupyter:
        return {"nvml_calls": 0}
    async with session.get(design.url + STATS) as r:
        stats: dict[str, Any] = await r.json()
        return stats


async def _probe(session: aiohttp.ClientSession, design: Design, seconds: float) -> list[float]:
    latencies: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        async with session.get(design.url + "api/status") as r:
            await r.read()
        latencies.append((time.perf_counter() - t) * 1000)
        await asyncio.sleep(0.1)
    return latencies


async def measure(design: Design, clients: int, window: float, probe: float) -> Run:
    """``clients`` sockets on ``design`` at 10 Hz: updates received, server CPU, NVML calls
    per second in a ``window``; then ``/api/status`` latencies while they go on."""
    received = [0] * clients
    ws_url = design.url.replace("http://", "ws://", 1) + design.path
    async with aiohttp.ClientSession(headers=AUTH) as session:

        async def client(i: int, ws: aiohttp.ClientWebSocketResponse) -> None:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                received[i] += 1

        async with AsyncExitStack() as stack:
            sockets = [
                await stack.enter_async_context(session.ws_connect(ws_url, max_msg_size=0))
                for _ in range(clients)
            ]
            if design.hello is not None:
                for ws in sockets:
                    await ws.send_json(design.hello)
            tasks = [asyncio.create_task(client(i, ws)) for i, ws in enumerate(sockets)]
            settle = time.monotonic() + 30
            while min(received) < 3 and time.monotonic() < settle:  # all ticking
                await asyncio.sleep(0.1)
            if min(received) < 3:
                raise RuntimeError(f"{design.name}: clients got no updates: {received}")
            stats0 = await _stats(session, design)
            count0, t0 = sum(received), time.monotonic()
            (user0, sys0), ns0 = cpu_times(design.pid), cpu_seconds_precise(design.pid)
            await asyncio.sleep(window)
            count1, t1 = sum(received), time.monotonic()
            (user1, sys1), ns1 = cpu_times(design.pid), cpu_seconds_precise(design.pid)
            stats1 = await _stats(session, design)
            status = await _probe(session, design, probe) if design.jupyter else []
            for ws in sockets:
                await ws.close()
            await asyncio.gather(*tasks, return_exceptions=True)
    wall = t1 - t0
    return Run(
        design.name,
        clients,
        updates_per_s=(count1 - count0) / wall,
        cpu_percent=(user1 + sys1 - user0 - sys0) / wall * 100,
        system_percent=(sys1 - sys0) / wall * 100,
        cpu_percent_precise=(ns1 - ns0) / wall * 100,
        nvml_calls_per_s=(stats1["nvml_calls"] - stats0["nvml_calls"]) / wall,
        status=status,
        samples=stats1.get("samples_taken", 0) - stats0.get("samples_taken", 0),
        samples_on_loop=stats1.get("samples_on_loop", 0) - stats0.get("samples_on_loop", 0),
        load=os.getloadavg()[0],
    )


async def idle(design: Design, window: float) -> float:
    """The server's CPU (µs per second, schedstat) with no client at all."""
    cpu0, t0 = cpu_seconds_precise(design.pid), time.monotonic()
    await asyncio.sleep(window)
    return (cpu_seconds_precise(design.pid) - cpu0) / (time.monotonic() - t0) * 1e6


@contextmanager
def _servers(tmp: Path, before: Path | None = None) -> Any:
    scenario_path = tmp / "nvml.json"
    scenario_path.write_text(busy_machine().to_json())
    common = (
        f"c.GPUSampler.nvml_module = {FAKE!r}\n"
        "c.ServerApp.jpserver_extensions['harness.jupyter.metrics_stats'] = True\n"
        "c.ServerApp.log_level = 'WARN'\n"
    )
    env = {"GPUHUB_FAKE_NVML": str(scenario_path), "GPUHUB_NVML_MODULE": FAKE}
    ours_config = common + "c.GPUSampler.interval = 0.1\nc.GPUSampler.idle_timeout = 2.0\n"
    peer_config = common + "c.ServerApp.jpserver_extensions['jupyterlab_nvdashboard'] = True\n"
    peer_path = os.pathsep.join([str(SHIM_DIR), str(PEER_DIR), str(REPO)])
    ours_path = str(REPO)
    if before is not None:  # another gpuhub tree (its own stand-in and stats extension too)
        before_path = os.pathsep.join(str(before / d) for d in ("labextension", "spawner", ""))

    def start(name: str, path: str, config: str) -> Any:
        folder = tmp / name
        (folder / "root").mkdir(parents=True)
        return jupyter_server(
            folder / "root", folder, env={**env, "PYTHONPATH": path}, config=config
        )

    with ExitStack() as stack:
        ours = stack.enter_context(start("gpuhub", ours_path, ours_config))
        peer = stack.enter_context(start("nvdashboard", peer_path, peer_config))
        floor = stack.enter_context(floor_process())
        designs = [
            Design("gpuhub", ours.url, ours.process.pid, "gpuhub/api/metrics/stream"),
            Design(
                "nvdashboard",
                peer.url,
                peer.process.pid,
                "nvdashboard/gpu_utilization",
                {"updateFrequency": PERIOD_MS, "isPaused": False},
            ),
            Design(
                "nvdashboard_resources",
                peer.url,
                peer.process.pid,
                "nvdashboard/gpu_resource",
                {"updateFrequency": PERIOD_MS, "isPaused": False},
            ),
            floor,
        ]
        if before is not None:
            old = stack.enter_context(start("before", before_path, ours_config))
            designs.append(Design("before", old.url, old.process.pid, "gpuhub/api/metrics/stream"))
        yield tuple(designs)


async def _run_all(
    designs: tuple[Design, ...], clients: list[int], reps: int, window: float, probe: float
) -> dict[str, Any]:
    runs: list[Run] = []
    idles: dict[str, list[float]] = {d.name: [] for d in designs}
    for rep in range(reps):
        order = designs if rep % 2 == 0 else designs[::-1]  # neither always goes first
        for design in order:
            idles[design.name].append(await idle(design, window))
        for n in clients:
            for design in order:
                run = await measure(design, n, window, probe)
                runs.append(run)
                print(
                    f"rep {rep + 1}/{reps} {design.name:11} {n:2} clients: "
                    f"{run.updates_per_s:6.1f} updates/s, CPU {run.cpu_percent_precise:5.2f} %, "
                    f"{run.precise_us_per_update:7.1f} us/update "
                    f"(ticks {run.cpu_us_per_update:6.1f}), "
                    f"{run.samples_on_loop}/{run.samples} read on the loop, "
                    f"{run.nvml_calls_per_s:7.1f} NVML calls/s, "
                    f"status p95 {percentile(run.status, 95):5.1f} ms, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                await asyncio.sleep(2.5)  # gpuhub's sampler goes idle between runs
    return {"runs": runs, "idle": idles}


def run_comparison(
    clients: list[int], reps: int, window: float, probe: float, before: Path | None = None
) -> dict[str, Any]:
    """Start the servers, measure, and summarize (medians over ``reps``). ``before``: another
    gpuhub tree (``git archive <commit>`` unpacked) measured in the same run, as "before"."""
    version = ensure_peer()
    load_before = os.getloadavg()
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="gpuhub-push-") as tmp_name,
        _servers(Path(tmp_name), before) as designs,
    ):
        measured = asyncio.run(_run_all(designs, clients, reps, window, probe))
    rows = []
    for n in clients:
        row: dict[str, Any] = {"clients": n}
        for name in [d.name for d in designs]:
            runs = [r for r in measured["runs"] if r.design == name and r.clients == n]
            row[name] = {
                "updates_per_s": statistics.median(r.updates_per_s for r in runs),
                "cpu_percent": statistics.median(r.cpu_percent_precise for r in runs),
                "cpu_us_per_update": statistics.median(r.precise_us_per_update for r in runs),
                "cpu_us_spread": (
                    min(r.precise_us_per_update for r in runs),
                    max(r.precise_us_per_update for r in runs),
                ),
                "tick_us_per_update": statistics.median(r.cpu_us_per_update for r in runs),
                "system_us_per_update": statistics.median(r.system_us_per_update for r in runs),
                "nvml_calls_per_s": statistics.median(r.nvml_calls_per_s for r in runs),
                "status_p50": statistics.median(percentile(r.status, 50) for r in runs),
                "status_p95": statistics.median(percentile(r.status, 95) for r in runs),
                "status_p95_spread": (
                    min(percentile(r.status, 95) for r in runs),
                    max(percentile(r.status, 95) for r in runs),
                ),
                "samples": sum(r.samples for r in runs),
                "samples_on_loop": sum(r.samples_on_loop for r in runs),
            }
        row["ratio"] = row["nvdashboard"]["cpu_us_per_update"] / row["gpuhub"]["cpu_us_per_update"]
        row["resources_ratio"] = (
            row["nvdashboard_resources"]["cpu_us_per_update"] / row["gpuhub"]["cpu_us_per_update"]
        )
        row["tick_ratio"] = (
            row["nvdashboard"]["tick_us_per_update"] / row["gpuhub"]["tick_us_per_update"]
        )
        # What no design could pass: nvdashboard's cost over one wake-up and one send.
        row["ceiling"] = row["nvdashboard"]["cpu_us_per_update"] / row["floor"]["cpu_us_per_update"]
        if "before" in row:
            row["before_ratio"] = (
                row["nvdashboard"]["cpu_us_per_update"] / row["before"]["cpu_us_per_update"]
            )
        rows.append(row)
    return {
        "rows": rows,
        "idle": {k: statistics.median(v) for k, v in measured["idle"].items()},
        "peer_version": version,
        "reps": reps,
        "window": window,
        "probe": probe,
        "load_range": (
            min(r.load for r in measured["runs"]),
            max(r.load for r in measured["runs"]),
        ),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "minutes": (time.monotonic() - started) / 60,
    }


if __name__ == "__main__":
    if sys.argv[1:2] != ["floor"]:
        raise SystemExit("usage: python -m benchmarks.metrics_push floor PORT SIZE")
    floor_server(int(sys.argv[2]), int(sys.argv[3]))
