"""A newcomer's first hour on `make demo`, in Chromium: the hub's own pages (issue 22).

The hub is the demo's (jupyter_config/jupyterhub_config.py through tests/support/hub/demo.py):
4 simulated GPUs (3 whole, type "gpu"; the last shared by memory), alice (staff, quota 4) its
admin, bob and carol (students, 1 GPU each), the
shared password. Each test starts what it needs and stops it again, so they pass alone and in
any order; each keeps a screenshot of the screen it fixed under test-artifacts/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from harness.hub.process import JUPYTERHUB_MAJOR, Hub, spawn, stop, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.demo import DEMO_ADMIN, log_in, start_demo_hub
from tests.support.wait import until

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1200, "height": 900}


# A named server "slow" stays starting (JupyterHub's spawn pending, not in gpuhub's line)
# while the hub's working directory holds the file "hold-slow".
SLOW_START = """
import asyncio, os
async def _hold_slow_servers(spawner):
    while spawner.name == "slow" and os.path.exists("hold-slow"):
        await asyncio.sleep(0.2)
c.Spawner.pre_spawn_hook = _hold_slow_servers
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    # The demo's own monitor interval (30 s): what the pages show must not wait for a tick.
    hub = start_demo_hub(tmp_path_factory.mktemp("first-hour"), extra=SLOW_START)
    try:
        yield hub
    finally:
        servers = (
            ("alice", ""),
            ("alice", "second"),
            ("alice", "slow"),
            ("bob", ""),
            ("carol", ""),
        )
        for user, server in servers:
            path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
            hub.api("DELETE", path)
        hub.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def started(hub: Hub, user: str, gpus: int, server: str = "") -> None:
    answer = spawn(hub, user, {"gpus": gpus}, server=server)
    assert answer.status_code in (201, 202), answer.text
    wait_ready(hub, user, server)


def test_the_form_after_a_refusal_keeps_what_was_typed_and_the_real_holdings(
    hub: Hub, browser: Any
) -> None:
    """A refused named server's form: what alice typed, what she holds (her default
    server's 2 GPUs), and each sentence under its field, from the hub not the browser."""
    started(hub, "alice", 2)
    try:
        page = browser.new_page(viewport=VIEWPORT)
        log_in(page, hub, "alice")
        page.goto(f"{hub.url}/hub/spawn/alice/second")
        quota = page.locator("#gpuhub-quota")
        held = "You hold 2 of your 4 GPUs (server 'default': 2); this server may have up to 2."
        assert quota.inner_text() == held
        page.fill("#gpuhub-memory", "16 GB")
        page.fill("#gpuhub-gpus", "2")
        page.click("#gpuhub-memory")
        page.click("button[type=submit]")
        memory_error = page.locator("#gpuhub-memory-error")
        memory_error.wait_for()
        # The hub's sentence, next to the field: what is wrong, what is expected, what to write.
        assert 'you gave "16 GB"; did you mean 16G?' in memory_error.inner_text()
        assert page.get_attribute("#gpuhub-memory", "aria-invalid") == "true"
        assert page.input_value("#gpuhub-memory") == "16 GB"  # as typed, not the default
        assert page.input_value("#gpuhub-gpus") == "2"
        assert page.locator("#gpuhub-quota").inner_text() == held  # the real holdings
        assert page.evaluate("document.activeElement.id") == "gpuhub-memory"
        page.screenshot(path=str(artifact("spawn-form-refused.png")), full_page=True)

        # Over quota: said under the GPU count, the rest kept.
        page.fill("#gpuhub-memory", "2G")
        page.fill("#gpuhub-gpus", "3")
        page.click("button[type=submit]")
        gpus_error = page.locator("#gpuhub-gpus-error")
        gpus_error.wait_for()
        assert (
            "quota" in gpus_error.inner_text() and "server 'default': 2" in gpus_error.inner_text()
        )
        assert page.input_value("#gpuhub-gpus") == "3"
        assert page.input_value("#gpuhub-memory") == "2G"
        page.screenshot(path=str(artifact("spawn-form-over-quota.png")), full_page=True)
        assert "second" not in hub.user_model("alice")["servers"]
    finally:
        stop(hub, "alice")


