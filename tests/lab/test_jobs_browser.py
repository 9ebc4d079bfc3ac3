"""The jobs UI in a real JupyterLab: Run as job -> status -> log -> open result.

A real ``jupyter server`` with JupyterLab and the built gpuhub lab extension, driven by
Playwright in Debian's Chromium; jobs run with the local backend (papermill, real kernels).
Screenshots of the dialog and the Jobs panel go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import nbformat
import pytest

from gpuhub.jobs.policy_env import policy_env
from harness.jupyter.server import TOKEN, JupyterServer, expose_lab_extension, jupyter_server
from tests.support.browser.chromium import artifact, chromium
from tests.support.browser.lab import jobs_panel
from tests.support.jupyter.notebooks import write_notebook
from tests.support.policies import DESIGN_CONFIG

pytestmark = pytest.mark.browser

CONFIG = """
c.GPUHubJobs.images = {
    "scipy": {"display_name": "SciPy (CPU)", "image": "quay.io/jupyter/scipy-notebook:2025-10-20"},
}
c.GPUHubJobs.cpu_range = {"min": 0.5, "max": 4, "default": 1}
c.GPUHubJobs.memory_range = {"min": "512M", "max": "8G", "default": "2G"}
"""
# The parameters cell is replaced per run; the last cell shows what the run saw.
TRAIN = "print(f'trained for {epochs} epochs at rate {rate}')"
BROKEN = ("x = 1", "raise ValueError('the data has no rows')", "print('never')")
SLOW = (
    "import time\nfor step in range(600):\n    print('step', step, flush=True)\n    time.sleep(0.5)"
)
TIMEOUT = 120_000  # ms: papermill starts a kernel on a 2-core machine


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    tmp = tmp_path_factory.mktemp("jobs-browser")
    root = tmp / "home"
    write_notebook(root / "train.ipynb", TRAIN, parameters="epochs = 1\nrate = 0.1")
    write_notebook(root / "broken.ipynb", *BROKEN)
    write_notebook(root / "slow.ipynb", SLOW)
    expose_lab_extension(tmp)
    # The command palette in the sidebar, as JupyterLab's setting offers: the modal one closes
    # whenever anything takes the focus, which a lab still restoring its layout on a loaded
    # machine does at moments no page state tells.
    settings = tmp / "config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "palette.jupyterlab-settings").write_text('{"modal": false}')
    # Two GPUs by CUDA_VISIBLE_DEVICES: the local backend offers them (no GPU is touched;
    # the notebooks only see the variable).
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    with jupyter_server(root, tmp, lab=True, config=CONFIG, env=env) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@contextmanager
def notebook_page(browser: Any, lab: JupyterServer, path: str, name: str) -> Iterator[Any]:
    """A page with ``path`` open in JupyterLab; on failure a screenshot tells what was seen."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(60_000)  # a loaded 2-core CI machine
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type in ("error", "warning") and "gpuhub" in msg.text
            else None
        ),
    )
    try:
        # A workspace per page, so the layout another test left does not come back.
        page.goto(f"{lab.url}lab/workspaces/{name}/tree/{path}?token={TOKEN}")
        page.locator(f'.lm-TabBar-tab.lm-mod-current[title*="{path}"]').wait_for(timeout=TIMEOUT)
        page.wait_for_selector(".jp-NotebookPanel:visible .jp-Cell", timeout=TIMEOUT)
        # Its kernel started: JupyterLab settles the notebook (and its focus) until then,
        # closing a command palette opened meanwhile.
        page.locator(
            '.jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator[data-status="idle"]'
        ).wait_for(timeout=TIMEOUT)
        yield page
        assert errors == [], "the page logged errors"
    except BaseException:
        page.screenshot(path=str(artifact(f"{name}-failure.png")))
        raise
    finally:
        page.close()


def open_palette(page: Any) -> Any:
    """The command palette (in the sidebar: see the ``lab`` fixture), opened from the View
    menu."""
    page.locator(".lm-MenuBar-item", has_text="View").click()
    page.locator(".lm-Menu-item", has_text="Activate Command Palette").click()
    palette = page.locator(".lm-CommandPalette-input")
    palette.wait_for(state="visible")
    return palette


def test_submit_follow_and_open_result(browser: Any, lab: JupyterServer) -> None:
    with notebook_page(browser, lab, "train.ipynb", "jobs-submit") as page:
        submit_follow_and_open_result(page, lab)


