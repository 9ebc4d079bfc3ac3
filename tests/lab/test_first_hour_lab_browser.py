"""A newcomer's first hour on `make demo`, in Chromium: JupyterLab (issue 22).

The demo's own hub (tests/support/hub/demo.py: 4 simulated GPUs, alice the GPU fleet admin,
bob a student) with JupyterLab and the lab extension just built. The magics in a fresh
notebook, a failed job in the Jobs panel, the jobs dialog's refusals, the same figures in
the sidebar and on the fleet page, and a server stopped under its user. Each test starts
what it needs; each keeps a screenshot of the screen it fixed under test-artifacts/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
import requests

from harness.hub.process import Hub, spawn, stop, wait_ready
from tests.support.browser.chromium import artifact, chromium
from tests.support.browser.lab import jobs_panel
from tests.support.hub.demo import DEMO_PASSWORD, log_in, start_demo_hub
from tests.support.jupyter.notebooks import write_notebook
from tests.support.wait import until

pytestmark = pytest.mark.browser

TIMEOUT = 120_000  # ms: a lab and its kernels on a loaded 2-core machine
VIEWPORT = {"width": 1280, "height": 900}
# Busy for a minute, holding 600 MiB: a simulated GPU's figures are its kernel's CPU and RSS.
BUSY = (
    "import time\nx = bytearray(600 * 2**20)\nend = time.time() + 90\nwhile time.time() < end: pass"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("first-hour-lab")
    for user in ("alice", "bob"):
        home = workdir / "gpuhub-users" / user
        # A job whose magic is refused: papermill says only "CellExecutionError".
        write_notebook(home / "magic-job.ipynb", "%jobs", "%job frobnicate x")
        write_notebook(home / "train.ipynb", "print('training')", parameters="epochs = 1")
        home.chmod(0o700)
    hub = start_demo_hub(workdir, extra="c.LocalGPUSpawner.gpu_monitor_interval = 2")
    try:
        yield hub
    finally:
        for user in ("alice", "bob"):
            hub.api("DELETE", f"/users/{user}/server")
        hub.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@contextmanager
def lab_page(browser: Any, hub: Hub, user: str, name: str, path: str = "") -> Iterator[Any]:
    """``user``'s JupyterLab (their server started with 2 GPUs, or 1 for a student) in a
    workspace of its own; a screenshot on failure."""
    gpus = 2 if user == "alice" else 1
    if not hub.user_model(user)["servers"].get(""):
        answer = spawn(hub, user, {"gpus": gpus})
        assert answer.status_code in (201, 202), answer.text
        wait_ready(hub, user, timeout=120)
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        log_in(page, hub, user)
        tree = f"/tree/{path}" if path else ""
        page.goto(f"{hub.url}/user/{user}/lab/workspaces/{name}{tree}")
        page.wait_for_selector(".jp-LabShell .jp-SideBar", timeout=TIMEOUT)
        yield page
    except BaseException:
        page.screenshot(path=str(artifact(f"{name}-failure.png")))
        raise
    finally:
        context.close()


def run_cell(page: Any, code: str) -> Any:
    """Type ``code`` into the last cell of the open notebook and run it; its output area."""
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=TIMEOUT)
    cell = page.locator(".jp-NotebookPanel:visible .jp-Cell").last
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.type(code)
    page.keyboard.press("Control+Enter")
    prompt = cell.locator(".jp-InputPrompt")
    for _ in range(5):  # JupyterLab may drop the first run while its kernel connection settles
        try:
            page.wait_for_function(
                "(p) => /\\[\\d+\\]/.test(p.textContent)",
                arg=prompt.element_handle(),
                timeout=20_000,
            )
            break
        except Exception:
            editor.click()
            page.keyboard.press("Control+Enter")
    return cell.locator(".jp-OutputArea")


def new_notebook(page: Any) -> None:
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    page.locator(".jp-NotebookPanel:visible .jp-Cell .cm-content").first.wait_for(timeout=TIMEOUT)


def test_gpu_and_jobs_magics_work_in_a_new_notebook(hub: Hub, browser: Any) -> None:
    """No %load_ext: the demo's kernels load gpuhub's magics by themselves."""
    with lab_page(browser, hub, "alice", "magics") as page:
        new_notebook(page)
        gpu = run_cell(page, "%gpu")
        gpu.locator("text=GPUs 0, 1 (Simulated GPU) assigned to this server").wait_for()
        assert "not found" not in gpu.inner_text()
        page.keyboard.press("Escape")
        page.keyboard.press("b")  # a new cell below
        jobs = run_cell(page, "%jobs")
        page.wait_for_function("(o) => o.textContent.trim().length > 0", arg=jobs.element_handle())
        assert "not found" not in jobs.inner_text() and "Error" not in jobs.inner_text()
        page.screenshot(path=str(artifact("magics-in-demo.png")))


def test_the_job_dialog_says_every_problem_by_its_field(hub: Hub, browser: Any) -> None:
    """Three fields wrong: each sentence under its own field at once, the first in view and
    focused; nothing is submitted."""
    with lab_page(browser, hub, "alice", "job-dialog", "train.ipynb") as page:
        toolbar = page.locator(".jp-NotebookPanel-toolbar").first
        page.wait_for_function(
            "el => el.textContent.includes('Run as job')", arg=toolbar.element_handle()
        )
        page.locator('.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]').click()
        dialog = page.locator(".gpuhub-JobDialog")
        dialog.wait_for(state="visible")
        form = dialog.locator(".gpuhub-JobForm")
        form.get_by_label("CPU cores").fill("lots")
        form.get_by_label("Memory").fill("16 GB")
        form.get_by_label("Job name (optional)").fill("Bad_Name")
        dialog.get_by_role("button", name="Submit job").click()
        errors = form.locator(".gpuhub-JobForm-error:not([hidden])")
        page.wait_for_function(
            "() => document.querySelectorAll('.gpuhub-JobForm-error:not([hidden])').length >= 3"
        )
        said = [errors.nth(i).inner_text() for i in range(errors.count())]
        assert any(s.startswith("CPU must be between") for s in said), said
        assert any("did you mean 16G?" in s for s in said), said
        assert any("lower-case letters" in s for s in said), said
        cpu = form.get_by_label("CPU cores")
        assert cpu.get_attribute("aria-invalid") == "true"
        assert page.evaluate("document.activeElement.id") == cpu.get_attribute("id")
        dialog.screenshot(path=str(artifact("job-dialog-all-errors.png")))
        dialog.locator(".jp-Dialog-button.jp-mod-reject").click()


def test_a_failed_job_shows_its_failing_cell_and_the_errors_last_lines(
    hub: Hub, browser: Any
) -> None:
    """The job's magic was refused (papermill: "CellExecutionError"): the panel says which
    magic and what the kernel said, and shows the cell."""
    with lab_page(browser, hub, "alice", "job-failed") as page:
        token = hub.api("POST", "/users/alice/tokens", json={"note": "test"}).json()["token"]
        answer = requests.post(
            f"{hub.url}/user/alice/gpuhub/api/jobs",
            json={"notebook": "magic-job.ipynb", "gpus": 0},
            headers={"Authorization": f"token {token}"},
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        job = answer.json()["id"]
        panel = jobs_panel(page)
        row = panel.locator("[data-status='failed']", has_text=job)
        row.wait_for(timeout=TIMEOUT)
        message = row.locator(".gpuhub-Job-message")
        assert "The notebook failed in cell 3: UsageError: Use %job logs ID" in message.inner_text()
        lines = row.locator(".gpuhub-Job-errorLines")
        lines.wait_for()
        assert "UsageError: Use %job logs ID, %job cancel ID" in lines.inner_text()
        assert row.locator(".gpuhub-Job-cell").first.inner_text() == "%job frobnicate x"
        assert "CellExecutionError" not in row.inner_text()
        page.screenshot(path=str(artifact("jobs-panel-failed-cell.png")))
        # %jobs says why on the failed job's own row, the line right under it.
        new_notebook(page)
        table = run_cell(page, "%jobs").locator("table")
        table.wait_for()
        rows = table.locator("tbody tr")
        texts = [rows.nth(i).inner_text() for i in range(rows.count())]
        at = next(i for i, text in enumerate(texts) if text.startswith(job))
        assert texts[at + 1].strip().startswith("↳ The notebook failed in cell 3: UsageError")
        page.screenshot(path=str(artifact("jobs-magic-failure-on-its-row.png")))


def fleet_row(hub: Hub, session: requests.Session, user: str) -> str:
    html = session.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30).text
    found = re.search(rf'<tr class="gpuhub-holder[^"]*" data-user="{user}".*?</tr>', html, re.S)
    return found.group(0) if found else ""


@pytest.mark.alone  # it measures CPU activity: neighbours would skew it
def test_the_sidebar_and_the_fleet_page_show_the_same_figures(hub: Hub, browser: Any) -> None:
    """A busy notebook on bob's simulated GPU: its memory and "now" utilization read the same
    in his sidebar and on the admin's fleet page (one rule, gpuhub.core.simulated)."""
    with lab_page(browser, hub, "bob", "numbers") as page:
        new_notebook(page)
        run_cell(page, BUSY)
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        value = page.locator("#gpuhub-gpu-panel .gpuhub-GpuCard .gpuhub-GpuCard-value")
        page.wait_for_function(
            """() => {
              const v = document.querySelectorAll('#gpuhub-gpu-panel .gpuhub-GpuCard-value');
              return v.length > 1 && parseInt(v[0].textContent, 10) >= 50
                && parseFloat(v[1].textContent) >= 0.5;
            }""",
            timeout=TIMEOUT,
        )
        admin = hub.login("alice", DEMO_PASSWORD)
        row = until(
            "bob's busy row on the fleet page",
            lambda: (
                (r := fleet_row(hub, admin, "bob"))
                and re.search(r"(\d+) % now", r)
                and int(re.search(r"(\d+) % now", r).group(1)) >= 50
                and r
            ),
        )
        lab_memory = value.nth(1).inner_text().split(" of ")[0]  # "0.6 GiB of 16.0 GiB"
        fleet_memory = re.search(r"<td>([\d.]+ GiB)</td>", row).group(1)
        assert lab_memory == fleet_memory, (lab_memory, fleet_memory)
        lab_util = int(value.nth(0).inner_text().split()[0])
        fleet_util = int(re.search(r"(\d+) % now", row).group(1))
        assert lab_util >= 50 and fleet_util >= 50, (lab_util, fleet_util)
        page.screenshot(path=str(artifact("numbers-lab.png")))
        fleet = browser.new_context(viewport=VIEWPORT).new_page()
        log_in(fleet, hub, "alice")
        fleet.goto(f"{hub.url}/hub/gpuhub/fleet")
        fleet.screenshot(path=str(artifact("numbers-fleet.png")), full_page=True)
        fleet.context.close()
        page.keyboard.press("Escape")
        page.locator(".jp-Notebook-ExecutionIndicator").first.wait_for()
        page.keyboard.press("i")
        page.keyboard.press("i")  # interrupt the busy cell