def test_fleet_stop_needs_a_reason_said_next_to_the_field_and_the_user_reads_it(
    hub: Hub, browser: Any
) -> None:
    """The demo's admin stops bob's server: without a reason she stays on the fleet page,
    the sentence by the required field; with one, Held and Free change on the page she comes
    back to; bob reads why on his next visit, closes the notice, and it stays closed."""
    started(hub, "bob", 1)
    admin = browser.new_context(viewport=VIEWPORT).new_page()
    log_in(admin, hub, DEMO_ADMIN)
    row = admin.locator("tr.gpuhub-holder[data-user='bob']")

    def fleet_shows_bob() -> bool:  # the page is built once per monitor tick
        admin.goto(f"{hub.url}/hub/gpuhub/fleet")
        return row.count() == 1

    # At once, not at the monitor's next tick (every 30 s in the demo).
    until("bob's row on the fleet page", fleet_shows_bob, timeout=10)
    assert "(required)" in admin.locator("label[for=gpuhub-stop-reason]").inner_text()
    # GPU-hours say their unit; a group's is its members' exact sum, rounded once.
    assert re.search(
        r"students\s+1\s+\d[\d.]* GPU-h", admin.locator("#gpuhub-groups").inner_text()
    )
    types = admin.locator("#gpuhub-types")
    assert re.search(r"Simulated GPU\s+1\s+2\s+3", types.inner_text()), types.inner_text()

    row.get_by_role("button", name="Stop bob's server default").click()
    feedback = admin.locator("#gpuhub-stop-reason-error")
    feedback.wait_for()
    assert admin.url.endswith("/hub/gpuhub/fleet/stop")
    assert "Give a reason in the Reason field to stop bob's server" in feedback.inner_text()
    assert admin.get_attribute("#gpuhub-stop-reason", "aria-invalid") == "true"
    assert admin.locator("#gpuhub-holders").is_visible()  # still the fleet page
    assert hub.user_model("bob")["servers"], "nothing was stopped"
    admin.screenshot(path=str(artifact("fleet-reason-required.png")), full_page=True)

    admin.fill("#gpuhub-stop-reason", "Maintenance on the GPU node tonight")
    admin.locator("tr.gpuhub-holder[data-user='bob']").get_by_role(
        "button", name="Stop bob's server default"
    ).click()
    admin.locator(".alert-success", has_text="Stopped bob's server").wait_for()
    assert not hub.user_model("bob")["servers"]
    # The first page after the stop already counts the GPU free.
    assert re.search(r"Simulated GPU\s+0\s+3\s+3", types.inner_text()), types.inner_text()
    assert admin.locator("tr.gpuhub-holder[data-user='bob']").count() == 0
    admin.screenshot(path=str(artifact("fleet-after-stop.png")), full_page=True)

    bob = browser.new_context(viewport=VIEWPORT).new_page()
    log_in(bob, hub, "bob")
    bob.goto(f"{hub.url}/hub/home")
    notice = bob.locator(".gpuhub-notice", has_text="Maintenance on the GPU node tonight")
    notice.wait_for()
    assert "by alice" in notice.inner_text()
    bob.screenshot(path=str(artifact("notice-with-dismiss.png")), full_page=True)
    notice.get_by_role("button", name="Dismiss this notice").click()
    notice.wait_for(state="detached")
    bob.reload()
    bob.locator("#start").wait_for()
    assert bob.locator(".gpuhub-notice").count() == 0  # closed for good, not just here
    bob.screenshot(path=str(artifact("notice-dismissed.png")), full_page=True)
    kept = hub.api("GET", "/gpuhub/notices/bob").json()["notices"]
    assert [n["dismissed"] for n in kept] == [True]  # the jobs backend may still read it


def test_the_waiting_page_says_the_place_and_the_deadline_and_leaving_leaves(
    hub: Hub, browser: Any
) -> None:
    """All 3 whole GPUs held: bob, then carol, wait for one. Carol's page says her place,
    until when gpuhub waits, moves as she moves up, and "Leave the line" takes her out of
    it, saying she holds no GPU now."""
    started(hub, "alice", 2)
    started(hub, "alice", 1, server="second")
    try:
        for user in ("bob", "carol"):
            answer = spawn(hub, user, {"gpus": 1})
            assert answer.status_code in (201, 202), answer.text
            until(f"{user} in line", lambda u=user: hub.user_model(u)["servers"].get(""))
        page = browser.new_page(viewport=VIEWPORT)
        log_in(page, hub, "carol")
        page.goto(f"{hub.url}/hub/spawn-pending/carol")
        message = page.locator("#progress-message")
        # The deadline is said once, in the reader's clock, under the message (the message's
        # own UTC time is left out on the page; the progress stream keeps it).
        page.wait_for_function(
            "(t => t.includes('2nd in line') && !t.includes('gpuhub waits until'))"
            "(document.querySelector('#progress-message').textContent)"
        )
        text = message.inner_text()
        assert "Waiting for 1 Simulated GPU: you are 2nd in line; 3 of 3 are held" in text
        assert page.locator("#gpuhub-waiting").is_visible()  # not "starting up" while waiting
        deadline = page.locator("#gpuhub-line-deadline")
        assert re.search(
            r"keeps your place until .+ \((29|30) minutes from now\)", deadline.inner_text()
        )
        leave = page.get_by_role("button", name="Leave the line")
        assert leave.is_visible()
        # The one way out while in line: JupyterHub's own Stop Server button (>= 6) is hidden.
        assert page.get_by_role("button", name="Stop Server").count() == 0
        second = int(page.get_attribute("#progress-bar", "aria-valuenow") or 0)
        # The bar says the place, not "25% Complete": nothing is a quarter done in a line.
        place = "document.querySelector('#progress-bar').getAttribute('aria-valuetext')"
        page.wait_for_function(f"{place} === '2nd in line for GPUs'")
        assert page.locator("#progress-bar").text_content().strip() == "2nd in line for GPUs"
        page.screenshot(path=str(artifact("waiting-page.png")), full_page=True)

        hub.api("DELETE", "/users/bob/server")  # bob leaves: carol is first now
        page.wait_for_function(
            "document.querySelector('#progress-message').textContent.includes('1st in line')"
        )
        first = int(page.get_attribute("#progress-bar", "aria-valuenow") or 0)
        page.wait_for_function(f"{place} === '1st in line for GPUs'")
        assert 10 <= second < first <= 40, (second, first)

        leave.click()
        left = page.locator("#gpuhub-left-line")
        left.wait_for()
        assert "You left the line" in left.inner_text()
        left.locator(".gpuhub-still-held", has_text="You hold no GPU now.").wait_for()
        until("carol out of the line", lambda: not hub.user_model("carol")["servers"])
        page.screenshot(path=str(artifact("waiting-page-left.png")), full_page=True)
        # Really out: the form says nobody waits, and the line holds nothing in her name.
        form = browser.new_page(viewport=VIEWPORT)
        log_in(form, hub, "alice")
        form.goto(f"{hub.url}/hub/spawn/alice/third")
        assert "waiting" not in form.locator("#gpuhub-gpu-type-group").inner_text()
    finally:
        stop(hub, "alice", "second")
        stop(hub, "alice")