def submit_follow_and_open_result(page: Any, lab: JupyterServer) -> None:
    # Before any job: the panel explains what jobs are and how to start one.
    panel = jobs_panel(page)
    empty = panel.locator(".gpuhub-JobsPanel-empty")
    empty.wait_for(state="visible")
    assert "Run as job" in empty.inner_text()  # not on a cluster: jobs run on this server
    toolbar = page.locator(".jp-NotebookPanel-toolbar").first
    page.wait_for_function(
        "el => el.textContent.includes('Run as job')", arg=toolbar.element_handle()
    )
    assert "Run on cluster" not in toolbar.inner_text()
    assert "train.ipynb" in panel.locator(".gpuhub-JobsPanel-hint").first.inner_text()
    page.screenshot(path=str(artifact("jobs-panel-empty.png")))

    # The notebook toolbar button opens the dialog, filled from the options endpoint.
    page.locator('.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]').click()
    dialog = page.locator(".gpuhub-JobDialog")
    dialog.wait_for(state="visible")
    form = dialog.locator(".gpuhub-JobForm")
    assert form.get_by_label("Training job").is_checked()
    # Keyboard users start on the choice of what to run.
    assert form.get_by_label("Training job").evaluate("el => el === document.activeElement")
    pipeline = form.get_by_label("Pipeline step")
    assert pipeline.is_disabled()  # not on a cluster here: the server's reason is shown
    kinds = {k["kind"]: k for k in lab.api("GET", "gpuhub/api/jobs/options").json()["kinds"]}
    reason = form.locator(".gpuhub-mod-disabled .gpuhub-JobForm-help").inner_text()
    assert reason == kinds["pipeline"]["reason"]
    assert form.get_by_label("Image").input_value() == "scipy"
    assert form.get_by_label("Memory").input_value() == "2G"
    assert form.get_by_label("GPUs").input_value() == "1"
    gpu_type = form.get_by_label("GPU type")
    assert gpu_type.is_visible() and gpu_type.input_value() == "gpu"
    assert (
        "up to 2"
        in form.locator(f"#{form.get_by_label('GPUs').get_attribute('id')}-help").inner_text()
    )
    form.get_by_label("GPUs").fill("0")
    assert gpu_type.is_hidden()  # a CPU-only job has no GPU type
    # The notebook's parameters are offered, with their values as placeholders.
    epochs = form.get_by_label("Value of epochs")
    assert epochs.get_attribute("placeholder") == "1"

    # Out of range: the server refuses; its sentence appears under Memory and the
    # dialog stays open.
    form.get_by_label("Memory").fill("64G")
    epochs.fill("7")
    # Values are JSON when they look like JSON, text otherwise.
    form.get_by_role("button", name="Add parameter").click()
    form.get_by_label("Parameter name").last.fill("layers")
    form.get_by_label("Value of layers").fill("[64, 32]")
    form.get_by_role("button", name="Add parameter").click()
    form.get_by_label("Parameter name").last.fill("optimizer")
    form.get_by_label("Value of optimizer").fill("adam")
    dialog.get_by_role("button", name="Submit job").click()
    memory_error = form.locator(".gpuhub-JobForm-error:not([hidden])")
    memory_error.wait_for(state="visible")
    assert "memory" in memory_error.inner_text().lower()
    assert memory_error.locator("xpath=..").get_by_label("Memory").count() == 1
    assert form.get_by_label("Memory").get_attribute("aria-invalid") == "true"
    dialog.screenshot(path=str(artifact("jobs-dialog-error.png")))
    assert lab.api("GET", "gpuhub/api/jobs").json()["jobs"] == []  # nothing was created

    # More GPUs than this server has: the hint says so, the server refuses under GPUs.
    form.get_by_label("Memory").fill("1G")
    assert memory_error.is_hidden()
    gpus = form.get_by_label("GPUs")
    gpus.fill("3")
    assert "3 is more than that" in form.locator(f"#{gpus.get_attribute('id')}-help").inner_text()
    dialog.get_by_role("button", name="Submit job").click()
    gpus_error = form.locator(f"#{gpus.get_attribute('id')}-error")
    gpus_error.wait_for(state="visible")
    assert "at most 2" in gpus_error.inner_text()
    gpus.fill("1")

    dialog.screenshot(path=str(artifact("jobs-dialog.png")))
    dialog.get_by_role("button", name="Submit job").click()
    dialog.wait_for(state="detached")

    # The Jobs panel shows the new job, its log opens and follows the run.
    item = panel.locator(".gpuhub-Job").first
    item.wait_for(state="visible")
    assert item.locator(".gpuhub-Job-name").inner_text() == "train"
    item.locator('[data-status="succeeded"]').or_(
        page.locator('.gpuhub-Job[data-status="succeeded"]')
    ).first.wait_for(timeout=TIMEOUT)
    assert item.get_attribute("data-status") == "succeeded"
    # The end is announced too (a toast that closes by itself after a few seconds).
    page.get_by_text("Job train succeeded.").wait_for(timeout=5_000)
    badge = item.locator(".gpuhub-Job-badge")
    assert badge.inner_text() == "Succeeded"
    assert badge.get_attribute("aria-label") == "Status: Succeeded"
    meta = item.locator(".gpuhub-Job-meta").inner_text()
    assert "Training job" in meta and "1 x NVIDIA" in meta and re.search(r"\d+ s", meta)
    log = item.get_by_role("log")
    assert log.is_visible()
    page.wait_for_function(
        "el => el.textContent.includes('trained for 7 epochs')",
        arg=log.element_handle(),
        timeout=60_000,
    )
    # Following: the log is scrolled to its end.
    assert log.evaluate("el => el.scrollTop + el.clientHeight >= el.scrollHeight - 8")
    assert item.get_by_role("button", name="Cancel train").is_hidden()
    page.screenshot(path=str(artifact("jobs-panel.png")))

    # Open result: the executed notebook opens in JupyterLab, with the injected parameter.
    job = lab.api("GET", "gpuhub/api/jobs").json()["jobs"][0]
    assert job["status"] == "succeeded" and job["parameters"] == {
        "epochs": 7,
        "layers": [64, 32],
        "optimizer": "adam",
    }
    # The details say what was asked for.
    item.locator(".gpuhub-Job-details > summary").click()
    details = item.locator(".gpuhub-Job-detailsList").inner_text()
    assert "epochs = 7, layers = [64,32], optimizer = adam" in details
    assert "1 core, 1G" in details and job["id"] in details
    assert "default" not in details  # the image is named, not a raw key
    item.get_by_role("button", name="Open result").click()
    result_tab = page.locator(f'.lm-TabBar-tab[title*="{job["output"].split("/")[-2]}"]')
    result_tab.wait_for(timeout=60_000)
    # The tab names the job (its id), not the notebook's file name a second time.
    assert result_tab.inner_text() == f"{job['id']}.ipynb"
    result = page.locator(".jp-NotebookPanel:visible")
    result.locator("text=trained for 7 epochs at rate 0.1").wait_for(timeout=60_000)
    assert "epochs = 7" in result.locator(".jp-Cell").nth(2).inner_text()
    executed = nbformat.read(lab.root / job["output"], as_version=4)
    assert "injected-parameters" in executed.cells[2].metadata.get("tags", [])
    page.screenshot(path=str(artifact("jobs-result.png")))
    # The executed copy is a result: "Current notebook" still names the notebook to run.
    hint = panel.locator(".gpuhub-JobsPanel-hint").first.inner_text()
    assert "train.ipynb" in hint and "gpuhub-runs" not in hint


