"""``%submit``, ``%%train``, ``%jobs`` and ``%job``: the jobs API from a notebook cell.

Every magic calls this kernel's own Jupyter server (:mod:`.jobs_client`), so what it may
ask for and the sentences it gets back are the server's, the same as the sidebar's.
"""

from __future__ import annotations

import html
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from gpuhub.core import words
from gpuhub.core.words import ordinal

from .jobs_client import JobsClient, JobsClientError

POLL_SECONDS = 1.0
STATUS_MARK = {
    "queued": "⋯",
    "pending": "…",
    "running": "▶",
    "succeeded": "✔",
    "failed": "✘",
    "cancelled": "■",
}


def status_words(job: dict[str, Any]) -> str:
    """A job's status as a person reads it: "queued, 3rd in line" while Kueue says where
    it waits (``queue_position``), else the status itself."""
    status = str(job.get("status", ""))
    position = job.get("queue_position")
    if status == "queued" and type(position) is int and position > 0:
        return f"queued, {ordinal(position)} in line"
    return status


def _job_options(func: Any) -> Any:
    """The options %submit and %%train share (docs/architecture.md)."""
    for decorator in reversed(
        [
            argument(
                "--kind",
                "-k",
                default=None,
                help="job (default), pytorchjob, tfjob, trainjob or pipeline: those offered here",
            ),
            argument("--gpus", "-g", default=None, help="GPUs (per worker)"),
            argument("--gpu-type", "-t", dest="gpu_type", default=None, help="GPU type key"),
            argument(
                "--gpu-memory",
                dest="gpu_memory",
                default=None,
                help="a share of one GPU's memory, such as 8G (GPU types shared by memory)",
            ),
            argument("--image", "-i", default=None, help="image key or custom image"),
            argument("--cpu", "-c", default=None, help="CPU cores, such as 4 or 500m"),
            argument("--memory", "-m", default=None, help="memory, such as 16G"),
            argument(
                "--workers",
                "-w",
                default=None,
                help="workers of a pytorchjob/tfjob (trainjob nodes)",
            ),
            argument(
                "--runtime",
                "-r",
                default=None,
                help="a trainjob's training runtime, one the admin offers (default: theirs)",
            ),
            argument("--name", "-n", default=None, help="job name (DNS-1123)"),
            argument(
                "-p",
                "--parameter",
                dest="parameters",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="papermill parameter; VALUE is read as JSON when it parses (-p lr=0.1)",
            ),
            argument("--wait", action="store_true", help="block until the job ends, with progress"),
        ]
    ):
        func = decorator(func)
    return func


def parse_args(magic: Any, line: str) -> Any:
    """``parse_argstring``, with an unbalanced quote a UsageError like any other typo."""
    try:
        return parse_argstring(magic, line)
    except ValueError as exc:  # shlex: "No closing quotation"
        raise UsageError(f"Cannot read the options: {exc}.") from None