def test_leaving_the_line_says_what_is_still_held(hub: Hub, browser: Any) -> None:
    """Issue 31: alice's named server waits in line while her default server holds 2 GPUs.
    Leaving the line does not say "no GPU is held in your name": it says what she still
    holds."""
    started(hub, "alice", 2)
    started(hub, "bob", 1)  # every whole GPU is held now
    try:
        answer = spawn(hub, "alice", {"gpus": 1}, server="second")
        assert answer.status_code in (201, 202), answer.text
        until("alice/second in line", lambda: "second" in hub.user_model("alice")["servers"])
        page = browser.new_page(viewport=VIEWPORT)
        log_in(page, hub, "alice")
        page.goto(f"{hub.url}/hub/spawn-pending/alice/second")
        leave = page.get_by_role("button", name="Leave the line")
        leave.wait_for()
        leave.click()
        left = page.locator("#gpuhub-left-line")
        left.wait_for()
        held = left.locator(".gpuhub-still-held")
        held.get_by_text("You still hold 2 \u00d7 Simulated GPU (server 'default').").wait_for()
        assert "second" not in held.inner_text()  # the server she left is not listed
        page.screenshot(path=str(artifact("waiting-page-left-still-held.png")), full_page=True)
        until("alice/second gone", lambda: "second" not in hub.user_model("alice")["servers"])
    finally:
        stop(hub, "alice", "second")
        stop(hub, "bob")
        stop(hub, "alice")


@pytest.mark.skipif(
    JUPYTERHUB_MAJOR < 6, reason="JupyterHub 5's spawn page has no Stop Server button"
)
def test_stop_server_on_a_starting_named_server_stops_that_server(hub: Hub, browser: Any) -> None:
    """Not in line, JupyterHub's own Stop Server button is the page's stop control, and it
    stops the server the page is about (alice's "slow"), not her default server, which
    JupyterHub's own handler would stop."""
    started(hub, "alice", 1)
    hold = hub.workdir / "hold-slow"
    hold.touch()
    try:
        answer = spawn(hub, "alice", {"gpus": 1}, server="slow")
        assert answer.status_code == 202, answer.text
        page = browser.new_page(viewport=VIEWPORT)
        log_in(page, hub, "alice")
        page.goto(f"{hub.url}/hub/spawn-pending/alice/slow")
        page.wait_for_function(
            "document.querySelector('#progress-message').textContent.includes('server')"
        )
        stop_button = page.get_by_role("button", name="Stop Server")
        stop_button.wait_for()
        assert not page.locator("#gpuhub-leave-line").is_visible()  # not in line: no Leave
        assert page.locator("#gpuhub-starting").is_visible()
        page.screenshot(path=str(artifact("starting-page.png")), full_page=True)

        stop_button.click()
        stopped = page.locator("#gpuhub-stopped")
        stopped.wait_for()
        assert "stopped before it started" in stopped.inner_text()
        # What she still holds: her default server's GPU, not "nothing".
        stopped.locator(
            ".gpuhub-still-held",
            has_text="You still hold 1 \u00d7 Simulated GPU (server 'default').",
        ).wait_for()
        assert not page.get_by_text("Your server is starting up").is_visible()  # no contradiction
        assert not page.locator("#progress-message").is_visible()
        assert page.evaluate("document.activeElement.textContent") == "Start a server"
        until("alice/slow stopped", lambda: "slow" not in hub.user_model("alice")["servers"])
        assert hub.user_model("alice")["servers"][""]["ready"]  # her default server runs on
        page.screenshot(path=str(artifact("starting-page-stopped.png")), full_page=True)
    finally:
        hold.unlink(missing_ok=True)
        stop(hub, "alice", "slow")
        stop(hub, "alice")
