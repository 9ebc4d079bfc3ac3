"""What every job runs: papermill on the notebook, then a report of how it went.

One runner for every place a job runs, reporting the way that place can be read back:

* **A local job**: ``python -P .../gpuhub/jobs/run_notebook.py SPEC.json``. The spec names
  the notebook, the output, the working directory, the parameters and two files in the run
  directory, written atomically so the server can read them at any time, even after a
  restart:

  - ``progress.json``: ``{"done", "total"}`` cells, updated as each cell starts and ends;
  - ``result.json``: ``{"status": "succeeded"|"failed", "error", "failed_cell", "finished"}``.

  The exit code is a fallback only; the result file is the truth.

* **A Kubernetes job pod** (and a pipeline step): no argument; the environment says what to
  run. The file is shipped to the pod in the job's ConfigMap (``run.py``) and run as
  ``python /var/run/gpuhub/run.py``, or embedded in a pipeline step's ``python -c``
  (:func:`gpuhub.jobs.pipeline.step_script`), so the job image needs Python and papermill
  only, not gpuhub (custom images work). It therefore imports nothing from gpuhub.

  ``GPUHUB_INPUT``        the notebook to run
  ``GPUHUB_OUTPUT``       where to write the executed notebook
  ``GPUHUB_PARAMETERS``   a JSON file of papermill parameters
  ``GPUHUB_CWD``          the working directory of the kernel
  ``GPUHUB_PRINT_OUTPUT`` "1": also print the executed notebook to stdout between markers,
                          because without a shared home volume the pod's log is the only way
                          back (read by :func:`gpuhub.jobs.k8s.status.parse_pod_log`).
  ``GPUHUB_SECONDARY_OUTPUT`` (a TrainJob, whose nodes share one pod template): on a node
                          whose rank (``PET_NODE_RANK``, else ``JOB_COMPLETION_INDEX``) is not
                          0, the executed notebook goes here instead and is not printed.

  It always prints one result line, ``gpuhub-result: {json}`` with ``status``, ``error`` and
  ``failed_cell``, and exits 0 on success, 1 when the notebook failed.

Either way papermill logs each cell's output to stderr: that is the job's log. A failure is
one sentence naming the user's cell (papermill's injected parameters cell not counted), with
the traceback, without colours, in the log.

:func:`write_json` is also the atomic write of the backends that run on the user's server:
it has its home here because this file may import nothing from gpuhub.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import re
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULT_PREFIX = "gpuhub-result: "
OUTPUT_BEGIN = "==== gpuhub: executed notebook (gzip, base64) begins ===="
OUTPUT_END = "==== gpuhub: executed notebook ends ===="
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours in IPython tracebacks
MAX_SOURCE = 2000  # characters of the failing cell's source kept in the result
ERROR_LINES = 8  # the error's last lines kept in the result: where it was raised, and what
# A last line such as "UsageError: Line magic function `%jobs` not found.": what the kernel said.
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)):\s*(.*)$")

INJECTED = "injected-parameters"  # papermill's tag on the cell it adds
# The kernel of a notebook that names none: jupyter_client's own (NATIVE_KERNEL_NAME), the
# Python that ipykernel installs in every job image.
DEFAULT_KERNEL = "python3"
# "1" in the environment of a process that does no GPU work itself (a Jupyter server, this
# runner): simulated GPUs do not count it (gpuhub.core.simulated). Each takes it out of its own
# environment at start, so what it starts (the job's kernel) counts again.
MACHINERY_ENV = "GPUHUB_SIMULATED_MACHINERY"

log = logging.getLogger("gpuhub.jobs")


def _is_injected(cell: Any) -> bool:
    return INJECTED in (cell.get("metadata", {}).get("tags") or [])


def user_cell_number(cells: list[Any], index: int) -> int:
    """1-based number of executed cell ``index`` among the cells the user wrote: papermill's
    injected parameters cell is not one of them, so it is not counted."""
    return 1 + sum(1 for cell in cells[:index] if not _is_injected(cell))


def _failed_where(output: str, cell_index: int) -> str:
    """ "cell 4", numbered as in the user's notebook (read from papermill's output copy)."""
    try:
        import nbformat

        cells = nbformat.read(output, as_version=4).cells
    except Exception:
        return f"cell {cell_index + 1}"
    return f"cell {user_cell_number(cells, cell_index)}"


def _last_lines(text: str) -> str:
    """The last ``ERROR_LINES`` non-blank lines of ``text``, without colours."""
    lines = [line.rstrip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    return "\n".join(lines[-ERROR_LINES:])[-MAX_SOURCE:]


def _stderr_of(output: str, exec_count: int | None, source: str) -> str:
    """What the failing cell wrote to stderr, from papermill's output copy (a magic's
    ``UsageError`` is shown there, not as an error output)."""
    try:
        import nbformat

        cells = nbformat.read(output, as_version=4).cells
    except Exception:
        return ""
    for cell in cells:
        if cell.get("cell_type") != "code" or cell.get("source") != source:
            continue
        if exec_count is not None and cell.get("execution_count") != exec_count:
            continue
        return "".join(
            str(o.get("text", ""))
            for o in cell.get("outputs", [])
            if o.get("output_type") == "stream" and o.get("name") == "stderr"
        )
    return ""


def describe_failure(exc: Any, output: str) -> tuple[str, str, str]:
    """``(ename, evalue, error_lines)`` of papermill's ``PapermillExecutionError``.

    An exception raised in a cell comes with its traceback. A cell the kernel refused without
    one (a magic's ``UsageError``: papermill then says only "CellExecutionError") is read from
    what the cell wrote to stderr, whose last ``Name: message`` line names the error.
    """
    if exc.traceback:
        return exc.ename, str(exc.evalue), _last_lines("\n".join(exc.traceback))
    lines = _last_lines(_stderr_of(output, exc.exec_count, exc.source))
    for line in reversed(lines.splitlines()):
        found = _ERROR_LINE.match(line.strip())
        if found:
            return found.group(1), found.group(2), lines
    if lines:
        return "Error", lines.splitlines()[-1].strip(), lines
    return exc.ename, str(exc.evalue), lines


def _first_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:300] if lines else ""


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (temp file + rename), so readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _engine(progress_path: str) -> type:
    """papermill's nbclient engine, reporting per-cell progress to ``progress_path``."""
    from papermill.engines import NBClientEngine

    class ProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
            # Counted as the user sees their notebook: without papermill's injected cell.
            cells = nb_man.nb.cells
            total = sum(1 for cell in cells if not _is_injected(cell))
            start, complete = nb_man.cell_start, nb_man.cell_complete

            def report(done: int) -> None:
                write_json(progress_path, {"done": done, "total": total})

            def cell_start(cell: Any, cell_index: int | None = None, **kw: Any) -> Any:
                report(user_cell_number(cells, cell_index or 0) - 1)
                return start(cell, cell_index, **kw)

            def cell_complete(cell: Any, cell_index: int | None = None, **kw: Any) -> Any:
                result = complete(cell, cell_index, **kw)
                report(user_cell_number(cells, (cell_index or 0) + 1) - 1)
                return result

            nb_man.cell_start, nb_man.cell_complete = cell_start, cell_complete
            report(0)
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    return ProgressEngine


def kernel_of(metadata: Any) -> tuple[str | None, str | None]:
    """papermill's ``kernel_name`` and ``language`` for a notebook with this metadata: None
    for what the notebook says itself. A notebook written by a tool rather than by Jupyter
    may name no kernel and no language, which papermill refuses: it runs on the default
    kernel (:data:`DEFAULT_KERNEL`), in that kernel's language."""
    metadata = metadata if isinstance(metadata, dict) else {}
    spec = metadata.get("kernelspec")
    spec = spec if isinstance(spec, dict) else {}
    info = metadata.get("language_info")
    info = info if isinstance(info, dict) else {}
    named = spec.get("name") if isinstance(spec.get("name"), str) and spec["name"] else None
    kernel = None if named else DEFAULT_KERNEL
    said = spec.get("language") or info.get("name")
    if isinstance(said, str) and said:
        return kernel, None
    return kernel, _language_of(named or DEFAULT_KERNEL)


def _language_of(kernel: str) -> str | None:
    """The language of an installed kernel (its kernel.json), None when it is not installed;
    the default kernel is Python's, installed or not (papermill then names the problem)."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        language = KernelSpecManager().get_kernel_spec(kernel).language
    except Exception:  # no such kernel, unreadable spec: papermill says so when it starts it
        language = None
    if not language and kernel == DEFAULT_KERNEL:
        return "python"
    return str(language) if language else None


def execute(
    source: str,
    output: str,
    *,
    parameters: dict[str, Any] | None = None,
    cwd: str | None = None,
    progress: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run the notebook; the exit code and the result (``status``, ``error``,
    ``failed_cell``). With ``progress``, per-cell progress is written to that file."""
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    engine_name = None
    if progress is not None:
        from papermill.engines import papermill_engines

        papermill_engines.register("gpuhub", _engine(progress))
        engine_name = "gpuhub"
    nb = nbformat.read(source, as_version=4)
    kernel_name, language = kernel_of(nb.metadata)
    try:
        papermill.execute_notebook(
            source,
            output,
            parameters=parameters or None,
            engine_name=engine_name,
            kernel_name=kernel_name,
            language=language,
            cwd=cwd,
            log_output=True,
            progress_bar=False,
        )
    except PapermillExecutionError as exc:
        where = _failed_where(output, exc.cell_index)
        ename, evalue, lines = describe_failure(exc, output)
        error = f"The notebook failed in {where}: {ename}: {_first_line(evalue)}"
        error = error.rstrip(": ") + ("" if error.rstrip().endswith(".") else ".")
        log.error("%s\n%s", error, _ANSI.sub("", "\n".join(exc.traceback)) or lines)
        return 1, {
            "status": "failed",
            "error": error,
            "failed_cell": {
                "index": exc.cell_index,
                "execution_count": exc.exec_count,
                "source": exc.source[:MAX_SOURCE],
                "ename": ename,
                "evalue": evalue[:MAX_SOURCE],
                "error_lines": lines,
            },
        }
    except Exception as exc:  # kernel died, notebook unreadable, ...: still one sentence
        log.exception("papermill could not run the notebook")
        error = f"The notebook could not run: {type(exc).__name__}: {_first_line(exc)}"
        error = error.rstrip(": ")
        return 1, {
            "status": "failed",
            "error": error if error.endswith(".") else error + ".",
            "failed_cell": None,
        }
    return 0, {"status": "succeeded", "error": None, "failed_cell": None}


# -- a local job: a spec file in, files out --------------------------------------------------
def run(spec: dict[str, Any]) -> int:
    code, result = execute(
        spec["input"],
        spec["output"],
        parameters=spec.get("parameters"),
        cwd=spec["cwd"],
        progress=spec["progress"],
    )
    write_json(spec["result"], {**result, "finished": _now()})
    return code


# -- a pod: the environment in, the log out -------------------------------------------------
def print_output(path: str) -> None:
    """Print the notebook at ``path`` as gzip+base64 lines between the markers."""
    with open(path, "rb") as f:
        encoded = base64.b64encode(gzip.compress(f.read())).decode("ascii")
    out = sys.stdout
    out.write("\n" + OUTPUT_BEGIN + "\n")
    for start in range(0, len(encoded), 76):
        out.write(encoded[start : start + 76] + "\n")
    out.write(OUTPUT_END + "\n")
    out.flush()


def node_rank(environ: dict[str, str]) -> str:
    """This pod's node rank in a TrainJob ("0" where nothing says otherwise)."""
    return environ.get("PET_NODE_RANK") or environ.get("JOB_COMPLETION_INDEX") or "0"


def run_pod(environ: dict[str, str]) -> int:
    source, output = environ["GPUHUB_INPUT"], environ["GPUHUB_OUTPUT"]
    secondary = environ.get("GPUHUB_SECONDARY_OUTPUT")
    if secondary and node_rank(environ) != "0":
        environ = {**environ, "GPUHUB_PRINT_OUTPUT": "0"}
        output = secondary
    parameters: dict[str, Any] = {}
    if environ.get("GPUHUB_PARAMETERS") and os.path.exists(environ["GPUHUB_PARAMETERS"]):
        with open(environ["GPUHUB_PARAMETERS"]) as f:
            parameters = json.load(f)
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    code, result = execute(
        source, output, parameters=parameters, cwd=environ.get("GPUHUB_CWD") or None
    )
    if environ.get("GPUHUB_PRINT_OUTPUT") == "1" and os.path.exists(output):
        print_output(output)
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    """One argument: a local job's spec file. None: a pod's (or a pipeline step's, whose
    boot code has read its arguments into the environment) ``GPUHUB_*`` variables."""
    argv = sys.argv[1:] if argv is None else argv
    os.environ.pop(MACHINERY_ENV, None)  # the kernel papermill starts does the GPU work
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S"
    )
    if len(argv) == 1:
        with open(argv[0]) as f:
            return run(json.load(f))
    if "GPUHUB_INPUT" in os.environ:
        return run_pod(dict(os.environ))
    print(
        "usage: python -P run_notebook.py SPEC.json, or GPUHUB_INPUT=... python run_notebook.py",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
