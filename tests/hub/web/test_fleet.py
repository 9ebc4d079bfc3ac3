"""The fleet page through a real JupyterHub: what admins, fleet-scope holders and users see,
stopping a server with a reason the user then reads, and the page in Chromium (light, dark,
phone-sized). GPUs are the stand-ins of tests/support/hub/standin_gpus.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from harness.hub.process import ROOT, Hub, spawn, start_hub, stop, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import HOLD, jobs_hub_config, token_for, user_api
from tests.support.hub.standin_gpus import write as set_utilization
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.e2e

FLEET = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
c.Authenticator.admin_users = {{"root"}}
c.JupyterHub.load_groups = {{"students": {{"users": ["bob", "carol", "dave"]}}, "ops": {{"users": ["opsa"]}}}}
c.JupyterHub.load_roles.append(
    {{"name": "gpu-fleet", "users": ["opsa"], "scopes": ["self", "custom:gpuhub:fleet"]}}
)
c.LocalGPUSpawner.gpu_devices = [0, 1, 2, 3]
c.LocalGPUSpawner.group_limits = {{"students": {{"max_gpus": 2}}}}
c.LocalGPUSpawner.gpu_idle_reclaim = {{"after": 3600, "utilization_below": 0.05, "warn": 600}}
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_utilization_source = "tests.support.hub.standin_gpus.FileUtilization"
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
REASON = "<script>alert(1)</script> maintenance on node 3"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("fleet-hub")
    set_utilization(workdir, {0: 0.0, 1: 0.0, 2: 0.8, 3: 0.1})
    hub = start_hub(workdir, jobs_hub_config(workdir) + FLEET)
    try:
        for user, gpus in (("bob", 1), ("carol", 2)):
            assert spawn(hub, user, {"gpus": gpus}).status_code in (201, 202)
        for user in ("bob", "carol"):
            wait_ready(hub, user)
        yield hub
    finally:
        for name in ("bob", "carol", "dave"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def fleet(hub: Hub, session: requests.Session) -> str:
    page = session.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30)
    assert page.status_code == 200, page.text[-2000:]
    return page.text


def holders(html: str) -> set[tuple[str, str]]:
    import re

    return set(re.findall(r'data-user="([^"]+)" data-kind="server" data-name="([^"]*)"', html))


def wait_for_samples(hub: Hub, session: requests.Session) -> str:
    deadline = time.monotonic() + 30
    while True:
        html = fleet(hub, session)
        if html.count("gpuhub-spark") >= 2:
            return html
        assert time.monotonic() < deadline, html[-3000:]
        time.sleep(0.3)


def test_admins_and_fleet_scope_see_everyone_users_only_themselves(hub: Hub) -> None:
    admin = wait_for_samples(hub, hub.login("root"))
    assert holders(admin) == {("bob", ""), ("carol", "")}
    assert 'id="gpuhub-types"' in admin and 'id="gpuhub-groups"' in admin
    assert '<td>NVIDIA GPU</td><td class="text-end">3</td><td class="text-end">1</td>' in admin
    assert '<td>students</td><td class="text-end">3</td>' in admin
    assert 'id="gpuhub-fleet-link"' in admin  # linked from the hub's navigation
    assert holders(fleet(hub, hub.login("opsa"))) == {("bob", ""), ("carol", "")}
    own = fleet(hub, hub.login("bob"))
    assert holders(own) == {("bob", "")}
    assert "gpuhub-types" not in own and "carol" not in own
    # GPU-hours accrue per user (a few seconds' worth, but the row is there, with its unit).
    # Written as every screen writes GPU-hours (hours_words): "0.0011", not "0.00".
    assert re.search(r'<td>bob</td><td class="text-end">0(\.0\d+)? GPU-h</td>', own), own


def test_stop_needs_a_reason_and_the_right_and_the_user_reads_it(hub: Hub) -> None:
    bob = hub.login("bob")
    page = bob.get(f"{hub.url}/hub/home", timeout=30)
    xsrf = bob.cookies.get("_xsrf", path="/hub/")
    refused = bob.post(
        f"{hub.url}/hub/gpuhub/fleet/stop",
        data={"target": "carol/", "reason": "mine now", "_xsrf": xsrf},
        timeout=30,
    )
    assert refused.status_code == 403 and page.status_code == 200
    assert "Only GPU fleet admins may stop other users" in said(refused)
    root = hub.login("root")
    fleet(hub, root)
    xsrf = root.cookies.get("_xsrf", path="/hub/")
    stop: dict[str, Any] = {"target": "bob/", "_xsrf": xsrf}
    no_reason = root.post(f"{hub.url}/hub/gpuhub/fleet/stop", data=stop, timeout=30)
    assert no_reason.status_code == 400 and "Give a reason" in said(no_reason)
    # Still the fleet page, the sentence next to the reason field, which says it is required.
    assert 'id="gpuhub-holders"' in no_reason.text and "(required)" in no_reason.text
    assert re.search(r'id="gpuhub-stop-reason"[^>]*aria-invalid="true"', no_reason.text)
    assert "Give a reason in the Reason field to stop bob&#39;s server" in no_reason.text
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/stop",
        data={**stop, "reason": REASON},
        timeout=60,
        allow_redirects=False,
    )
    assert done.status_code == 303, done.text[-2000:]
    assert not hub.user_model("bob")["servers"]
    home = bob.get(f"{hub.url}/hub/home", timeout=30).text
    assert "Your server was stopped on" in home and "by root: &lt;script&gt;alert(1)" in home
    assert "<script>alert(1)" not in home and "Your saved files are safe" in home
    admin = fleet(hub, root)
    assert holders(admin) == {("carol", "")}
    # Held and free say so on the very page the admin comes back to, not a tick later.
    assert '<td>NVIDIA GPU</td><td class="text-end">2</td><td class="text-end">2</td>' in admin


def job_rows(html: str) -> set[tuple[str, str]]:
    import re

    return set(re.findall(r'data-user="([^"]+)" data-kind="job" data-name="([^"]*)"', html))


def said_html(text: str) -> str:
    """A page's HTML with its entities unescaped (names are quoted in it)."""
    import html

    return html.unescape(text)


