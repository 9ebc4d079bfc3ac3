"""The process a local job runs: ``python -P .../gpuhub/jobs/run_notebook.py SPEC.json``.

It executes the notebook with papermill (parameters injected, cell output logged to
stderr, which the backend captures as the job's log) and reports through two small files
in the run directory, written atomically so the server can read them at any time, even
after a restart:

* ``progress.json``: ``{"done", "total"}`` cells, updated as each cell starts and ends;
* ``result.json``: ``{"status": "succeeded"|"failed", "error", "failed_cell", "finished"}``.

The exit code is a fallback only; the result file is the truth.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours in IPython tracebacks
MAX_SOURCE = 2000  # characters of the failing cell's source kept in the result

INJECTED = "injected-parameters"  # papermill's tag on the cell it adds


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


def run(spec: dict[str, Any]) -> int:
    import nbformat
    import papermill
    from papermill.engines import papermill_engines
    from papermill.exceptions import PapermillExecutionError

    papermill_engines.register("gpuhub", _engine(spec["progress"]))
    kernel_name = None
    nb = nbformat.read(spec["input"], as_version=4)
    if not nb.metadata.get("kernelspec", {}).get("name"):
        kernel_name = "python3"  # papermill refuses a notebook without one
    try:
        papermill.execute_notebook(
            spec["input"],
            spec["output"],
            parameters=spec.get("parameters") or None,
            engine_name="gpuhub",
            kernel_name=kernel_name,
            cwd=spec["cwd"],
            log_output=True,
            progress_bar=False,
        )
    except PapermillExecutionError as exc:
        where = _failed_where(spec["output"], exc.cell_index)
        evalue = str(exc.evalue).strip().splitlines()[0][:300] if str(exc.evalue).strip() else ""
        error = f"The notebook failed in {where}: {exc.ename}: {evalue}".rstrip(": ") + "."
        traceback = _ANSI.sub("", "\n".join(exc.traceback))
        logging.getLogger("gpuhub.jobs").error("%s\n%s", error, traceback)
        write_json(
            spec["result"],
            {
                "status": "failed",
                "error": error,
                "failed_cell": {
                    "index": exc.cell_index,
                    "execution_count": exc.exec_count,
                    "source": exc.source[:MAX_SOURCE],
                    "ename": exc.ename,
                    "evalue": str(exc.evalue)[:MAX_SOURCE],
                },
                "finished": _now(),
            },
        )
        return 1
    except Exception as exc:  # kernel died, notebook unreadable, ...: still one sentence
        logging.getLogger("gpuhub.jobs").exception("papermill could not run the notebook")
        message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        write_json(
            spec["result"],
            {
                "status": "failed",
                "error": f"The notebook could not run: {type(exc).__name__}: {message}".rstrip(": ")
                + ".",
                "failed_cell": None,
                "finished": _now(),
            },
        )
        return 1
    write_json(
        spec["result"],
        {"status": "succeeded", "error": None, "failed_cell": None, "finished": _now()},
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -P run_notebook.py SPEC.json", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S"
    )
    with open(argv[0]) as f:
        spec = json.load(f)
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
