"""``/gpuhub/api/metrics/stream`` in a real Jupyter server over real sockets, and
``%gpu --watch`` in a real kernel following it (or polling where a proxy refuses it).

The server reads the NVML stand-in (``harness/fake_nvml.py``) from a scenario file the
tests rewrite. Facts are counted, never timed: the server's sampler and stream report what
they did (``harness/jupyter/metrics_stats.py``), and the polling endpoint's history
lists every sample taken, so a client's messages can be matched one to one with samples.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from harness import fake_nvml as fake
from harness.jupyter.metrics_stats import ROUTE as STATS
from harness.jupyter.server import TOKEN, JupyterServer, jupyter_server
from harness.paths import REPO
from tests.support.jupyter.kernel import ready_kernel_client, run
from tests.support.jupyter.plain_proxy import plain_proxy

pytestmark = pytest.mark.e2e

INTERVAL = 0.2
STREAM = "gpuhub/api/metrics/stream"
AUTH = {"Authorization": f"token {TOKEN}"}


class Rig:
    def __init__(self, server: JupyterServer, scenario_path: Path) -> None:
        self.server = server
        self.scenario_path = scenario_path
        self.ws_url = server.url.replace("http://", "ws://", 1) + STREAM

    def set_scenario(self, scenario: fake.Scenario) -> None:
        tmp = self.scenario_path.with_suffix(".tmp")
        tmp.write_text(scenario.to_json())
        tmp.replace(self.scenario_path)

    def stats(self) -> dict[str, Any]:
        answer = self.server.api("GET", STATS)
        assert answer.status_code == 200, answer.text
        stats: dict[str, Any] = answer.json()
        return stats

    def sample_times(self) -> list[float]:
        """The time of every sample the server took in the last 30 s (its history)."""
        body = self.server.api("GET", "gpuhub/api/metrics").json()
        return [entry["time"] for entry in body["history"]]

    async def connect(self, **headers: str) -> WebSocketClientConnection:
        request = HTTPRequest(self.ws_url, headers={**AUTH, **headers}, request_timeout=30)
        return await websocket_connect(request)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.05)
    return result


async def read_json(ws: WebSocketClientConnection, timeout: float = 30.0) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.read_message(), timeout)
    assert message is not None, "the server closed the stream"
    data: dict[str, Any] = json.loads(message)
    return data


def assert_one_per_sample(times: list[float], samples: list[float]) -> None:
    """``times`` (what a client got, in order) are exactly the samples taken from the first
    to the last of them: none missed, none twice."""
    assert times == sorted(set(times)), times
    taken = [t for t in samples if times[0] <= t <= times[-1]]
    assert times == taken, (times, taken)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("metrics-stream")
    root = tmp / "root"
    root.mkdir()
    scenario_path = tmp / "nvml.json"
    scenario_path.write_text(fake.a100s(2, utilization=30).to_json())
    env = {"PYTHONPATH": str(REPO), "GPUHUB_FAKE_NVML": str(scenario_path)}
    config = (
        "c.GPUSampler.nvml_module = 'harness.fake_nvml'\n"
        f"c.GPUSampler.interval = {INTERVAL}\n"
        "c.GPUSampler.history_seconds = 30\n"
        "c.GPUSampler.idle_timeout = 1.0\n"
        "c.MetricsStream.stuck_timeout = 2.0\n"
        "c.ServerApp.jpserver_extensions['harness.jupyter.metrics_stats'] = True\n"
    )
    with jupyter_server(root, tmp, env=env, config=config) as server:
        yield Rig(server, scenario_path)


async def test_the_stream_needs_jupyter_auth_and_a_same_origin_page(rig: Rig):
    import requests

    # A browser's login cookie: what a foreign page could make it send along.
    browser = requests.Session()
    assert browser.get(rig.server.url + f"api/status?token={TOKEN}", timeout=30).ok
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
    own_page = "http://" + rig.server.url.split("/")[2]
    refused = [
        {},  # nobody
        {"Authorization": "token not-the-token"},
        {"Cookie": cookie, "Origin": "http://evil.example"},  # another site's page
    ]
    for headers in refused:
        with pytest.raises(HTTPClientError) as answer:
            await websocket_connect(HTTPRequest(rig.ws_url, headers=headers))
        assert answer.value.code == 403, headers
    for headers in ({"Cookie": cookie, "Origin": own_page}, AUTH):  # JupyterLab; a script
        ws = await websocket_connect(HTTPRequest(rig.ws_url, headers=headers))
        assert (await read_json(ws))["available"] is True
        ws.close()


async def test_first_message_is_the_polled_body_then_one_message_per_sample(rig: Rig):
    rig.set_scenario(fake.a100s(2, utilization=30))
    for _ in range(20):  # until the GET lands on the same sample as the first message
        ws = await rig.connect()
        first = await asyncio.wait_for(ws.read_message(), 30)
        assert isinstance(first, str)
        polled = rig.server.api("GET", "gpuhub/api/metrics").text
        if json.loads(polled)["time"] == json.loads(first)["time"]:
            break
        ws.close()
    assert first == polled  # the very same body, history included
    head = json.loads(first)
    assert head["history"] and head["interval"] == INTERVAL and head["min_interval"] == 0.1
    messages = [await read_json(ws) for _ in range(10)]
    ws.close()
    for message in messages:
        assert set(message) == set(head) - {"history"}
        assert [g["uuid"] for g in message["gpus"]] == [g["uuid"] for g in head["gpus"]]
    times = [head["time"], *(m["time"] for m in messages)]
    assert_one_per_sample(times, rig.sample_times())


async def test_thirty_sockets_get_every_sample_from_one_encoding(rig: Rig):
    rig.set_scenario(fake.a100s(4, utilization=55))
    sockets = [await rig.connect() for _ in range(30)]
    firsts = [await read_json(ws) for ws in sockets]
    before = rig.stats()
    assert before["sockets"] == 30 and before["listeners"] == 1  # one sampler for all
    # A sample taken while the first messages were read may still be on its way to the
    # sockets: the count starts with the first sample taken after `before`.
    counted_from = before["latest_time"] or 0.0

    async def follow(ws: WebSocketClientConnection) -> list[float]:
        times: list[float] = []
        while sum(t > counted_from for t in times) < 8:
            times.append((await read_json(ws))["time"])
        return times

    received = await asyncio.gather(*(follow(ws) for ws in sockets))
    after = rig.stats()
    for ws in sockets:
        ws.close()
    samples = after["samples_taken"] - before["samples_taken"]
    assert samples >= 8
    # One serialization and one frame per sample, not one per socket (30 would be 30x).
    assert after["encodes"] - before["encodes"] <= samples + 1
    assert after["frames"] - before["frames"] <= samples + 1
    assert after["sent"] - before["sent"] >= 30 * 8
    # The stand-in answers in microseconds: its reads run on the server's event loop, whose
    # timer is the clock (no sampler thread wakes, nothing is handed between threads).
    assert after["samples_on_loop"] > before["samples_on_loop"]
    assert after["samples_on_loop"] - before["samples_on_loop"] <= samples
    history = rig.sample_times()
    for first, times in zip(firsts, received, strict=True):
        assert_one_per_sample([first["time"], *times], history)


def _raw_stream_client(rig: Rig) -> socket.socket:
    """A WebSocket client that completes the handshake, then never reads again."""
    host, port = rig.server.url.split("/")[2].split(":")
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills fast
    raw.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall(
        (
            f"GET /{STREAM} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: token {TOKEN}\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(1)  # byte by byte: nothing of the stream itself is read
    assert head.startswith(b"HTTP/1.1 101"), head
    return raw


async def test_a_socket_that_never_reads_holds_back_nobody_and_is_closed(rig: Rig):
    # Messages of ~160 KB (long GPU names) fill a socket's buffers within seconds.
    big = fake.a100s(8, utilization=42)
    for gpu in big.gpus:
        gpu.name = "NVIDIA A100 " + "x" * 20_000
    rig.set_scenario(big)
    try:
        before = rig.stats()
        stuck = _raw_stream_client(rig)
        reader = await rig.connect()
        times = [(await read_json(reader))["time"]]
        while rig.stats()["closed_stuck"] == before["closed_stuck"]:
            times.append((await read_json(reader, timeout=60))["time"])
            assert len(times) < 1000, "the silent client was never closed"
        # Meanwhile the reading client got every sample, none late or missing.
        times += [(await read_json(reader))["time"] for _ in range(3)]
        reader.close()
        assert_one_per_sample(times, rig.sample_times())
        after = rig.stats()
        assert after["dropped"] > before["dropped"]  # the silent one kept only the newest
        assert "took no message for" in rig.server.log()
        # The server gave up on it: what was buffered, a close frame, then end of stream.
        stuck.settimeout(30)
        while stuck.recv(1 << 16):
            pass
        stuck.close()
    finally:
        rig.set_scenario(fake.a100s(2, utilization=30))


async def test_sampling_stops_after_the_last_socket_and_starts_with_the_next(rig: Rig):
    ws = await rig.connect()
    await read_json(ws)
    last = (await read_json(ws))["time"]
    assert rig.stats()["listeners"] == 1
    ws.close()
    wait_until(lambda: rig.stats()["sleeping"], what="the sampler to sleep")
    idle = rig.stats()
    assert idle["sockets"] == 0 and idle["listeners"] == 0
    await asyncio.sleep(6 * INTERVAL)  # a window in which an awake sampler samples 6 times
    assert rig.stats()["samples_taken"] == idle["samples_taken"]
    ws = await rig.connect()  # the next listener wakes it
    await read_json(ws)
    assert (await read_json(ws))["time"] > last
    ws.close()


# --- %gpu --watch in a real kernel ------------------------------------------------------
@pytest.fixture(scope="module")
def kernel(rig: Rig) -> Iterator[BlockingKernelClient]:
    answer = rig.server.api(
        "POST",
        "api/sessions",
        json={"path": "watch.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    assert answer.status_code == 201, answer.text
    session = answer.json()
    client = ready_kernel_client(rig.server.runtime_dir / f"kernel-{session['kernel']['id']}.json")
    try:
        assert run(client, "%load_ext gpuhub_lab").error is None
        yield client
    finally:
        client.stop_channels()
        rig.server.api("DELETE", f"api/sessions/{session['id']}")


def watch_views(client: BlockingKernelClient, until: Callable[[str], bool]) -> list[str]:
    """The HTML the watch view was set to (widget updates on iopub), until one matches."""
    views: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            msg = client.get_iopub_msg(timeout=1)
        except Exception:  # queue.Empty: nothing yet
            continue
        if msg["msg_type"] != "comm_msg":
            continue
        value = msg["content"]["data"].get("state", {}).get("value")
        if isinstance(value, str):
            views.append(value)
            if until(value):
                return views
    raise AssertionError(f"no matching view among {len(views)}: {views[-1:]}")


def test_gpu_watch_follows_the_stream_and_polls_where_a_proxy_refuses_it(
    rig: Rig, kernel: BlockingKernelClient
):
    rig.set_scenario(fake.a100s(1, utilization=11))
    shown = run(kernel, "%gpu --watch 8")
    assert shown.error is None and not shown.stderr, shown.stderr
    wait_until(lambda: rig.stats()["sockets"] == 1, what="the watch's socket")
    rig.set_scenario(fake.a100s(1, utilization=77))
    views = watch_views(kernel, lambda html: "77%" in html)
    assert "Live: the server pushes every sample (each 0.2 s)." in views[-1]
    assert "polling" not in "".join(views)
    wait_until(lambda: rig.stats()["sockets"] == 0, what="the watch to end and close its socket")

    # Through a proxy that does not know WebSockets: the handshake is refused (HTTP 400),
    # the view polls through the same proxy and says so.
    with plain_proxy(rig.server.url) as proxy:
        code = (
            "import os\n"
            f"os.environ['GPUHUB_SERVER_URL'] = {proxy!r}\n"
            f"os.environ['GPUHUB_SERVER_TOKEN'] = {TOKEN!r}\n"
            "%gpu --watch 8"
        )
        assert run(kernel, code).error is None
        rig.set_scenario(fake.a100s(1, utilization=64))
        views = watch_views(kernel, lambda html: "64%" in html and "polling" in html)
    assert "as the server&#x27;s metrics stream is not available (HTTP 400" in views[-1]
    run(kernel, "del os.environ['GPUHUB_SERVER_URL'], os.environ['GPUHUB_SERVER_TOKEN']")