def test_two_runs_of_one_notebook_are_told_apart(browser: Any, lab: JupyterServer) -> None:
    with notebook_page(browser, lab, "train.ipynb", "jobs-apart") as page:
        panel = jobs_panel(page)
        panel.locator(".gpuhub-JobsPanel-hint").first.wait_for()
        # Submitted by another route (as %submit does) while the panel is open: each shows
        # within one poll, no reload.
        ids = []
        for epochs in (3, 5):
            answer = lab.api(
                "POST",
                "gpuhub/api/jobs",
                json={"notebook": "train.ipynb", "gpus": 0, "parameters": {"epochs": epochs}},
            )
            assert answer.status_code == 201, answer.text
            ids.append(answer.json()["id"])
            page.locator(f'.gpuhub-Job[data-job-id="{ids[-1]}"]').wait_for(timeout=6_000)
        cards = [panel.locator(f'.gpuhub-Job[data-job-id="{i}"]') for i in ids]
        names = [c.locator(".gpuhub-Job-name").inner_text() for c in cards]
        summaries = [c.locator(".gpuhub-Job-summary").inner_text() for c in cards]
        assert names[0] == names[1] == "train"  # same notebook, same name...
        assert summaries[0] != summaries[1]  # ...told apart without expanding anything
        assert summaries[0].startswith("started ") and "epochs = 3" in summaries[0]
        assert "epochs = 5" in summaries[1]
        for i in ids:
            page.locator(f'.gpuhub-Job[data-job-id="{i}"][data-status="succeeded"]').wait_for(
                timeout=TIMEOUT
            )
        page.screenshot(path=str(artifact("jobs-two-runs.png")))


