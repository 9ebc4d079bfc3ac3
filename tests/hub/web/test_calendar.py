"""The GPU calendar through a real JupyterHub with LocalGPUSpawner and two simulated GPUs:
fleet admins read whose each line is at /hub/gpuhub/calendar, everyone else reads it on the
home page without others' names; every name is escaped (a user named like an HTML tag holds
a GPU); the bars say in words what they show; and in Chromium the calendar is used with the
keyboard alone, reads in the light and the dark theme, and says its times in the reader's
time zone."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import requests

from harness.hub.process import Hub, spawn, start_hub, stop, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import jobs_hub_config, token_for
from tests.support.wait import until

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"
ZONE = "Asia/Kolkata"  # 5:30 ahead of UTC: no hour of it reads as the same hour in UTC
CALENDAR = f"""
c.Authenticator.admin_users = {{"root"}}
c.JupyterHub.load_groups = {{"staff": {{"users": ["alice", {HOSTILE!r}]}}, "students": {{"users": ["bob"]}}}}
c.JupyterHub.load_roles.append(
    {{"name": "gpu-fleet", "users": ["opsa"], "scopes": ["self", "custom:gpuhub:fleet"]}}
)
c.LocalGPUSpawner.gpu_devices = [0, 1]
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.bookings = {{
    "groups": {{"staff": {{"max_gpus": 1, "max_hours": 8, "days_ahead": 14}}}},
    "admins_book_for_groups": True,
    "warn_before": 900,
}}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("calendar-hub")
    hub = start_hub(workdir, jobs_hub_config(workdir) + CALENDAR)
    try:
        assert hub.api("POST", "/users", json={"usernames": ["bob", "opsa"]}).status_code in (
            201,
            409,
        )
        assert spawn(hub, HOSTILE, {"gpus": 1}).status_code in (201, 202), hub.log()[-3000:]
        wait_ready(hub, HOSTILE)
        yield hub
    finally:
        stop(hub, HOSTILE)
        hub.stop()


def page(hub: Hub, session: requests.Session, path: str, status: int = 200) -> str:
    answer = session.get(f"{hub.url}{path}", timeout=30)
    assert answer.status_code == status, answer.text[-2000:]
    return answer.text


def calendar_of(html: str) -> str:
    """The calendar's section of a page (the rest is JupyterHub's own)."""
    start = html.index('<section id="gpuhub-calendar"')
    return html[start : html.index("</section>", start)]


def bar_words(html: str, period: str = "day") -> list[str]:
    """What each bar of the period's strip says (its aria-label)."""
    view = html.split(f'class="gpuhub-cal-period-view" data-period="{period}"', 1)[1]
    view = view.split("gpuhub-cal-period-view", 1)[0]
    return re.findall(r'class="gpuhub-cal-bar"[^>]*aria-label="([^"]*)"', view)


def held_now(hub: Hub, session: requests.Session, path: str) -> str:
    """The page once the monitor has seen the GPU held (a tick after the spawn)."""
    return until(
        "the held GPU in the calendar",
        lambda: (
            (html := page(hub, session, path))
            and bar_words(html)
            and "1 in use" in bar_words(html)[0]
            and html
        ),
        timeout=30,
    )


def test_fleet_admins_read_names_escaped(hub: Hub) -> None:
    for admin in ("root", "opsa"):
        html = held_now(hub, hub.login(admin), "/hub/gpuhub/calendar")
        calendar = calendar_of(html)
        assert HOSTILE not in html and "onerror=alert(1)>" not in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in calendar
        assert "server &#39;default&#39;" in calendar or "server 'default'" in calendar
        first = bar_words(html)[0]
        assert re.fullmatch(
            r"NVIDIA GPU, \w{3} \d\d:00 to \d\d:00 UTC: 1 in use, 0 booked, 1 likely free of 2",
            first,
        ), first
        # Both periods are in the page, the week's hidden until chosen.
        week = bar_words(html, "week")
        assert len(bar_words(html)) == 24 and len(week) == 28
        assert '<div class="gpuhub-cal-period-view" data-period="week" hidden>' in html
        # Their home page is everyone's, without others' names, with a link to the names.
        home = calendar_of(held_now(hub, hub.login(admin), "/hub/home"))
        assert "img src=x" not in home and "Others hold 1 of these GPUs now" in home
        assert 'href="/hub/gpuhub/calendar">With names</a>' in home


def test_users_read_the_calendar_on_the_home_page_without_others_names(hub: Hub) -> None:
    bob = hub.login("bob")
    html = held_now(hub, bob, "/hub/home")
    calendar = calendar_of(html)
    assert "img src=x" not in calendar and "onerror" not in html
    assert "Others hold 1 of these GPUs now (in use)." in calendar
    assert "With names" not in calendar
    assert bar_words(html)[0].endswith("1 in use, 0 booked, 1 likely free of 2")
    # The calendar page itself says the same to a user, without names either.
    own = calendar_of(page(hub, bob, "/hub/gpuhub/calendar?view=week"))
    assert "img src=x" not in own and "Others hold 1" in own
    assert '<div class="gpuhub-cal-period-view" data-period="day" hidden>' in own
    # The holder reads their own line, named, escaped.
    holder = calendar_of(held_now(hub, hub.login(HOSTILE), "/hub/home"))
    assert "&lt;img src=x onerror=alert(1)&gt;" in holder and "gpuhub-cal-own" in holder


