"""The job magics in a real IPython kernel started by a real Jupyter server."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from jupyter_client import BlockingKernelClient, KernelManager

from harness.jupyter.server import SOURCE_PATHS, JupyterServer, jupyter_server
from tests.support.jupyter.kernel import Output, ready_kernel_client, run
from tests.support.jupyter.notebooks import read_outputs, write_notebook

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[JupyterServer]:
    tmp = tmp_path_factory.mktemp("magics")
    root = tmp / "home"
    write_notebook(root / "exp" / "demo.ipynb", "print('the notebook the kernel runs')")
    write_notebook(
        root / "exp" / "train.ipynb",
        "import os\nprint('lr', lr, 'gpus', repr(os.environ['CUDA_VISIBLE_DEVICES']))",
        parameters="lr = 0.5",
    )
    write_notebook(root / "exp" / "broken.ipynb", "raise RuntimeError('out of memory <oops>')")
    write_notebook(root / "exp" / "long.ipynb", "import time\ntime.sleep(300)")
    # A job that uses the magics itself: every kernel loads them, a job's too, and they
    # reach this server from the job.
    write_notebook(root / "exp" / "magics.ipynb", "%jobs", "%gpu")
    write_notebook(root / "exp" / "bad-magic.ipynb", "x = 1", "%job frobnicate x")
    with jupyter_server(root, tmp, env={"CUDA_VISIBLE_DEVICES": "3"}) as server:
        yield server


@pytest.fixture(scope="module")
def kernel(server: JupyterServer) -> Iterator[BlockingKernelClient]:
    """A kernel the server started for exp/demo.ipynb, as JupyterLab would."""
    session = server.api(
        "POST",
        "api/sessions",
        json={"path": "exp/demo.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    ).json()
    client = ready_kernel_client(server.runtime_dir / f"kernel-{session['kernel']['id']}.json")
    loaded = run(client, "%load_ext gpuhub_lab")
    assert loaded.error is None and not loaded.stderr.strip(), loaded
    yield client
    client.stop_channels()
    server.api("DELETE", f"api/sessions/{session['id']}")


def job_id(output: Output) -> str:
    found = re.search(r"Submitted (\S+) ", output.stdout)
    assert found, output
    return found.group(1)


def test_submit_and_wait(server, kernel):
    out = run(kernel, "%submit exp/train.ipynb -p lr=0.25 --gpus 1 --wait")
    assert out.error is None, out
    ident = job_id(out)
    assert f"{ident} succeeded" in out.stdout
    output = re.search(r"output notebook: (\S+)\.\n", out.stdout)
    assert output, out
    assert "lr 0.25 gpus '3'" in read_outputs(server.root / output.group(1))
    assert any("IntProgress" in p for p in out.plain)  # the widget progress bar was shown


def test_submit_defaults_to_this_notebook(kernel):
    out = run(kernel, "%submit --wait")
    assert "Submitting exp/demo.ipynb as last saved" in out.stdout
    assert "succeeded" in out.stdout


def test_refusals_are_the_servers_sentences(kernel):
    for line, message in [
        ("%submit ../outside.ipynb", 'Notebook "../outside.ipynb" is outside this server\'s root'),
        ("%submit exp/train.ipynb --gpus 2", "at most 1"),
        ("%submit exp/train.ipynb --kind tfjob", "not connected to one"),
        ("%submit exp/train.ipynb --name Bad_Name", "lower-case letters"),
        ("%submit exp/train.ipynb -p novalue", "-p takes KEY=VALUE"),
        ("%job logs nope-123", 'There is no job "nope-123" among your jobs.'),
        ("%job frobnicate x", "Use %job logs ID"),
    ]:
        out = run(kernel, line)
        assert "UsageError" in out.stderr and message in out.stderr, (line, out)
        assert "Traceback" not in out.stderr


def test_failed_job_shows_the_failing_cell(kernel):
    out = run(kernel, "%submit exp/broken.ipynb --wait")
    assert "failed" in out.stdout
    assert "RuntimeError: out of memory <oops>." in out.stderr
    assert "Failing cell:\nraise RuntimeError" in out.stderr
    # %jobs says why on the failed job's own row (the next line), not apart from it.
    ident = job_id(out)
    table = run(kernel, "%jobs")
    lines = "".join(table.plain).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(ident))
    assert lines[row + 1].strip().startswith("↳ The notebook failed in cell 2: RuntimeError")
    html = "".join(table.html)
    assert re.search(
        rf"<td[^>]*>{re.escape(ident)}</td>.*?</tr><tr class='gpuhub-jobs-failure'>"
        r"<td></td><td[^>]*>↳ The notebook failed in cell 2",
        html,
    ), html
    assert "out of memory &lt;oops&gt;" in html and "<oops>" not in html  # escaped


def test_a_job_uses_the_magics_and_reports_a_magics_error(server, kernel):
    """In a job's kernel the magics are loaded and reach this server (%jobs lists the job
    itself); a magic's error (a UsageError, which papermill reports only as
    "CellExecutionError") comes back as what the kernel said."""
    out = run(kernel, "%submit exp/magics.ipynb --wait --gpus 0")
    assert "succeeded" in out.stdout, out
    ident = job_id(out)
    executed = read_outputs(server.root / "exp" / "gpuhub-runs" / ident / f"{ident}.ipynb")
    assert ident in executed and "running" in executed, executed
    failed = run(kernel, "%submit exp/bad-magic.ipynb --wait --gpus 0")
    assert "failed" in failed.stdout
    assert "The notebook failed in cell 3: UsageError: Use %job logs ID" in failed.stderr
    job = server.api("GET", f"gpuhub/api/jobs/{job_id(failed)}").json()
    cell = job["failed_cell"]
    assert cell["ename"] == "UsageError" and cell["source"] == "%job frobnicate x"
    assert cell["error_lines"].endswith(
        "Use %job logs ID, %job cancel ID, %job status ID or %job wait ID."
    )


def test_train_cell_runs_from_the_notebooks_folder(server, kernel):
    out = run(
        kernel,
        "%%train --wait -p epochs=2\nimport os\nprint('training', epochs, 'in', os.getcwd())",
    )
    assert out.error is None, out
    ident = job_id(out)
    assert ident.startswith("demo-train-") and f"{ident} succeeded" in out.stdout
    generated = list((server.root / "exp" / "gpuhub-runs" / "train").glob("demo-*.ipynb"))
    assert len(generated) == 1
    logs = run(kernel, f"%job logs {ident}").stdout
    assert f"training 2 in {server.root / 'exp'}" in logs
    # No runs inside runs: the result sits with the other runs of this folder.
    assert (server.root / "exp" / "gpuhub-runs" / ident / f"{ident}.ipynb").is_file()
    assert not re.search(r"-{8,}$", logs, re.MULTILINE)  # no papermill rulers


def test_jobs_table_and_cancel(kernel):
    started = run(kernel, "%submit exp/long.ipynb --name long-one")
    ident = job_id(started)
    table = run(kernel, "%jobs")
    assert table.error is None
    plain = "".join(table.plain)
    assert plain.splitlines()[0].split() == [
        "id",
        "kind",
        "status",
        "gpu",
        "elapsed",
        "created",
        "output",
    ]
    # Only this test's own job: the module's other tests may run before or after it.
    assert ident in plain
    # Its id has the one shape of every job id, and its creation time is written gpuhub's
    # one way, in this machine's zone (the kernel's): "27 Nov 2026, 01:26".
    assert re.fullmatch(r"long-one-[0-9a-f]{6}", ident), ident
    [row] = [line for line in plain.splitlines() if line.startswith(ident)]
    shown = run(
        kernel,
        "from datetime import datetime\n"
        "from gpuhub.core import words\n"
        f"job = [j for j in __import__('gpuhub_lab.jobs_client').jobs_client.JobsClient()"
        f".list() if j['id'] == {ident!r}][0]\n"
        "when = datetime.fromisoformat(job['created'].replace('Z', '+00:00'))\n"
        "print(words.moment(when.astimezone()))",
    )
    assert shown.error is None, shown
    moment = shown.stdout.strip()
    assert re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d", moment), moment
    assert moment in row, (moment, row)
    assert "<table>" in table.html[0] and f">{ident}</td>" in table.html[0]
    assert f"Cancelled {ident}." in run(kernel, f"%job cancel {ident}").stdout
    assert "nothing to cancel" in run(kernel, f"%job cancel {ident}").stdout
    assert f"{ident} cancelled" in run(kernel, f"%job status {ident}").stdout


def test_outside_a_jupyter_server_the_magics_say_so(tmp_path):
    manager = KernelManager(kernel_name="python3")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(SOURCE_PATHS),
    }
    manager.start_kernel(cwd=str(tmp_path), env=env)
    client = manager.blocking_client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        run(client, "%load_ext gpuhub_lab")
        out = run(client, "%submit train.ipynb")
        assert "UsageError" in out.stderr
        assert "is not a running Jupyter server" in out.stderr
        assert "Traceback" not in out.stderr
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_help_shows_the_usage_once() -> None:
    """``%submit?`` prints the docstring: magic_arguments writes the usage; it must not be
    written a second time by hand."""
    from gpuhub_lab.jobs_magics import JobMagics

    for name, magic in (("%submit", JobMagics.submit), ("%train", JobMagics.train)):
        doc = magic.__doc__ or ""
        assert doc.count(f"{name} [") == 1, doc


def test_submit_takes_a_trainjob_runtime() -> None:
    """``%submit --kind trainjob --runtime NAME``: the runtime goes to the server as typed,
    which accepts only one the admin offers (tests/jobs/test_jobs_trainjob.py)."""
    from gpuhub_lab.jobs_magics import JobMagics, parse_args, request_body

    args = parse_args(
        JobMagics.submit, "--kind trainjob -w 2 -g 1 --runtime torch-distributed x.ipynb"
    )
    body = request_body(args, "x.ipynb")
    assert body["kind"] == "trainjob" and body["runtime"] == "torch-distributed"
    assert body["workers"] == 2
    assert "runtime" not in request_body(parse_args(JobMagics.submit, "x.ipynb"), "x.ipynb")