def test_failed_job_shows_the_failing_cell(browser: Any, lab: JupyterServer) -> None:
    with notebook_page(browser, lab, "broken.ipynb", "jobs-failed") as page:
        failed_job_shows_the_failing_cell(page)


def failed_job_shows_the_failing_cell(page: Any) -> None:
    # The command palette entry (category GPU) opens the same dialog. The palette is
    # opened from the View menu and filled directly: stray keys would edit the notebook.
    palette = open_palette(page)
    palette.fill("Run Notebook as Job")
    palette_item = page.locator(".lm-CommandPalette-item", has_text="Run Notebook as Job")
    palette_item.first.wait_for()
    page.screenshot(path=str(artifact("jobs-palette.png")))
    palette_item.first.click()
    dialog = page.locator(".gpuhub-JobDialog")
    dialog.wait_for(state="visible")
    assert dialog.locator(".gpuhub-JobForm-param").count() == 0  # no parameters cell
    page.keyboard.press("Enter")  # the default button submits
    dialog.wait_for(state="detached")

    panel = jobs_panel(page)
    item = panel.locator('.gpuhub-Job[data-job-id^="broken-"]')
    page.locator('.gpuhub-Job[data-job-id^="broken-"][data-status="failed"]').wait_for(
        timeout=TIMEOUT
    )
    # The server's sentence names the error; below it, the failing cell's source.
    assert "ValueError: the data has no rows" in item.locator(".gpuhub-Job-message").inner_text()
    failure = item.locator(".gpuhub-Job-failure")
    assert failure.is_visible()
    assert "Failing cell (In [2])" in failure.inner_text()
    source = failure.get_by_label("Source of the failing cell")
    assert source.inner_text() == "raise ValueError('the data has no rows')"
    assert "ValueError" in failure.get_by_label("The last lines of the error").inner_text()
    assert item.locator(".gpuhub-Job-badge").inner_text() == "Failed"
    # The executed notebook (up to the failure) can still be opened.
    assert item.get_by_role("button", name="Open result").is_visible()
    page.screenshot(path=str(artifact("jobs-panel-failed.png")))


def test_cancel_from_the_sidebar_and_dark_theme(browser: Any, lab: JupyterServer) -> None:
    with notebook_page(browser, lab, "slow.ipynb", "jobs-cancel") as page:
        cancel_from_the_sidebar_and_dark_theme(page, lab)


