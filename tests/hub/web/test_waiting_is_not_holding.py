"""Waiting is not holding, through a real JupyterHub on a workstation: while carol waits in
gpuhub's line for a GPU that alice and bob hold, every screen says one figure per fact. The
fleet page's Held, Free and Total are the GPUs given (4 of 4), her row and the type's Waiting
say she waits; her spawn page says "4 of 4 are held"; ``/hub/metrics`` counts her in
``gpuhub_gpus_waiting``, never in ``gpuhub_gpus_held``, ``gpuhub_gpus{state="held"}`` or
GPU-seconds; the holdings API and her quota's sentences say she waits. And times on hub pages
are written one way, in the reader's own zone (a browser in another zone)."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import requests

from harness.hub.process import API_TOKEN, ROOT, Hub, spawn, start_hub, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import jobs_hub_config
from tests.support.hub.progress import Progress
from tests.support.hub.standin_gpus import write as set_utilization

pytestmark = pytest.mark.e2e

CONFIG = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
c.Authenticator.admin_users = {{"root"}}
c.JupyterHub.allow_named_servers = True
c.JupyterHub.load_groups = {{"students": {{"users": ["alice", "bob", "carol"]}}}}
c.LocalGPUSpawner.gpu_devices = [0, 1, 2, 3]
c.LocalGPUSpawner.gpu_types = {{"t4": {{"display_name": "T4", "devices": [0, 1, 2, 3], "max_gpus": 2}}}}
c.LocalGPUSpawner.group_limits = {{"students": {{"max_gpus": 2}}}}
c.LocalGPUSpawner.gpu_quota = {{"default": 2}}
c.LocalGPUSpawner.gpu_queue_timeout = 600
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_utilization_source = "tests.support.hub.standin_gpus.FileUtilization"
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 1}}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
# A zone far from UTC, with a half hour, so that a time written in UTC cannot pass for it.
READER_ZONE = "Asia/Kolkata"
ONE_WAY = re.compile(
    r"^\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4}, \d\d:\d\d$"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("waiting-hub")
    set_utilization(workdir, dict.fromkeys(range(4), 0.5))
    hub = start_hub(workdir, jobs_hub_config(workdir) + CONFIG)
    try:
        for user in ("alice", "bob"):
            assert spawn(hub, user, {"gpus": 2, "gpu_type": "t4"}).status_code in (201, 202)
        for user in ("alice", "bob"):
            wait_ready(hub, user)
        yield hub
    finally:
        for name in ("alice", "bob", "carol"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def until(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return value


def until_says(what: str, read: Any, says: Any, timeout: float = 60) -> str:
    """``read()`` again until ``says(text)``; the text that did."""

    def check() -> str | None:
        text = read()
        return text if says(text) else None

    return str(until(what, check, timeout))


def metrics(hub: Hub) -> str:
    answer = requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    )
    assert answer.status_code == 200
    return answer.text


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` with exactly ``labels``, or None."""
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if found and dict(re.findall(r'(\w+)="([^"]*)"', found.group(1))) == labels:
            return float(found.group(2))
    return None


def carol_waits(hub: Hub) -> Progress:
    """carol asks for 1 GPU while alice and bob hold all 4: she waits in line."""
    if hub.user_model("carol")["servers"].get(""):
        hub.api("DELETE", "/users/carol/server")
        until("carol's old wait ended", lambda: not hub.user_model("carol")["servers"].get(""))
    answer = hub.api("POST", "/users/carol/server", data=json.dumps({"gpus": 1, "gpu_type": "t4"}))
    assert answer.status_code == 202, answer.text
    progress = Progress(hub, "carol")
    until("carol is told she waits", lambda: progress.said("you are 1st in line"))
    return progress


def types_row(page: str) -> tuple[str, ...]:
    """The T4 row of the fleet page's types table: Held, Free, Total, Waiting."""
    found = re.search(
        r"<td>T4</td>" + r'<td class="text-end[^"]*">([^<]*)</td>' * 4,
        page,
    )
    assert found, page[-3000:]
    return found.groups()