def parse_parameters(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-p takes KEY=VALUE, such as -p epochs=10 (got {item!r}).")
        try:
            params[key] = json.loads(raw)
        except ValueError:
            params[key] = raw
        except RecursionError:
            raise UsageError(f"-p {key}: the value is nested too deeply.") from None
    return params


def request_body(args: Any, notebook: str) -> dict[str, Any]:
    body: dict[str, Any] = {"notebook": notebook}
    fields = (
        "kind",
        "gpus",
        "gpu_type",
        "gpu_memory",
        "image",
        "cpu",
        "memory",
        "workers",
        "runtime",
        "name",
    )
    for field in fields:
        value = getattr(args, field)
        if value is not None:
            body[field] = value
    for field in ("gpus", "workers"):
        value = body.get(field)
        # ASCII digits only: "²".isdigit() is true but it is no number; anything else goes
        # to the server as typed and comes back as its one-sentence refusal.
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
            body[field] = int(value)
    params = parse_parameters(args.parameters)
    if params:
        body["parameters"] = params
    return body


def train_notebook(code: str, depth: int) -> dict[str, Any]:
    """A notebook that runs ``code`` from the directory of the notebook it came from."""
    back = "/".join([".."] * depth) or "."
    cells = [
        {
            "cell_type": "code",
            "metadata": {"tags": ["gpuhub-setup"]},
            "source": f"# Generated by %%train: run from the notebook's own folder.\n"
            f"import os\nos.chdir({back!r})",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "source": "# parameters (set with -p NAME=VALUE)",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "metadata": {},
            "source": code,
            "outputs": [],
            "execution_count": None,
        },
    ]
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "gpuhub": {"generated_by": "%%train"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _elapsed(job: dict[str, Any]) -> str:
    seconds = job.get("elapsed")
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def _created(job: dict[str, Any]) -> str:
    try:
        when = datetime.fromisoformat(str(job["created"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return ""
    # gpuhub's one way to write a moment, in this kernel's machine's zone (as the lab's panel
    # writes it in the browser's): "27 Nov 2026, 01:26".
    return words.moment(when.astimezone())


class JobTable:
    """``%jobs``: an HTML table in JupyterLab, aligned text elsewhere."""

    COLUMNS = ("id", "kind", "status", "gpu", "elapsed", "created", "output")

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (
                str(j.get("id", "")),
                str(j.get("kind", "")),
                f"{STATUS_MARK.get(j.get('status', ''), '')} {status_words(j)}",
                str(j.get("gpu", "")),
                _elapsed(j),
                _created(j),
                str(j.get("url") or j.get("output") or ""),
            )
            for j in self.jobs
        ]

    @staticmethod
    def _failure(job: dict[str, Any]) -> str:
        """Why a failed job failed, for the line under its row ("" for any other job)."""
        if job.get("status") != "failed":
            return ""
        return str(job.get("error") or "The job failed; %job logs shows why.")

    @staticmethod
    def _estimate(job: dict[str, Any]) -> str:
        """When a job waiting for GPUs likely starts, in the hub's words, for the line under
        its row ("" for any other job)."""
        if job.get("status") not in ("queued", "pending"):
            return ""
        return str(job.get("estimate_text") or "")

    def __repr__(self) -> str:
        if not self.jobs:
            return "No jobs yet. Submit this notebook with %submit, or a cell with %%train."
        rows = self._rows()
        widths = [max(len(r[i]) for r in [self.COLUMNS, *rows]) for i in range(len(self.COLUMNS))]

        def line(row: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

        lines = [line(self.COLUMNS)]
        for job, row in zip(self.jobs, rows, strict=True):
            lines.append(line(row))
            if failure := self._failure(job):  # on its row's next line, not apart
                lines.append(f"  ↳ {failure}")
            if estimate := self._estimate(job):
                lines.append(f"  ↳ {estimate}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if not self.jobs:
            return f"<p>{html.escape(repr(self))}</p>"
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in self.COLUMNS)
        body = []
        for job, row in zip(self.jobs, self._rows(), strict=True):
            body.append(
                "<tr>"
                + "".join(f"<td style='text-align:left'>{html.escape(cell)}</td>" for cell in row)
                + "</tr>"
            )
            if failure := self._failure(job):
                body.append(
                    f"<tr class='gpuhub-jobs-failure'><td></td><td colspan='{len(row) - 1}' "
                    "style='text-align:left;color:var(--jp-error-color1,#c00)'>"
                    f"↳ {html.escape(failure)}</td></tr>"
                )
            if estimate := self._estimate(job):
                body.append(
                    f"<tr class='gpuhub-jobs-estimate'><td></td><td colspan='{len(row) - 1}' "
                    f"style='text-align:left'>↳ {html.escape(estimate)}</td></tr>"
                )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Progress:
    """A progress bar: an ipywidgets one where widgets work, a text line otherwise."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.widget: Any = None
        try:
            import ipywidgets
            from IPython.display import display

            self.bar = ipywidgets.IntProgress(value=0, min=0, max=1, description=job_id[:20])
            self.label = ipywidgets.Label("submitted")
            self.widget = ipywidgets.HBox([self.bar, self.label])
            display(self.widget)
        except Exception:  # no ipywidgets, or no frontend that can show them
            self.widget = None

    def update(self, job: dict[str, Any]) -> None:
        progress = job.get("progress") or {}
        done, total = int(progress.get("done", 0)), int(progress.get("total", 0))
        status = str(job.get("status", ""))
        text = f"{status_words(job)} {_elapsed(job)}".strip()
        if job.get("message"):
            text += f": {job['message']}"
        if self.widget is not None:
            self.bar.max = max(total, 1)
            self.bar.value = min(done, self.bar.max)
            self.bar.bar_style = {"succeeded": "success", "failed": "danger"}.get(status, "info")
            self.label.value = text
        else:
            bar = ""
            if total:
                filled = int(20 * done / total)
                bar = f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total} "
            sys.stdout.write(f"\r{self.job_id}: {bar}{text}"[:120].ljust(120))
            sys.stdout.flush()

    def close(self) -> None:
        if self.widget is None:
            sys.stdout.write("\n")


@magics_class
class JobMagics(Magics):
    """gpuhub's job magics (registered by ``%load_ext gpuhub_lab``)."""

    _client: JobsClient | None = None

    @property
    def client(self) -> JobsClient:
        if self._client is None:
            try:
                self._client = JobsClient()
            except JobsClientError as exc:
                raise UsageError(str(exc)) from None
        return self._client

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except JobsClientError as exc:
            raise UsageError(str(exc)) from None

    def _current_notebook(self) -> str:
        session = os.environ.get("JPY_SESSION_NAME", "")
        if not session.endswith(".ipynb"):
            raise UsageError(
                "This kernel does not know which notebook it runs; name it: %submit train.ipynb"
            )
        return self.client.relative_path(session)

    # -- %submit / %%train ----------------------------------------------------------------------
    @magic_arguments()
    @argument("notebook", nargs="?", default=None, help="notebook path (default: this notebook)")
    @_job_options
    @line_magic
    def submit(self, line: str) -> None:
        """Submit a notebook (by default this one, as saved) as a job.

        Without --gpus it gets the jobs API's default (1 GPU when you may have one and, on
        a cluster, when your quota, which your servers share, leaves one); the most you may
        ask for is what the Run as job dialog says.
        """
        args = parse_args(self.submit, line)
        notebook = args.notebook or self._current_notebook()
        if args.notebook is None:
            print(f"Submitting {notebook} as last saved (save first to include recent edits).")
        self._submit(request_body(args, notebook), wait=args.wait)

    @magic_arguments()
    @_job_options
    @cell_magic
    def train(self, line: str, cell: str) -> None:
        """Run this cell as a training job (written to a notebook under gpuhub-runs/train/)."""
        from gpuhub.jobs.paths import TRAIN_DIR  # not at the top: %load_ext stays fast

        args = parse_args(self.train, line)
        if not cell.strip():
            raise UsageError("%%train needs code in the cell below the magic.")
        folder = ""
        session = os.environ.get("JPY_SESSION_NAME", "")
        stem = "train"
        if session.endswith(".ipynb"):
            relative = self.client.relative_path(session)
            if not os.path.isabs(relative):
                folder = os.path.dirname(relative)
            stem = os.path.splitext(os.path.basename(relative))[0]
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        path = "/".join(p for p in (folder, TRAIN_DIR, f"{stem}-{stamp}.ipynb") if p)
        depth = len(TRAIN_DIR.split("/"))
        self._call("save_notebook", path, train_notebook(cell, depth))
        body = request_body(args, path)
        body.setdefault("name", _name_from(stem, suffix="train"))
        self._submit(body, wait=args.wait)

    def _submit(self, body: dict[str, Any], *, wait: bool) -> None:
        answer = self._call("submit", body)
        job = answer.get("job") or answer
        if answer.get("note"):  # no --gpus, and the quota leaves none: why it runs on CPU
            print(f"Note: {answer['note']}")
        if answer.get("warning"):  # -p on a notebook without a parameters cell: not applied
            print(f"Warning: {answer['warning']}", file=sys.stderr)
        print(
            f"Submitted {job['id']} ({job.get('kind', 'job')}, {job.get('gpu', '')}): "
            f"{status_words(job)}. Follow it with %jobs, %job logs {job['id']}."
        )
        if job.get("url"):
            print(f"Run page: {job['url']}")
        if wait:
            self._wait(job["id"])

    def _wait(self, job_id: str) -> dict[str, Any]:
        progress = _Progress(job_id)
        job: dict[str, Any] = {}
        try:
            while True:
                job = self._call("get", job_id)
                progress.update(job)
                if job.get("status") in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            progress.close()
            print(f"Stopped waiting; {job_id} keeps running (stop it with %job cancel {job_id}).")
            return job
        progress.close()
        self._report(job)
        return job

    @staticmethod
    def _report(job: dict[str, Any]) -> None:
        status = job.get("status")
        line = f"{job['id']} {status_words(job)}"
        if status == "queued" and job.get("message"):
            line += f" ({str(job['message']).rstrip('.')})"
        if job.get("elapsed") is not None:
            line += f" after {_elapsed(job)}"
        if job.get("output"):
            line += f"; output notebook: {job['output']}"
        print(line + ".")
        if estimate := JobTable._estimate(job):
            print(estimate)
        if status == "failed":
            print(job.get("error") or "The job failed.", file=sys.stderr)
            cell = job.get("failed_cell") or {}
            if cell.get("source"):
                print("Failing cell:\n" + str(cell["source"]), file=sys.stderr)

    # -- %jobs, %job ----------------------------------------------------------------------------
    @line_magic
    def jobs(self, line: str) -> JobTable:
        """List your jobs, newest first."""
        if line.strip():
            raise UsageError("%jobs takes no arguments; use %job logs ID or %job cancel ID.")
        return JobTable(self._call("list"))

    @magic_arguments()
    @argument("action", choices=("logs", "cancel", "status", "wait"), help="what to do")
    @argument("id", help="the job id, as %%jobs shows it")
    @argument("--tail", type=int, default=None, help="only the last N lines of the log")
    @line_magic
    def job(self, line: str) -> None:
        """%job logs ID [--tail N] | %job cancel ID | %job status ID | %job wait ID"""
        try:
            args = parse_args(self.job, line)
        except UsageError:
            raise UsageError(
                "Use %job logs ID, %job cancel ID, %job status ID or %job wait ID."
            ) from None
        if args.action == "logs":
            answer = self._call("logs", args.id, args.tail)
            text = answer.get("logs") or ""
            print(text if text else f"No log output from {args.id} yet.", end="" if text else "\n")
        elif args.action == "cancel":
            job = self._call("get", args.id)
            if job.get("status") in ("succeeded", "failed", "cancelled"):
                print(f"{job['id']} has already {job['status']}; nothing to cancel.")
                return
            job = self._call("cancel", args.id)
            print(
                f"Cancelled {job['id']}."
                if job.get("status") == "cancelled"
                else f"{job['id']} is {status_words(job)}."
            )
        elif args.action == "status":
            self._report(self._call("get", args.id))
        else:
            self._wait(args.id)


def _name_from(stem: str, suffix: str) -> str:
    import re

    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:40].strip("-")
    return f"{slug}-{suffix}" if slug else suffix


def register(ipython: Any) -> None:
    ipython.register_magics(JobMagics)