def test_a_server_stopped_by_the_admin_says_so_in_jupyterlab(hub: Hub, browser: Any) -> None:
    """Bob's lab is open when alice stops his server from the fleet page: JupyterLab says it
    was stopped, by whom and why, and offers to start it again; the GPU panel says so too,
    without overflowing and without the GPUs he no longer holds."""
    with lab_page(browser, hub, "bob", "stopped") as page:
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]').click()
        holdings = page.locator(".gpuhub-Holdings-summary")
        holdings.get_by_text("You hold 1 of your 1 GPU.").wait_for(timeout=TIMEOUT)
        admin = hub.login("alice", DEMO_PASSWORD)
        until("bob on the fleet page", lambda: fleet_row(hub, admin, "bob"))
        xsrf = admin.cookies.get("_xsrf", path="/hub/")
        done = admin.post(
            f"{hub.url}/hub/gpuhub/fleet/stop",
            data={
                "target": "bob/",
                "reason": "the node is going down for a driver update",
                "_xsrf": xsrf,
            },
            allow_redirects=False,
            timeout=60,
        )
        assert done.status_code == 303, done.text[-2000:]
        dialog = page.locator(".jp-Dialog", has_text="Your server was stopped")
        dialog.wait_for(timeout=TIMEOUT)
        text = dialog.inner_text()
        assert "by alice: the node is going down for a driver update" in text
        assert "Your saved files are safe" in text
        assert "No unsaved changes in this tab were lost." in text
        assert "Server unavailable" not in page.content()
        panel = page.locator("#gpuhub-gpu-panel")
        panel.get_by_text("This server was stopped").wait_for()
        assert not page.locator(".gpuhub-Holdings").is_visible()  # no stale "You hold 1 …"
        status = page.locator(".gpuhub-GpuStatus")
        assert status.inner_text() == "Server stopped · no GPU"  # not its last figures
        assert page.evaluate(
            "(() => { const p = document.querySelector('#gpuhub-gpu-panel');"
            " return p.scrollWidth <= p.clientWidth; })()"
        ), "the GPU panel overflows its box"
        page.screenshot(path=str(artifact("lab-server-stopped.png")))
        dialog.get_by_role("button", name="Start it again").click()
        page.wait_for_url("**/hub/spawn/bob**", timeout=60_000)
        page.locator("#gpuhub-form").wait_for()
    stop(hub, "bob")