def test_a_spawn_waiting_in_line_is_waiting_on_every_screen(hub: Hub) -> None:
    progress = carol_waits(hub)
    try:
        # Her spawn page: the GPUs given, 4 of 4.
        assert progress.said("1st in line; 4 of 4 are held"), progress.messages

        # The fleet page: Held 4 of 4 (never 5), Free 0, and she waits, in her own row.
        root = hub.login("root")
        admin = until_says(
            "the fleet page shows carol waiting",
            lambda: root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text,
            lambda page: 'data-user="carol"' in page,
        )
        assert types_row(admin) == ("4", "0", "4", "1")
        row = re.search(r'<tr[^>]*data-user="carol"[^>]*>.*?</tr>', admin, re.S)
        assert row and 'data-state="waiting"' in row.group(0), admin[-3000:]
        assert "waiting in line" in row.group(0) and "Stop" not in row.group(0)
        held_rows = re.findall(r'data-user="(\w+)"[^>]*data-state="held"', admin)
        assert sorted(held_rows) == ["alice", "bob"]
        # By group: what the students hold, not what they wait for.
        assert '<td>students</td><td class="text-end">4</td>' in admin
        # And when she likely starts, in the spawn page's words, once the monitor estimated.
        estimated = until_says(
            "the fleet page says when carol likely starts",
            lambda: root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text,
            lambda page: "gpuhub-estimate" in page,
        )
        row = re.search(r'<tr[^>]*data-user="carol"[^>]*>.*?</tr>', estimated, re.S)
        assert row and re.search(
            r'class="small text-body-secondary gpuhub-estimate">Likely to start (within '
            r"moments|around \d\d:\d\d UTC)",
            row.group(0),
        ), row.group(0) if row else estimated[-3000:]
        # Her own view of the page says the same of her.
        own = hub.login("carol").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
        assert 'data-state="waiting"' in own and "waiting in line" in own

        # /hub/metrics: the same figures.
        line = {"user": "carol", "kind": "server", "gpu_type": "T4", "where": "line"}
        scraped = until_says(
            "carol in the metrics",
            lambda: metrics(hub),
            lambda text: sample(text, "gpuhub_gpus_waiting", **line) is not None,
        )
        assert sample(scraped, "gpuhub_gpus", gpu_type="T4", state="held") == 4
        assert sample(scraped, "gpuhub_gpus", gpu_type="T4", state="free") == 0
        assert sample(scraped, "gpuhub_gpus_waiting", **line) == 1
        held = re.findall(r'^gpuhub_gpus_held\{.*user="(\w+)".*\} (\S+)$', scraped, re.M)
        assert sorted(held) == [("alice", "2.0"), ("bob", "2.0")], held

        # The holdings API: held and waiting apart, and where she waits.
        mine = hub.api("GET", "/gpuhub/holdings/carol").json()
        assert (mine["held"], mine["waiting"], mine["quota"]) == (0, 1, 2), mine
        [entry] = mine["holdings"]
        assert entry["waiting"] == "waiting in line" and entry["label"] == "server 'default'"
        assert hub.api("GET", "/gpuhub/holdings/alice").json()["holdings"][0]["waiting"] is None

        # Her quota's sentences: the place counts, and is called waiting, never held.
        refused = hub.api(
            "POST", "/users/carol/servers/second", data=json.dumps({"gpus": 2, "gpu_type": "t4"})
        )
        assert refused.status_code == 403, refused.text
        assert (
            "You hold 0 and wait for 1, 1 of your quota of 2 GPUs (server 'default': 1, "
            "waiting in line), and this server needs 2 more"
        ) in refused.json()["message"]
        form = hub.login("carol").get(f"{hub.url}/hub/spawn/carol/second", timeout=30).text
        assert (
            "You hold 0 and wait for 1, 1 of your 2 GPUs (server &#39;default&#39;: 1, "
            "waiting in line)"
        ) in form

        # Nothing is billed for time in line: alice's GPU-seconds grow, carol has none.
        start = sample(metrics(hub), "gpuhub_gpu_seconds_total", user="alice", gpu_type="T4") or 0
        grown = until_says(
            "alice's GPU-seconds grow",
            lambda: metrics(hub),
            lambda text: (
                (sample(text, "gpuhub_gpu_seconds_total", user="alice", gpu_type="T4") or 0)
                >= start + 4
            ),
        )
        assert not sample(grown, "gpuhub_gpu_seconds_total", user="carol", gpu_type="T4")
        assert "waiting in line" in hub.api("GET", "/gpuhub/holdings/carol").text  # still
    finally:
        hub.api("DELETE", "/users/carol/server")
        until("carol left the line", lambda: not hub.user_model("carol")["servers"].get(""))
    # Out of the line: nothing of hers is shown or counted any more.
    gone = until_says(
        "carol gone from the metrics",
        lambda: metrics(hub),
        lambda text: "gpuhub_gpus_waiting{" not in text,
    )
    assert sample(gone, "gpuhub_gpus", gpu_type="T4", state="held") == 4