def said(answer: requests.Response) -> str:
    """An error page's text, unescaped (its sentence quotes names)."""
    import html

    return html.unescape(answer.text)


def post_cancel(hub: Hub, session: requests.Session, **form: str) -> requests.Response:
    fleet(hub, session)  # sets the _xsrf cookie
    xsrf = session.cookies.get("_xsrf", path="/hub/")
    return session.post(
        f"{hub.url}/hub/gpuhub/fleet/cancel",
        data={**form, "_xsrf": xsrf},
        timeout=60,
        allow_redirects=False,
    )


def test_an_admin_cancels_a_local_job_and_the_user_reads_why(hub: Hub) -> None:
    """dave's job outlives his server (a job hold); root cancels it with a reason: its
    processes end, its GPU is free, dave reads why on the hub and in the job's record."""
    dave = hub.login("dave")  # creates the user
    home = hub.workdir / "users" / "dave"
    write_notebook(home / "hold.ipynb", HOLD)
    flag = home / "hold-the-gpu"
    flag.write_text("")
    try:
        assert spawn(hub, "dave", {"gpus": 1}).status_code in (201, 202)
        wait_ready(hub, "dave")
        token = token_for(hub, "dave")
        job = user_api(hub, "dave", token, "POST", "", json={"notebook": "hold.ipynb", "gpus": 1})
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        deadline = time.monotonic() + 60
        while user_api(hub, "dave", token, "GET", f"/{job_id}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        time.sleep(2)  # the kernel is up
        stop(hub, "dave")
        root = hub.login("root")
        deadline = time.monotonic() + 30
        # The job hold's row, once the hub has found its processes: named by the server and
        # the job dave knows, never by pids or the runner's module.
        name = f"jobs of server 'default' ({job_id})"
        while ("dave", "") not in job_rows(html := fleet(hub, root)) or name not in said_html(html):
            assert time.monotonic() < deadline, html[-3000:]
            time.sleep(0.3)
        row = said_html(re.search(r'<tr[^>]*data-user="dave"[^>]*>.*?</tr>', html, re.S)[0])
        assert 'formaction="/hub/gpuhub/fleet/cancel"' in row and f"Cancel dave's {name}" in row
        held = hub.api("GET", "/gpuhub/holdings/dave").json()["holdings"]
        [hold] = [h for h in held if h["kind"] == "job"]
        assert hold["label"] == name and hold["jobs"] == [job_id], hold
        assert not any(str(p["pid"]) in row for p in hold["processes"]), row
        assert "run_notebook" not in row and "python" not in row, row

        refused = post_cancel(hub, hub.login("bob"), target="dave/", reason="mine now")
        assert refused.status_code == 403, refused.text[-2000:]
        assert "Only GPU fleet admins may cancel other users" in said(refused)
        no_reason = post_cancel(hub, root, target="dave/")
        assert no_reason.status_code == 400 and "Give a reason" in said(no_reason)
        bad = post_cancel(hub, root, target="dave", reason="x")
        assert bad.status_code == 400 and "target must name a job as user/job" in said(bad)
        unknown = post_cancel(hub, root, target="dave/nope", reason="x")
        assert unknown.status_code == 404
        assert "dave has no job 'nope' holding or waiting for GPUs" in said(unknown)
        no_xsrf = root.post(
            f"{hub.url}/hub/gpuhub/fleet/cancel",
            data={"target": "dave/", "reason": "x"},
            timeout=30,
            allow_redirects=False,
        )
        assert no_xsrf.status_code == 403, no_xsrf.status_code

        done = post_cancel(hub, root, target="dave/", reason=REASON)
        assert done.status_code == 303, done.text[-2000:]
        # The page it leads to says what the hub did, from its own record of it.
        back = said(root.get(hub.url + done.headers["Location"], timeout=30))
        assert f"Cancelled dave's {name}; they will read why" in back
        assert ("dave", "") not in job_rows(back)
        flag.unlink()  # had the cancel failed, the job would end now and the test fail below

        page = dave.get(f"{hub.url}/hub/home", timeout=30).text
        # Named as the fleet page named it.
        assert f"Your {name} were cancelled on" in said_html(page), page[-3000:]
        assert "by root: &lt;script&gt;alert(1)" in page and "<script>alert(1)" not in page
        assert 'data-kind="job"' in page
        notices = requests.get(
            f"{hub.api_url}/gpuhub/notices/dave",
            headers={"Authorization": f"token {token}"},
            timeout=30,
        ).json()["notices"]
        assert [(n["kind"], n["jobs"], n["by"]) for n in notices] == [("job", [job_id], "root")]
        assert (
            requests.get(
                f"{hub.api_url}/gpuhub/notices/dave",
                headers={"Authorization": f"token {token_for(hub, 'bob')}"},
                timeout=30,
            ).status_code
            == 403
        )

        # dave's next server marks the job's record cancelled, with root's reason.
        assert spawn(hub, "dave", {"gpus": 1}).status_code in (201, 202)
        wait_ready(hub, "dave")
        record = user_api(hub, "dave", token, "GET", f"/{job_id}").json()
        assert record["status"] == "cancelled", record
        assert record["message"] == (f"Cancelled by root from the GPU fleet page: {REASON}"), record
        stop(hub, "dave")
    finally:
        flag.unlink(missing_ok=True)


def test_the_page_shows_only_what_the_hub_recorded_never_text_from_the_link(hub: Hub) -> None:
    """A link with attacker-chosen text (the old ``?stopped=``/``?cancelled=``, or a forged
    outcome token) shows nothing of it on an admin's page."""
    root, bob = hub.login("root"), hub.login("bob")
    bait = "Your password expired, re-enter it at evil.example"
    for query in (
        {"cancelled": bait},
        {"stopped": bait},
        {"done": bait},
        {"done": "A" * 16, "cancelled": f"<b>{bait}</b>"},
    ):
        page = root.get(f"{hub.url}/hub/gpuhub/fleet", params=query, timeout=30)
        assert page.status_code == 200
        assert "evil.example" not in page.text and 'id="gpuhub-done"' not in page.text
    # A real outcome is the hub's sentence, for the admin who acted only.
    if not hub.user_model("bob")["servers"]:
        assert spawn(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "bob")
    fleet(hub, root)
    done = root.post(
        f"{hub.url}/hub/gpuhub/fleet/stop",
        data={"target": "bob/", "reason": bait, "_xsrf": root.cookies.get("_xsrf", path="/hub/")},
        timeout=60,
        allow_redirects=False,
    )
    assert done.status_code == 303, done.text[-2000:]
    location = hub.url + done.headers["Location"]
    said_to_root = said(root.get(location, timeout=30))
    assert "Stopped bob's server 'default'; they will read why on their next visit." in said_to_root
    assert "evil.example" not in said_to_root  # the reason is for bob, not this banner
    assert 'id="gpuhub-done"' not in bob.get(location, timeout=30).text


def login(page: Any, hub: Hub, name: str) -> None:
    hub.log_in_browser(page, name)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("who", ["root", "carol"])
def test_fleet_page_in_chromium(hub: Hub, who: str, scheme: str) -> None:
    with chromium() as browser:
        context = browser.new_context(  # type: ignore[attr-defined]
            color_scheme=scheme, viewport={"width": 390, "height": 844}
        )
        page = context.new_page()
        try:
            login(page, hub, who)
            page.goto(f"{hub.url}/hub/home")
            page.click(".navbar-toggler")  # a phone-sized window folds the hub's navigation
            page.click("#gpuhub-fleet-link")
            page.wait_for_selector("#gpuhub-holders")
            page.wait_for_selector("svg.gpuhub-spark", timeout=30_000)
            assert page.get_attribute("html", "data-bs-theme") == scheme
            rows = page.locator("tr.gpuhub-holder")
            assert rows.count() >= 1
            assert page.locator('tr.gpuhub-holder[data-user="carol"]').count() == 1
            assert (page.locator("#gpuhub-types").count() == 1) == (who == "root")
            # Usable on a phone: the page itself never scrolls sideways (tables scroll inside).
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, overflow
            # The sparkline is drawn in the text colour, so it shows in both themes.
            stroke = page.evaluate(
                "getComputedStyle(document.querySelector('svg.gpuhub-spark polyline')).stroke"
            )
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert stroke != background
        finally:
            page.screenshot(path=str(artifact(f"fleet-{who}-{scheme}.png")), full_page=True)
            context.close()