def cancel_from_the_sidebar_and_dark_theme(page: Any, lab: JupyterServer) -> None:
    panel = jobs_panel(page)
    # The sidebar's own entry point runs the notebook the user was working in.
    assert "slow.ipynb" in panel.locator(".gpuhub-JobsPanel-hint").first.inner_text()
    panel.get_by_role("button", name="Run as job…").click()
    dialog = page.locator(".gpuhub-JobDialog")
    dialog.get_by_role("button", name="Submit job").click()
    dialog.wait_for(state="detached")

    item = panel.locator('.gpuhub-Job[data-job-id^="slow-"]')
    page.locator('.gpuhub-Job[data-job-id^="slow-"][data-status="running"]').wait_for(
        timeout=TIMEOUT
    )
    log = item.get_by_role("log")
    # Long enough to scroll (job logs no longer carry the kernel's transport warning, so
    # the first steps alone may fit): a log that fits on screen is always "at the end".
    page.wait_for_function(
        "el => /step [3-9]/.test(el.textContent) && el.scrollHeight > el.clientHeight + 40",
        arg=log.element_handle(),
        timeout=TIMEOUT,
    )
    # Scrolled up, the log stays where the reader is; "Follow the end" brings it back.
    log.evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
    page.wait_for_function(
        "el => el.textContent.split('\\n').length > 40", arg=log.element_handle(), timeout=60_000
    )
    assert log.evaluate("el => el.scrollTop") == 0
    follow = item.get_by_role("button", name="Follow the end")
    assert follow.is_visible()
    follow.click()
    assert log.evaluate("el => el.scrollTop + el.clientHeight >= el.scrollHeight - 8")
    assert re.search(r"\d+ s", item.locator(".gpuhub-Job-meta").inner_text())

    # The same log, followed in a main-area tab.
    item.get_by_role("button", name="Open the log of slow in a tab").click()
    tab_log = page.locator(".gpuhub-JobLogTab").get_by_role("log")
    tab_log.wait_for()
    page.wait_for_function(
        "el => /step \\d+/.test(el.textContent)", arg=tab_log.element_handle(), timeout=60_000
    )
    assert page.locator(".lm-TabBar-tab", has_text="Log: slow").is_visible()

    # Status words keep their contrast (WCAG AA) in the light theme and the dark one.
    assert contrast(item.locator(".gpuhub-Job-badge")) >= 4.5
    page.locator(".lm-MenuBar-item", has_text="Settings").click()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^Theme$")).hover()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^JupyterLab Dark$")).click()
    page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=60_000)
    page.wait_for_timeout(500)  # the theme's stylesheet applies
    badge = item.locator(".gpuhub-Job-badge")
    assert contrast(badge) >= 4.5
    page.screenshot(path=str(artifact("jobs-panel-dark.png")))

    # Cancel asks first; "Keep running" keeps it running.
    item.get_by_role("button", name="Cancel slow").click()
    confirm = page.locator(".jp-Dialog").last
    assert "Cancel slow?" in confirm.inner_text()
    confirm.get_by_role("button", name="Keep running").click()
    assert item.get_attribute("data-status") == "running"
    item.get_by_role("button", name="Cancel slow").click()
    page.locator(".jp-Dialog").last.get_by_role("button", name="Cancel job slow").click()
    page.locator('.gpuhub-Job[data-job-id^="slow-"][data-status="cancelled"]').wait_for(
        timeout=60_000
    )
    assert item.locator(".gpuhub-Job-badge").inner_text() == "Cancelled"
    assert item.get_by_role("button", name="Cancel slow").is_hidden()
    jobs = lab.api("GET", "gpuhub/api/jobs").json()["jobs"]
    assert [j["status"] for j in jobs if j["name"] == "slow"] == ["cancelled"]
    # Back to the light theme for whoever opens this workspace next.
    page.locator(".lm-MenuBar-item", has_text="Settings").click()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^Theme$")).hover()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^JupyterLab Light$")).click()


# WCAG contrast of an element's text against the first opaque background behind it.
CONTRAST = """el => {
  const fg = getComputedStyle(el).color;
  let node = el, bg = 'rgba(0, 0, 0, 0)';
  while (node && /rgba\\(.*, 0\\)|transparent/.test(bg)) {
    bg = getComputedStyle(node).backgroundColor;
    node = node.parentElement;
  }
  const lum = c => {
    const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(v => {
      v = Number(v) / 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}"""


def contrast(locator: Any) -> float:
    return float(locator.evaluate(CONTRAST))


# -- Kubernetes mode: every kind offered; what the dialog sends is what gets forwarded -------
@pytest.fixture(scope="module")
def cluster_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """A user server in Kubernetes mode whose hub-service client records what it forwards.

    The recording client (``tests/support/jupyter/recording_backend.py``) stands in for the hub
    service only; the REST API, the policy checks and the browser side are the real ones.
    """
    tmp = tmp_path_factory.mktemp("jobs-browser-cluster")
    root = tmp / "home"
    write_notebook(root / "train.ipynb", TRAIN, parameters="epochs = 1\nrate = 0.1")
    expose_lab_extension(tmp)
    env = {
        **policy_env(DESIGN_CONFIG, ["staff"]),
        "GPUHUB_JOBS_URL": "http://127.0.0.1:9/services/gpuhub/api",
        "JUPYTERHUB_API_TOKEN": "user-token",
        "GPUHUB_TEST_FORWARD_LOG": str(tmp / "forwarded.jsonl"),
    }
    config = 'c.GPUHubJobs.remote_backend_class = "tests.support.jupyter.recording_backend.RecordingBackend"\n'
    with jupyter_server(root, tmp, lab=True, config=config, env=env) as server:
        yield server