def local_time(iso: str) -> str:
    """``iso`` as gpuhub writes a moment for a reader in READER_ZONE."""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(READER_ZONE))
    months = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    return f"{when.day} {months[when.month - 1]} {when.year}, {when:%H:%M}"


@pytest.mark.browser
def test_hub_pages_write_times_one_way_in_the_readers_zone(hub: Hub) -> None:
    """The fleet page's Since and a notice's moment: <time datetime> with the UTC figure,
    written by the page's one script in the reader's zone, as "27 Nov 2026, 06:28"."""
    root = hub.login("root")
    page = root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    stamps = re.findall(r'<time class="gpuhub-time" datetime="([^"]+)">([^<]+)</time>', page)
    assert stamps, page[-3000:]
    for _, fallback in stamps:  # before the script: the same moment in UTC, saying so
        assert fallback.endswith(" UTC") and ONE_WAY.match(fallback.removesuffix(" UTC"))
    # bob's server is stopped from the fleet page: his notice names the moment too.
    root.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30)
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/stop",
        data={
            "target": "bob/",
            "reason": "maintenance",
            "_xsrf": root.cookies.get("_xsrf", path="/hub/"),
        },
        timeout=60,
        allow_redirects=False,
    )
    assert done.status_code == 303, done.text[-2000:]
    home = html.unescape(hub.login("bob").get(f"{hub.url}/hub/home", timeout=30).text)
    notice = re.search(
        r'Your server was stopped on <time class="gpuhub-time" datetime="([^"]+)"', home
    )
    assert notice, home[-3000:]
    with chromium() as browser:
        context = browser.new_context(timezone_id=READER_ZONE)  # type: ignore[attr-defined]
        page = context.new_page()
        try:
            hub.log_in_browser(page, "root")
            page.goto(f"{hub.url}/hub/gpuhub/fleet")
            first = page.locator("#gpuhub-holders time.gpuhub-time").first
            first.wait_for()
            iso = first.get_attribute("datetime")
            assert iso and first.inner_text() == local_time(iso)
            assert ONE_WAY.match(first.inner_text()) and "UTC" in (
                first.get_attribute("title") or ""
            )
            page.context.clear_cookies()
            hub.log_in_browser(page, "bob")
            page.goto(f"{hub.url}/hub/home")
            moment = page.locator(".gpuhub-notice time.gpuhub-time").first
            moment.wait_for()
            assert moment.inner_text() == local_time(notice.group(1))
            text = page.locator(".gpuhub-notice").first.inner_text()
            assert f"stopped on {local_time(notice.group(1))} by root" in text and "UTC" not in text
        finally:
            page.screenshot(path=str(artifact("times-in-the-readers-zone.png")), full_page=True)
            context.close()
    # bob holds his GPUs again for the module's other test, whichever runs first.
    assert spawn(hub, "bob", {"gpus": 2, "gpu_type": "t4"}).status_code in (201, 202)
    wait_ready(hub, "bob")