def test_bad_view_is_refused_in_a_sentence_and_methods_and_login_are_checked(hub: Hub) -> None:
    bob = hub.login("bob")
    refused = bob.get(f"{hub.url}/hub/gpuhub/calendar?view=month", timeout=30)
    assert refused.status_code == 400
    assert "view must be one of day, week, not &#39;month&#39;." in refused.text
    anonymous = requests.get(f"{hub.url}/hub/gpuhub/calendar", timeout=30, allow_redirects=False)
    assert anonymous.status_code == 302 and "/hub/login" in anonymous.headers["Location"]
    xsrf = bob.cookies.get("_xsrf", path="/hub/")
    posted = bob.post(f"{hub.url}/hub/gpuhub/calendar", data={"_xsrf": xsrf}, timeout=30)
    assert posted.status_code == 405


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def book(hub: Hub, token: str, **body: Any) -> requests.Response:
    return requests.post(
        f"{hub.url}/hub/api/gpuhub/bookings",
        headers={"Authorization": f"token {token}"},
        json=body,
        timeout=30,
    )


def gpu_type_key(hub: Hub, session: requests.Session) -> str:
    """The GPU type the Book form offers (its value is the type's key, as the API takes it)."""
    form = page(hub, session, "/hub/home")
    assert 'id="gpuhub-book"' in form, calendar_of(form)
    (key,) = re.findall(r'<option value="([^"]+)">NVIDIA GPU \(2 in all\)</option>', form)
    return key


