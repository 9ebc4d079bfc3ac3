"""GPU-hour budgets through a real JupyterHub, proxy and LocalGPUSpawner servers (issue 32).

The budgets are seconds, not hours, so that real servers spend them while the test waits:
0.002 GPU-hours (7.2 GPU-seconds) a day. The REST answers, notices, the fleet page and
/hub/metrics are read against each other; the hub is restarted on the same files.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.hub.process import API_TOKEN, Hub, spawn, start_hub, stop, wait_ready
from tests.support.hub.local import LEDGER_READER, jobs_hub_config, server_kernel, token_for
from tests.support.jupyter.kernel import run
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.e2e

BUDGETS = """
c.Authenticator.admin_users = {"root"}
c.JupyterHub.load_groups = {"staff": {"users": ["alice", "dora"]}, "students": {"users": ["bob", "carol"]}}
c.LocalGPUSpawner.group_limits = {"staff": {"max_gpus": 3}, "students": {"max_gpus": 1}}
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_hours = {
    "default": {"hours": 0.002, "per": "day"},
    "groups": {"staff": {"hours": 0.004, "per": "week", "shared": True}},
    "period_start": "monday 00:00",
    "timezone": "Europe/Berlin",
    "at_limit": "refuse",
    "grace": 2,
}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""