# Every dialog title JupyterLab shows from now on, in order (window.gpuhubDialogs).
WATCH_DIALOGS = """() => {
  window.gpuhubDialogs = [];
  new MutationObserver(() => {
    for (const header of document.querySelectorAll('.jp-Dialog-header')) {
      const title = header.textContent.trim();
      if (title && !header.dataset.gpuhubSeen) {
        header.dataset.gpuhubSeen = '1';
        window.gpuhubDialogs.push(title);
      }
    }
  }).observe(document.body, { childList: true, subtree: true, characterData: true });
}"""
# What JupyterLab's sessions poll does every 10 s: a request whose failure is JupyterLab's
# "connection lost" (window.jupyterapp: the page config's exposeAppInBrowser).
POLL_SESSIONS = "() => window.jupyterapp.serviceManager.sessions.refreshRunning().catch(() => 0)"


def test_every_stop_by_the_admin_says_so_before_anything_else(hub: Hub, browser: Any) -> None:
    """Three times over, alice stops bob's fresh server from the fleet page while his lab is
    open, and the lab notices at the worst moment: its server is gone but the hub, still
    stopping it, calls it active. Each time gpuhub's "Your server was stopped" is the first
    and only dialog, never JupyterLab's "Server Connection Error" (the lab asks the hub again
    until it says stopped)."""
    labconfig = hub.workdir / "config" / "labconfig" / "page_config.json"
    labconfig.write_text(
        json.dumps({**json.loads(labconfig.read_text()), "exposeAppInBrowser": True})
    )
    admin = hub.login("alice", DEMO_PASSWORD)
    for attempt in range(3):
        with lab_page(browser, hub, "bob", f"stopped-{attempt}") as page:
            page.wait_for_function("() => !!window.jupyterapp")
            page.evaluate(WATCH_DIALOGS)
            until("bob on the fleet page", lambda: fleet_row(hub, admin, "bob"))
            form = {
                "target": "bob/",
                "reason": f"maintenance, round {attempt + 1}",
                "_xsrf": admin.cookies.get("_xsrf", path="/hub/"),
            }
            with ThreadPoolExecutor(1) as pool:  # the stop answers once it has ended
                done = pool.submit(
                    admin.post,
                    f"{hub.url}/hub/gpuhub/fleet/stop",
                    data=form,
                    allow_redirects=False,
                    timeout=60,
                )
                until(
                    "bob's server stopping",
                    lambda: (
                        (hub.user_model("bob")["servers"].get("") or {}).get("pending") == "stop"
                    ),
                    every=0.05,
                )
                page.evaluate(POLL_SESSIONS)  # the lab's next poll, now
                assert done.result().status_code == 303, done.result().text[-2000:]
            dialog = page.locator(".jp-Dialog", has_text="Your server was stopped")
            dialog.wait_for(timeout=TIMEOUT)
            assert f"maintenance, round {attempt + 1}" in dialog.inner_text()
            assert page.evaluate("window.gpuhubDialogs") == ["Your server was stopped"], attempt
            dialog.get_by_role("button", name="Close").click()
            dialog.wait_for(state="detached")
            # JupyterLab goes on polling; the lab knows the server is gone, so JupyterLab's own
            # dialog does not follow ours either.
            page.evaluate(POLL_SESSIONS)
            page.locator(".gpuhub-GpuStatus", has_text="Server stopped").wait_for()
            assert page.evaluate("window.gpuhubDialogs") == ["Your server was stopped"]
        hub.wait_for_server("bob", ready=False, timeout=60)