def forwarded(lab: JupyterServer) -> list[dict[str, Any]]:
    log = lab.root.parent / "forwarded.jsonl"
    return (
        [json.loads(line)["body"] for line in log.read_text().splitlines()] if log.exists() else []
    )


def test_distributed_and_pipeline_kinds_on_a_cluster(
    browser: Any, cluster_lab: JupyterServer
) -> None:
    with notebook_page(browser, cluster_lab, "train.ipynb", "jobs-cluster") as page:
        distributed_and_pipeline_kinds(page, cluster_lab)


def test_a_trainjob_needs_a_runtime_the_admin_offers(
    browser: Any, cluster_lab: JupyterServer
) -> None:
    """Run as "Distributed: TrainJob" shows Workers and Runtime; this server's hub service
    offers no training runtime, so the Runtime row says so and the refusal lands there."""
    with notebook_page(browser, cluster_lab, "train.ipynb", "jobs-trainjob") as page:
        page.locator('.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]').click()
        dialog = page.locator(".gpuhub-JobDialog")
        form = dialog.locator(".gpuhub-JobForm")
        form.wait_for()
        runtime = form.get_by_label("Runtime")
        assert runtime.is_hidden()
        form.get_by_label("Run as").select_option("trainjob")
        assert runtime.is_visible() and form.get_by_label("Workers").is_visible()
        assert "No training runtime is offered here" in form.inner_text()
        before = len(forwarded(cluster_lab))
        dialog.get_by_role("button", name="Submit job").click()
        error = form.locator(f"#{runtime.get_attribute('id')}-error")
        error.wait_for(state="visible")
        assert "No training runtime is offered for TrainJobs here" in error.inner_text()
        assert len(forwarded(cluster_lab)) == before  # refused before reaching the cluster
        dialog.locator(".jp-Dialog-button.jp-mod-reject").click()
        dialog.wait_for(state="detached")


