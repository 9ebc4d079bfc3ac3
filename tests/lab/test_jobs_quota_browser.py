"""A student's cluster job when their server holds their whole GPU quota (issue 31, item 7).

A real JupyterHub with gpuhub's ledger endpoints and a quota of one GPU; bob's server holds
that GPU. His server runs in Kubernetes mode, its hub-service client recording what it
would forward (tests/support/jupyter/recording_backend.py): the options, the REST API, the
magics and the dialog in Chromium are the real ones, and the quota is the hub's. Servers and
jobs share the quota, so a job started from the defaults gets no GPU, and each of them says
why instead of filling in one GPU that the jobs service would refuse.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from harness.hub.process import Hub, spawn, start_hub, wait_ready
from harness.jupyter.server import SOURCE_PATHS, expose_lab_extension
from tests.support.browser.chromium import artifact, chromium
from tests.support.hub.local import LOCAL_HUB_CONFIG, server_kernel, token_for, user_api
from tests.support.jupyter.kernel import run
from tests.support.jupyter.notebooks import write_notebook

pytestmark = pytest.mark.browser

SAID = "Your server holds your 1 GPU: this job runs without one, or stop the server first."
BACKEND = "tests.support.jupyter.recording_backend.RecordingBackend"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    workdir = tmp_path_factory.mktemp("jobs-quota")
    home = workdir / "users" / "bob"
    write_notebook(home / "train.ipynb", "print('training')", parameters="epochs = 1")
    expose_lab_extension(workdir)  # the extension just built, as tests/support/hub/demo.py
    environment = {
        "JUPYTER_CONFIG_DIR": str(workdir / "config"),
        "JUPYTER_DATA_DIR": str(workdir / "data"),
        "JUPYTER_PREFER_ENV_PATH": "0",
        "GPUHUB_JOBS_URL": "http://127.0.0.1:9/services/gpuhub/",
        "GPUHUB_TEST_FORWARD_LOG": str(workdir / "forwarded.jsonl"),
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        "PYTHONPATH": os.pathsep.join(SOURCE_PATHS),
    }
    config = (
        LOCAL_HUB_CONFIG
        + f"""
from gpuhub.hub.web.api import configure_hub
configure_hub(c)
c.LocalGPUSpawner.gpu_quota = {{"default": 1}}
c.LocalGPUSpawner.home_dir_template = {str(workdir / "users" / "{username}")!r}
c.Spawner.environment = {environment!r}
c.Spawner.args = ["--GPUHubJobs.remote_backend_class={BACKEND}"]
"""
    )
    running = start_hub(workdir, config)
    try:
        assert spawn(running, "bob", {"gpus": 1}).status_code in (201, 202)
        wait_ready(running, "bob", timeout=120)
        yield running
    finally:
        running.api("DELETE", "/users/bob/server")
        running.stop()


def forwarded(hub: Hub) -> list[dict[str, Any]]:
    """The bodies bob's server forwarded to the (recording) hub service, in order."""
    log = hub.workdir / "forwarded.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["body"] for line in lines]


def test_the_api_and_submit_start_from_what_the_quota_leaves(hub: Hub) -> None:
    bob = token_for(hub, "bob")
    assert hub.api("GET", "/gpuhub/holdings/bob").json()["held"] == 1
    options = user_api(hub, "bob", bob, "GET", "/options").json()
    assert options["kubernetes"] is True and options["max_gpus"] == 1
    assert options["defaults"]["gpus"] == 0
    assert options["quota"] == {"left": 0, "note": SAID}

    before = len(forwarded(hub))
    created = user_api(hub, "bob", bob, "POST", "", json={"notebook": "train.ipynb"})
    assert created.status_code == 201, created.text
    assert created.json()["note"] == SAID
    assert created.json()["job"]["gpus"] == 0
    assert forwarded(hub)[before]["gpus"] == 0
    # Asked for outright, the GPU is asked for (and the jobs service judges the quota).
    asked = user_api(hub, "bob", bob, "POST", "", json={"notebook": "train.ipynb", "gpus": 1})
    assert asked.status_code == 201 and "note" not in asked.json()
    assert forwarded(hub)[before + 1]["gpus"] == 1


def test_submit_says_why_the_job_gets_no_gpu(hub: Hub) -> None:
    client = server_kernel(hub, "bob", "train.ipynb")
    try:
        client.wait_for_ready(timeout=90)
        run(client, "%load_ext gpuhub_lab")
        out = run(client, "%submit")
        assert out.error is None, out
        assert f"Note: {SAID}" in out.stdout, out
        assert forwarded(hub)[-1]["gpus"] == 0
        # With --gpus the user chose: no note.
        out = run(client, "%submit --gpus 0")
        assert "Note:" not in out.stdout, out
    finally:
        client.stop_channels()


def test_the_dialog_fills_in_no_gpu_and_says_why(hub: Hub) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        try:
            hub.log_in_browser(page, "bob")
            page.goto(f"{hub.url}/user/bob/lab/workspaces/quota/tree/train.ipynb")
            page.locator(".jp-NotebookPanel-toolbar").first.wait_for(timeout=120_000)
            page.locator('.jp-NotebookPanel-toolbar [data-command="gpuhub:run-on-cluster"]').click()
            dialog = page.locator(".gpuhub-JobDialog")
            form = dialog.locator(".gpuhub-JobForm")
            form.wait_for()
            gpus = form.get_by_label("GPUs", exact=True)
            assert gpus.input_value() == "0"
            help_line = form.locator(f"#{gpus.get_attribute('id')}-help")
            assert help_line.inner_text() == SAID
            quota = form.locator(".gpuhub-JobForm-quota")
            quota.get_by_text("You hold 1 of your 1 GPU.").wait_for()
            page.screenshot(path=str(artifact("jobs-quota-dialog.png")))
            before = len(forwarded(hub))
            dialog.get_by_role("button", name="Submit job").click()
            dialog.wait_for(state="detached")
            assert forwarded(hub)[before]["gpus"] == 0
        except BaseException:
            page.screenshot(path=str(artifact("jobs-quota-dialog-failure.png")))
            raise