def test_bookings_in_the_calendar_named_only_for_whom_may_read_them(hub: Hub) -> None:
    key = gpu_type_key(hub, hub.login("alice"))
    start = (int(time.time()) // 3600 + 3) * 3600
    made = book(
        hub,
        token_for(hub, HOSTILE),
        gpu_type=key,
        gpus=1,
        start=iso(start),
        end=iso(start + 7200),
        reason=HOSTILE,
    )
    assert made.status_code == 201, made.text
    booking = made.json()["id"]
    try:
        admin = calendar_of(page(hub, hub.login("root"), "/hub/gpuhub/calendar"))
        escaped = "&lt;img src=x onerror=alert(1)&gt;"
        assert f"<strong>Booked</strong> for {escaped}, by {escaped}: 1 NVIDIA GPU from" in admin
        assert f"({escaped})</li>" in admin and "onerror=alert(1)>" not in admin
        bars = bar_words(page(hub, hub.login("root"), "/hub/gpuhub/calendar"))
        at = datetime.fromtimestamp(start, UTC).strftime("%a %H:00")
        assert ", 1 booked, " in next(w for w in bars if f", {at} to " in w), bars
        # bob may not book and reads "booked" without whose or why.
        bob = calendar_of(page(hub, hub.login("bob"), "/hub/home"))
        assert "<strong>Booked</strong>: 1 NVIDIA GPU from" in bob
        assert "img src=x" not in bob and 'id="gpuhub-book"' not in bob
    finally:
        gone = requests.delete(
            f"{hub.url}/hub/api/gpuhub/bookings/{booking}",
            headers={"Authorization": f"token {token_for(hub, 'root')}"},
            timeout=30,
        )
        assert gone.status_code == 204, gone.text
    assert "<strong>Booked</strong>" not in calendar_of(page(hub, hub.login("bob"), "/hub/home"))


@pytest.mark.browser
def test_book_from_the_home_page_shows_the_hubs_refusal_then_books(hub: Hub) -> None:
    alice = hub.login("alice")
    key = gpu_type_key(hub, alice)
    start = (int(time.time()) // 3600 + 30) * 3600
    # What the API says to too many GPUs, asked for directly: the page must say the same.
    too_many = {"gpu_type": key, "gpus": 2, "start": iso(start), "end": iso(start + 3600)}
    refused = book(hub, token_for(hub, "alice"), **too_many)
    assert refused.status_code == 400, refused.text
    sentence = refused.json()["message"]
    with chromium() as browser:
        context: Any = browser.new_context(  # type: ignore[attr-defined]
            timezone_id="UTC", viewport={"width": 1200, "height": 900}
        )
        tab = context.new_page()
        try:
            hub.log_in_browser(tab, "alice")
            tab.goto(f"{hub.url}/hub/home")
            local = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M")
            ends = datetime.fromtimestamp(start + 3600, UTC).strftime("%Y-%m-%dT%H:%M")
            tab.select_option("#gpuhub-book-type", key)
            tab.fill("#gpuhub-book-gpus", "2")
            tab.fill("#gpuhub-book-start", local)
            tab.fill("#gpuhub-book-end", ends)
            tab.fill("#gpuhub-book-reason", "<b>thesis</b>")
            tab.focus("#gpuhub-book-submit")
            tab.keyboard.press("Enter")
            tab.wait_for_selector("#gpuhub-book-error:not([hidden])")
            assert tab.inner_text("#gpuhub-book-error") == sentence
            tab.fill("#gpuhub-book-gpus", "1")
            with tab.expect_navigation():
                tab.click("#gpuhub-book-submit")
            tab.wait_for_selector("#gpuhub-calendar .gpuhub-cal-booked-line")
            line = tab.inner_text("#gpuhub-calendar .gpuhub-cal-booked-line")
            assert "Booked for alice, by alice: 1 NVIDIA GPU from" in line, line
            assert "(<b>thesis</b>)" in line  # shown as text, never as markup
        finally:
            tab.screenshot(path=str(artifact("calendar-book-alice.png")), full_page=True)
            context.close()
    mine = requests.get(
        f"{hub.url}/hub/api/gpuhub/bookings",
        headers={"Authorization": f"token {token_for(hub, 'alice')}"},
        timeout=30,
    ).json()
    for found in mine.get("bookings", mine if isinstance(mine, list) else []):
        requests.delete(
            f"{hub.url}/hub/api/gpuhub/bookings/{found['id']}",
            headers={"Authorization": f"token {token_for(hub, 'alice')}"},
            timeout=30,
        )


@pytest.mark.browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_calendar_with_the_keyboard_alone(hub: Hub, scheme: str) -> None:
    held_now(hub, hub.login("bob"), "/hub/home")
    with chromium() as browser:
        context: Any = browser.new_context(  # type: ignore[attr-defined]
            color_scheme=scheme, timezone_id=ZONE, viewport={"width": 1200, "height": 900}
        )
        tab = context.new_page()
        try:
            hub.log_in_browser(tab, "bob")
            tab.goto(f"{hub.url}/hub/home")
            tab.wait_for_selector("#gpuhub-calendar")
            assert tab.get_attribute("html", "data-bs-theme") == scheme
            # The axis, the table and each bar's words are in the reader's zone, not UTC.
            axis = tab.evaluate(
                "Array.from(document.querySelectorAll('.gpuhub-cal-axis time'))"
                ".map(t => [t.getAttribute('datetime'), t.textContent, t.dataset.format])"
            )
            assert len(axis) >= 8, axis
            for when, text, kind in axis:
                moment = local(when)
                assert text == moment.strftime("%H:%M" if kind == "clock" else "%a %H:%M"), axis
                assert text.endswith(":30"), axis
            row = tab.evaluate(
                "document.querySelector('.gpuhub-cal-table tbody th').textContent.trim()"
            )
            assert re.fullmatch(r"\w{3} \d\d:30 to \d\d:30", row), row
            assert "times in your time zone" in tab.inner_text("#gpuhub-calendar")
            # Tab reaches the period switch, then the strip: one stop, its bar says itself.
            focused = ""
            for _ in range(60):
                tab.keyboard.press("Tab")
                focused = tab.evaluate("document.activeElement.className")
                if "gpuhub-cal-period" in focused and "view" not in focused:
                    break
            assert "gpuhub-cal-period" in focused, focused
            tab.keyboard.press("Tab")  # the week's button
            tab.keyboard.press("Enter")
            assert tab.is_visible('.gpuhub-cal-period-view[data-period="week"] .gpuhub-cal-bar')
            assert not tab.is_visible('.gpuhub-cal-period-view[data-period="day"] .gpuhub-cal-bar')
            assert tab.get_attribute('a.gpuhub-cal-period[data-period="week"]', "aria-pressed") == (
                "true"
            )
            tab.keyboard.press("Tab")
            label = tab.evaluate("document.activeElement.getAttribute('aria-label')")
            start = local(tab.evaluate("document.activeElement.dataset.start"))
            assert label.startswith(f"NVIDIA GPU, {start:%a %d %b %H:%M} to "), label
            assert "UTC" not in label and label == tab.evaluate("document.activeElement.title")
            tab.keyboard.press("ArrowRight")
            second = tab.evaluate("document.activeElement.getAttribute('aria-label')")
            assert second != label and second.startswith("NVIDIA GPU, ")
            tab.keyboard.press("End")
            last = tab.evaluate(
                "Array.from(document.activeElement.parentNode.children).indexOf("
                "document.activeElement)"
            )
            assert last == 27
            # The focus shows, and the bars are drawn in the theme's colours.
            outline = tab.evaluate("getComputedStyle(document.activeElement).outlineStyle")
            assert outline != "none"
            used = tab.evaluate(
                "getComputedStyle(document.querySelector('.gpuhub-cal-free')).backgroundColor"
            )
            body = tab.evaluate("getComputedStyle(document.body).backgroundColor")
            assert used != body
        finally:
            tab.screenshot(path=str(artifact(f"calendar-bob-{scheme}.png")), full_page=True)
            context.close()


def local(iso_time: str) -> datetime:
    """A moment the page wrote (ISO-8601, UTC) in the browser's zone, :data:`ZONE`."""
    return datetime.fromisoformat(iso_time.replace("Z", "+00:00")).astimezone(ZoneInfo(ZONE))