def wait_for(what: str, check: Callable[[], Any], hub: Hub, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, (
            f"{what} did not happen in {timeout}s\n{hub.log()[-4000:]}"
        )
        time.sleep(0.2)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("budgets-hub")


@pytest.fixture(scope="module")
def hub(workdir: Path) -> Iterator[Hub]:
    hub = start_hub(workdir, jobs_hub_config(workdir) + BUDGETS + LEDGER_READER)
    try:
        yield hub
    finally:
        if hub.proc.poll() is None:  # the last test restarts it on its own
            for name in ("alice", "bob", "carol"):
                hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def budget(hub: Hub, user: str) -> dict[str, Any]:
    answer = hub.api("GET", f"/gpuhub/holdings/{user}")
    assert answer.status_code == 200, answer.text
    [found] = answer.json()["budgets"]
    return found


def notices(hub: Hub, user: str) -> list[dict[str, Any]]:
    answer = hub.api("GET", f"/gpuhub/notices/{user}")
    assert answer.status_code == 200, answer.text
    return answer.json()["notices"]


def metric(hub: Hub, name: str, scope: str, who: str) -> float | None:
    text = requests.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {API_TOKEN}"}, timeout=30
    ).text
    found = re.search(rf'^{name}{{name="{who}",scope="{scope}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def metric_settles(hub: Hub, name: str, scope: str, who: str, expected: float) -> None:
    """Wait until /hub/metrics says ``expected``: it reads the monitor's last tick, so it may
    lag the live holdings answer by one tick (nothing accrues once a server has stopped)."""
    wait_for(
        f"{name} of {scope} {who} to be {expected}",
        lambda: metric(hub, name, scope, who) == pytest.approx(expected, abs=0.01),
        hub,
    )


def test_a_budget_is_spent_warned_stopped_refused_and_granted(hub: Hub) -> None:
    fresh = budget(hub, "bob")
    assert fresh["scope"] == "user" and fresh["name"] == "bob" and fresh["hours"] == 0.002
    assert fresh["used_hours"] == 0 and fresh["state"] == "ok" and fresh["period"] == "day"
    assert fresh["text"].startswith("0 of 0.002 GPU-hours used today; resets ")
    assert fresh["resets"].endswith(" 00:00 Europe/Berlin")
    # The form says it before anything runs.
    form = hub.login("bob").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "0 of 0.002 GPU-hours used today" in form and 'id="gpuhub-budget-cost"' in form
    # Servers here run as the hub's own account (run_as_hub_user): they could rewrite the
    # record of their GPU-hours, so neither the form nor the sidebar's text promises it.
    assert fresh["enforced"] is False, fresh
    assert "; not enforced on this hub: every server runs as the OS account" in fresh["text"]
    assert "not enforced on this hub: every server runs as the OS account" in html.unescape(form)

    assert spawn(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "bob")
    # 80 %: a notice; 100 %: another; past the 2 s grace the server stops, saying why.
    wait_for(
        "the 80 % notice",
        lambda: any(
            n["text"].startswith("The default budget is 80 % used: ") for n in notices(hub, "bob")
        ),
        hub,
    )
    home = hub.login("bob").get(f"{hub.url}/hub/home", timeout=30).text
    assert "The default budget is 80 % used: " in home  # every hub page shows notices
    wait_for("the server's stop", lambda: not hub.user_model("bob")["servers"], hub)
    # The stop's notice says what the 100 % notice announced, which then goes.
    texts = [n["text"] for n in notices(hub, "bob")]
    assert not any(t.startswith("You have used all") for t in texts), texts
    [stopped] = [n for n in notices(hub, "bob") if n["kind"] == "server"]
    assert stopped["by"] == "budget" and "grace of 2 seconds ran out" in stopped["text"]
    assert "you used all 0.002 GPU-hours of the default budget" in stopped["text"]
    over = budget(hub, "bob")
    assert over["state"] == "over" and over["used_hours"] >= 0.002 and over["left_hours"] == 0

    # Over budget: GPU servers and jobs are refused with one sentence; CPU-only starts.
    refused = spawn(hub, "bob", {"gpus": 1})
    assert refused.status_code == 403, refused.text
    message = refused.json()["message"]
    assert "GPU-hours the default budget gives you today; it resets " in message
    assert "Europe/Berlin" in message and "CPU-only servers still start" in message
    job = hub.api(
        "POST",
        "/gpuhub/grants",
        json={"user": "bob", "kind": "job", "name": "train-1", "gpus": 1, "gpu_type": ""},
    )
    assert job.status_code == 403 and job.json()["message"] == message, job.text
    assert spawn(hub, "bob", {"gpus": 0}).status_code in (201, 202)
    wait_ready(hub, "bob")
    # %gpu in bob's CPU-only server says the budget in the hub's words.
    write_notebook(hub.workdir / "users" / "bob" / "b.ipynb", "print(1)")
    client = server_kernel(hub, "bob", "b.ipynb")
    try:
        client.wait_for_ready(timeout=60)
        run(client, "%load_ext gpuhub_lab")
        shown = run(client, "%gpu")
        said = f"GPU-hour budget: {budget(hub, 'bob')['text']}."
        assert said in shown.text and any(said in h for h in shown.html), shown
    finally:
        client.stop_channels()
    stop(hub, "bob")

    # The fleet page and /hub/metrics say what the holdings answer says.
    metric_settles(hub, "gpuhub_gpu_budget_used_seconds", "user", "bob", over["used_hours"] * 3600)
    metric_settles(hub, "gpuhub_gpu_budget_seconds", "user", "bob", 7.2)
    fleet = hub.login("root").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    row = re.search(
        r'<tr class="gpuhub-budget[^"]*" data-scope="user" data-name="bob"[^>]*>', fleet
    )
    assert row is not None, fleet[-3000:]
    assert f'data-used="{round(over["used_hours"], 4)}"' in row.group(0)
    # Its reset is written as every time on the page is (the reader's zone), not in the
    # budget's zone beside "Since" times in the reader's.
    budgets = fleet.split('data-gpuhub-live="budgets"', 1)[1].split("</tbody>", 1)[0]
    assert re.search(r'<time class="gpuhub-time" datetime="[^"]+">tomorrow 00:00 ', budgets)

    # Bad grants are refused with a sentence; a user may not grant themselves hours.
    bad = hub.api("POST", "/gpuhub/budgets/bob/grants", json={"hours": "lots", "reason": "x"})
    assert bad.status_code == 400 and "hours must be a number of GPU-hours" in bad.json()["message"]
    # A 400-digit number is a valid JSON number that no float holds: a sentence, not a 500.
    huge = hub.api("POST", "/gpuhub/budgets/bob/grants", json={"hours": 10**400, "reason": "x"})
    assert huge.status_code == 400, huge.text
    assert "hours must be a number of GPU-hours" in huge.json()["message"]
    no_reason = hub.api("POST", "/gpuhub/budgets/bob/grants", json={"hours": 1, "reason": " "})
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["message"]
    wrong_pool = hub.api(
        "POST", "/gpuhub/budgets/bob/grants", json={"hours": 1, "reason": "x", "group": "staff"}
    )
    assert (
        wrong_pool.status_code == 400 and "not from a shared budget" in wrong_pool.json()["message"]
    )
    own = requests.post(
        f"{hub.api_url}/gpuhub/budgets/bob/grants",
        headers={"Authorization": f"token {token_for(hub, 'bob')}"},
        json={"hours": 1, "reason": "please"},
        timeout=30,
    )
    assert own.status_code in (403, 404), own.text

    # An admin's extra hour: within budget again, the reason in the budget and a notice.
    granted = hub.api(
        "POST", "/gpuhub/budgets/bob/grants", json={"hours": 1, "reason": "thesis deadline"}
    )
    assert granted.status_code == 201, granted.text
    now = budget(hub, "bob")
    assert now["extra_hours"] == 1 and now["state"] == "ok"
    assert (
        now["grants"][0]["reason"] == "thesis deadline" and now["grants"][0]["by"] == "gpuhub-test"
    )
    assert any("thesis deadline" in n["text"] for n in notices(hub, "bob"))
    metric_settles(hub, "gpuhub_gpu_budget_seconds", "user", "bob", 7.2 + 3600)
    assert spawn(hub, "bob", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "bob")
    stop(hub, "bob")


def test_the_fleet_page_grants_hours_with_its_form(hub: Hub) -> None:
    root = hub.login("root")
    xsrf = root.cookies.get("_xsrf", path="/hub/")
    url = f"{hub.url}/hub/gpuhub/fleet/grant"
    empty = root.post(url, data={"_xsrf": xsrf, "user": "carol", "hours": "0.5", "reason": ""})
    assert empty.status_code == 400 and 'id="gpuhub-grant-error"' in empty.text
    assert "Give a reason for the extra GPU-hours" in empty.text
    done = root.post(
        url, data={"_xsrf": xsrf, "user": "carol", "hours": "0.5", "reason": "lab <b>day</b>"}
    )
    assert done.status_code == 200 and "Granted carol 0.5 extra GPU-hours" in done.text
    assert "lab &lt;b&gt;day&lt;/b&gt;" in done.text  # the reason, escaped, in the grants column
    assert budget(hub, "carol")["extra_hours"] == 0.5
    # Without the page's XSRF token nothing is granted.
    forged = requests.post(
        url, data={"user": "carol", "hours": "9", "reason": "x"}, cookies=root.cookies
    )
    assert forged.status_code == 403 and budget(hub, "carol")["extra_hours"] == 0.5
    # A user sees their own budget only, and no form.
    mine = hub.login("carol").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    assert 'data-name="carol"' in mine and 'data-name="bob"' not in mine
    assert 'id="gpuhub-grant"' not in mine
    refused = hub.login("carol").post(
        url, data={"_xsrf": xsrf, "user": "carol", "hours": "9", "reason": "x"}
    )
    assert refused.status_code in (403,), refused.status_code


@pytest.mark.browser
def test_the_form_says_what_the_chosen_gpus_cost_per_hour(hub: Hub) -> None:
    from gpuhub.core.budgets import lasts_words
    from tests.support.browser.chromium import chromium

    left = budget(hub, "carol")["left_hours"]
    with chromium() as browser:
        page = browser.new_page()  # type: ignore[attr-defined]
        hub.log_in_browser(page, "carol")
        page.goto(f"{hub.url}/hub/spawn")
        said = page.locator("#gpuhub-budget")
        assert "GPU-hours used today; resets " in said.inner_text()
        cost = page.locator("#gpuhub-budget-cost")
        assert cost.inner_text() == "A CPU-only server uses none of your GPU-hours."
        page.fill("#gpuhub-gpus", "1")
        # How long the budget lasts, as the hub says it (not "about 0.01 hours").
        expected = f"; at that rate your budget lasts {lasts_words(left)}."
        page.wait_for_function(
            "() => document.querySelector('#gpuhub-budget-cost').textContent.startsWith("
            "'This server would use 1 GPU-hour per hour')"
        )
        assert expected in cost.inner_text(), cost.inner_text()
        page.fill("#gpuhub-gpus", "0")
        page.wait_for_function(
            "() => document.querySelector('#gpuhub-budget-cost').textContent.startsWith('A CPU')"
        )


def test_a_shared_pool_counts_its_members_together(hub: Hub) -> None:
    pool = budget(hub, "alice")
    assert pool["scope"] == "group" and pool["name"] == "staff" and pool["shared"]
    assert pool["period"] == "week" and pool["resets"].startswith("Monday 00:00")
    assert spawn(hub, "alice", {"gpus": 2}).status_code in (201, 202)
    wait_ready(hub, "alice")
    wait_for("the pool to fill", lambda: budget(hub, "alice")["state"] == "over", hub)
    wait_for("the stop", lambda: not hub.user_model("alice")["servers"], hub)
    spent = budget(hub, "alice")["used_hours"] * 3600
    # dora holds nothing but draws on the same pool: she is told too.
    told = [n["text"] for n in notices(hub, "dora")]
    assert any(t.startswith("You have used all 0.004 GPU-hours of the staff group's") for t in told)
    metric_settles(hub, "gpuhub_gpu_budget_used_seconds", "group", "staff", spent)
    metric_settles(hub, "gpuhub_gpu_budget_seconds", "group", "staff", 14.4)


def switched_on(hub: Hub) -> str:
    """When the fleet page says budgets were switched on (they count nothing before)."""
    page = hub.login("root").get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    found = re.search(
        r'id="gpuhub-budgets-since">Budgets were switched on <time class="gpuhub-time" '
        r'datetime="([^"]+)">[^<]+ UTC</time>: GPU-hours used before then are not charged',
        page,
    )
    assert found is not None, page[-3000:]
    return found.group(1)


def test_usage_survives_a_restart_and_a_damaged_file(hub: Hub, workdir: Path) -> None:
    before = budget(hub, "bob")
    since = switched_on(hub)  # this hub's first look: within today's period
    hub.stop()
    again = start_hub(workdir, hub.config)
    try:
        after = budget(again, "bob")
        assert after["used_hours"] == pytest.approx(before["used_hours"], abs=1e-9)
        assert after["extra_hours"] == before["extra_hours"]
        assert switched_on(again) == since  # kept: not "switched on" at each start
    finally:
        again.stop()
    (workdir / "gpuhub-budgets.json").write_text("{cut short")
    damaged = start_hub(workdir, hub.config)
    try:
        assert budget(damaged, "bob")["used_hours"] == 0
        [aside] = workdir.glob("gpuhub-budgets.json.damaged-*")
        wait_for("the log line", lambda: str(aside) in damaged.log(), damaged)
    finally:
        damaged.stop()


IDLE_ONLY = """
c.JupyterHub.allow_named_servers = True
c.JupyterHub.load_groups = {"rich": {"users": ["carol"]}, "others": {"users": ["alice"]}}
c.LocalGPUSpawner.gpu_devices = [0]
c.LocalGPUSpawner.default_limits = {"max_gpus": 1}
c.LocalGPUSpawner.gpu_queue_timeout = 120
c.LocalGPUSpawner.gpu_monitor_interval = 0.4
c.LocalGPUSpawner.gpu_hours = {
    "default": {"hours": 0.0005, "per": "day"},
    "groups": {"rich": {"hours": 1, "per": "day"}},
    "at_limit": "idle_only",
    "grace": 1,
}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""


@pytest.fixture(scope="module")
def idle_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("budgets-idle-only")
    hub = start_hub(workdir, jobs_hub_config(workdir) + IDLE_ONLY + LEDGER_READER)
    try:
        yield hub
    finally:
        for name in ("alice", "carol"):
            hub.api("DELETE", f"/users/{name}/server")
        hub.stop()


def test_idle_only_runs_over_budget_work_until_someone_within_budget_waits(
    idle_hub: Hub,
) -> None:
    hub = idle_hub
    assert spawn(hub, "alice", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "alice")
    wait_for("alice over budget", lambda: budget(hub, "alice")["state"] == "over", hub)
    # Nobody else wants the GPU: past the grace alice's server goes on (checked over ticks).
    spent = budget(hub, "alice")["used_hours"]
    wait_for("more ticks", lambda: budget(hub, "alice")["used_hours"] > spent + 0.0003, hub)
    assert hub.user_model("alice")["servers"][""]["ready"]
    # Over budget, with no GPU that would stay idle: refused with the sentence.
    more = spawn(hub, "alice", {"gpus": 1}, "second")
    assert more.status_code == 403, more.text
    assert "only on GPUs that would otherwise stay idle" in more.json()["message"]
    # carol, within her budget, waits in line for the GPU: alice's server is the one stopped.
    assert spawn(hub, "carol", {"gpus": 1}).status_code in (201, 202)
    wait_ready(hub, "carol", timeout=120)
    assert "" not in hub.user_model("alice")["servers"]
    [stopped] = [n for n in notices(hub, "alice") if n["kind"] == "server"]
    assert "someone within their budget waits for these GPUs" in stopped["text"]
    assert budget(hub, "carol")["state"] == "ok"
    stop(hub, "carol")