def distributed_and_pipeline_kinds(page: Any, lab: JupyterServer) -> None:
    run = page.locator('.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]')
    run.click()
    dialog = page.locator(".gpuhub-JobDialog")
    form = dialog.locator(".gpuhub-JobForm")
    form.wait_for()
    assert form.get_by_label("Pipeline step").is_enabled()
    assert form.locator(".gpuhub-JobForm-why").count() == 0  # every kind is served here
    workers = form.get_by_label("Workers")
    assert workers.is_hidden()
    form.get_by_label("Run as").select_option("pytorchjob")
    assert workers.is_visible()
    workers.fill("3")
    gpus = form.get_by_label("GPUs", exact=True)
    gpus_help = form.locator(f"#{gpus.get_attribute('id')}-help")
    assert "up to 8 for you per worker" in gpus_help.inner_text()

    def refused(field: Any, words: str) -> None:
        dialog.get_by_role("button", name="Submit job").click()
        error = form.locator(f"#{field.get_attribute('id')}-error")
        error.wait_for(state="visible")
        assert words in error.inner_text(), error.inner_text()
        assert forwarded(lab) == []  # refused before anything reached the cluster

    # A parameter name that is not a Python identifier: said under Parameters.
    form.get_by_role("button", name="Add parameter").click()
    form.get_by_label("Parameter name").last.fill("learning rate")
    form.get_by_label("Value of learning rate").fill("0.1")
    dialog.get_by_role("button", name="Submit job").click()
    params_error = form.locator(".gpuhub-JobForm-params ~ .gpuhub-JobForm-error")
    params_error.wait_for(state="visible")
    assert '"learning rate" must be a Python identifier' in params_error.inner_text()
    form.get_by_role("button", name="Remove parameter").last.click()

    name = form.get_by_label("Job name (optional)")
    name.fill("ResNet_DDP")
    refused(name, "lower-case")
    name.fill("resnet-ddp")
    image = form.get_by_label("Image", exact=True)
    image.select_option("__custom__")
    form.get_by_label("Custom image reference").fill("docker.io/someone/miner:latest")
    refused(image, "image")
    form.get_by_label("Custom image reference").fill("registry.example.org/team/train:v1")
    gpu_type = form.get_by_label("GPU type")
    gpu_type.select_option("a100-1g")
    assert "MIG slice" in gpu_type.locator("option:checked").inner_text()
    gpus.fill("2")
    assert "up to 1 for you" in gpus_help.inner_text()  # the hint follows the type
    refused(gpus, "1")
    gpu_type.select_option("a100")
    gpus.fill("4")
    form.get_by_label("Value of epochs").fill("20")
    dialog.screenshot(path=str(artifact("jobs-dialog-cluster.png")))
    dialog.get_by_role("button", name="Submit job").click()
    dialog.wait_for(state="detached")

    assert forwarded(lab) == [
        {
            "notebook": "train.ipynb",
            "kind": "pytorchjob",
            "name": "resnet-ddp",
            "workers": 3,
            "parameters": {"epochs": 20},
            "cpu": 2,
            "memory": "8G",
            "gpus": 4,
            "image": "registry.example.org/team/train:v1",
            "gpu_type": "a100",
        }
    ]
    item = page.locator('.gpuhub-Job[data-job-id^="resnet-ddp-"]')
    item.wait_for()
    meta = item.locator(".gpuhub-Job-meta").inner_text()
    assert "PyTorchJob" in meta and "3 workers, 4 x NVIDIA A100 80GB each" in meta
    assert item.locator(".gpuhub-Job-badge").inner_text() == "Pending"

    # The next dialog starts from these choices; a pipeline step sets the training ones aside.
    run.click()
    form.wait_for()
    assert form.get_by_label("Run as").input_value() == "pytorchjob"
    assert form.get_by_label("Workers").input_value() == "3"
    assert form.get_by_label("Custom image reference").input_value().startswith("registry.")
    assert form.get_by_label("GPU type").input_value() == "a100"
    form.get_by_label("Pipeline step").check()
    assert form.get_by_label("Run as").is_disabled() and form.get_by_label("Workers").is_hidden()
    dialog.get_by_role("button", name="Submit job").click()
    dialog.wait_for(state="detached")
    pipeline = forwarded(lab)[-1]
    assert pipeline["kind"] == "pipeline" and pipeline["workers"] == 1
    assert pipeline["gpus"] == 4 and pipeline["image"] == "registry.example.org/team/train:v1"
    page.locator('.gpuhub-Job[data-job-id^="train-"]').wait_for()
    assert (
        "Pipeline step"
        in page.locator('.gpuhub-Job[data-job-id^="train-"] .gpuhub-Job-meta').inner_text()
    )
    page.screenshot(path=str(artifact("jobs-panel-cluster.png")))


# -- Kueue: a job held by the cluster's queue until GPUs are free ---------------------------
WAITING = "Waiting for 4 GPUs of type a100: 2 jobs are ahead in the queue."
JOBS_API = re.compile(r".*/gpuhub/api/jobs(/[^/?]+)?(\?.*)?$")


def test_a_queued_job_shows_its_place_in_line(browser: Any, cluster_lab: JupyterServer) -> None:
    """A queued record (status "queued", queue_position, message) as the jobs service sends it.

    The recording backend's records stay "pending"; the page's own requests are answered
    with the real server's records, this job's marked queued the way the service marks
    them, so the test needs no queue. Runs after the test above (it counts what was
    forwarded).
    """
    with notebook_page(browser, cluster_lab, "train.ipynb", "jobs-queued") as page:
        queued_job_shows_its_place_in_line(page)


def queued_job_shows_its_place_in_line(page: Any) -> None:
    queue: dict[str, Any] = {"position": 3}

    def mark_queued(job: dict[str, Any]) -> None:
        if job.get("name") == "waiting-train" and job.get("status") == "pending":
            job.update(status="queued", queue_position=queue["position"], message=WAITING)

    def answer(route: Any) -> None:
        response = route.fetch()
        data = (
            response.json()
            if response.ok and "json" in response.headers.get("content-type", "")
            else None
        )
        if not isinstance(data, dict):
            route.fulfill(response=response)
            return
        for job in [*data.get("jobs", []), data.get("job"), data]:
            if isinstance(job, dict):
                mark_queued(job)
        if (data.get("job") or {}).get("status") == "queued":
            data["status"] = "queued"  # the submit answer's own status
        route.fulfill(response=response, json=data)

    page.route(JOBS_API, answer)
    page.locator('.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]').click()
    dialog = page.locator(".gpuhub-JobDialog")
    form = dialog.locator(".gpuhub-JobForm")
    form.wait_for()
    form.get_by_label("Job name (optional)").fill("waiting-train")
    dialog.get_by_role("button", name="Submit job").click()
    dialog.wait_for(state="detached")
    # The submit's follow-up says it waits, and where in line.
    page.get_by_text("queued, 3rd in line.", exact=False).first.wait_for(timeout=10_000)

    item = page.locator('.gpuhub-Job[data-job-id^="waiting-train-"]')
    item.wait_for()
    assert item.get_attribute("data-status") == "queued"
    badge = item.locator(".gpuhub-Job-badge")
    assert badge.inner_text() == "Queued, 3rd in line"
    assert badge.get_attribute("aria-label") == "Status: Queued, 3rd in line"
    # Its own colour (the theme's info colour, not the error one) and a ring, not a dot.
    colors = badge.evaluate(
        """el => ({
          status: getComputedStyle(el).getPropertyValue('--gpuhub-status-color').trim(),
          info: getComputedStyle(document.body).getPropertyValue('--jp-info-color1').trim(),
          error: getComputedStyle(document.body).getPropertyValue('--jp-error-color1').trim(),
          ring: getComputedStyle(el, '::before').borderTopStyle,
        })"""
    )
    assert colors["info"] and colors["status"] in ("var(--jp-info-color1)", colors["info"])
    assert colors["ring"] == "solid" and colors["status"] != colors["error"]
    assert contrast(badge) >= 4.5
    # The service's reason is the detail, not an error.
    message = item.locator(".gpuhub-Job-message")
    assert message.inner_text() == WAITING
    assert "gpuhub-mod-error" not in (message.get_attribute("class") or "")
    assert item.locator(".gpuhub-Job-failure").is_hidden()
    # Active: it can be cancelled, and the panel keeps polling while it waits.
    assert item.get_by_role("button", name="Cancel waiting-train").is_visible()
    page.screenshot(path=str(artifact("jobs-panel-queued.png")))
    queue["position"] = 1
    page.wait_for_function(
        "el => el.textContent === 'Queued, 1st in line'", arg=badge.element_handle()
    )
    queue["position"] = None  # the queue does not say
    page.wait_for_function("el => el.textContent === 'Queued'", arg=badge.element_handle())

    item.get_by_role("button", name="Cancel waiting-train").click()
    page.locator(".jp-Dialog").last.get_by_role("button", name="Cancel job waiting-train").click()
    page.locator('.gpuhub-Job[data-job-id^="waiting-train-"][data-status="cancelled"]').wait_for()
    assert badge.inner_text() == "Cancelled"
    assert item.get_by_role("button", name="Cancel waiting-train").is_hidden()


def test_on_kubernetes_the_command_says_run_on_cluster(browser: Any, tmp_path: Any) -> None:
    """Kubernetes mode (GPUHUB_JOBS_URL set): jobs do run on a cluster, and say so."""
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", TRAIN, parameters="epochs = 1\nrate = 0.1")
    expose_lab_extension(tmp_path)
    env = {
        **policy_env(DESIGN_CONFIG, ["staff"]),
        "GPUHUB_JOBS_URL": "http://127.0.0.1:9/services/gpuhub/api",
        "JUPYTERHUB_API_TOKEN": "user-token",
        "JUPYTERHUB_USER": "ada",
        "GPUHUB_TEST_FORWARD_LOG": str(tmp_path / "forwarded.jsonl"),
    }
    backend = "tests.support.jupyter.recording_backend.RecordingBackend"
    config = f"c.GPUHubJobs.remote_backend_class = {backend!r}\n"
    with (
        jupyter_server(root, tmp_path, lab=True, env=env, config=config) as server,
        notebook_page(browser, server, "train.ipynb", "jobs-cluster") as page,
    ):
        toolbar = page.locator(".jp-NotebookPanel-toolbar").first
        page.wait_for_function(
            "el => el.textContent.includes('Run on cluster')", arg=toolbar.element_handle()
        )
        assert "Run as job" not in toolbar.inner_text()
        panel = jobs_panel(page)
        assert panel.get_by_role("button", name="Run on cluster…").is_visible()
