"""What a Kubernetes job pod runs: papermill on the notebook, result and output in the log.

This file is shipped to the pod in the job's ConfigMap (``run.py``) and run as
``python /var/run/gpuhub/run.py``, so the job image needs Python and papermill only, not
gpuhub (custom images work). It therefore imports nothing from gpuhub.

Environment (set by :mod:`gpuhub.jobs.k8s.manifests`):

``GPUHUB_INPUT``       the notebook to run
``GPUHUB_OUTPUT``      where to write the executed notebook
``GPUHUB_PARAMETERS``  a JSON file of papermill parameters
``GPUHUB_CWD``         the working directory of the kernel
``GPUHUB_PRINT_OUTPUT`` "1": also print the executed notebook to stdout between markers,
                       because without a shared home volume the pod's log is the only way
                       back (read by :func:`gpuhub.jobs.k8s.status.parse_pod_log`).

It always prints one result line, ``gpuhub-result: {json}`` with ``status``, ``error`` and
``failed_cell``, and exits 0 on success, 1 when the notebook failed.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import re
import sys
from typing import Any

RESULT_PREFIX = "gpuhub-result: "
OUTPUT_BEGIN = "==== gpuhub: executed notebook (gzip, base64) begins ===="
OUTPUT_END = "==== gpuhub: executed notebook ends ===="
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_SOURCE = 2000


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


def _first_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:300] if lines else ""


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


def run(environ: dict[str, str]) -> tuple[int, dict[str, Any]]:
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    source, output = environ["GPUHUB_INPUT"], environ["GPUHUB_OUTPUT"]
    parameters: dict[str, Any] = {}
    if environ.get("GPUHUB_PARAMETERS") and os.path.exists(environ["GPUHUB_PARAMETERS"]):
        with open(environ["GPUHUB_PARAMETERS"]) as f:
            parameters = json.load(f)
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    nb = nbformat.read(source, as_version=4)
    kernel_name = None if nb.metadata.get("kernelspec", {}).get("name") else "python3"
    try:
        papermill.execute_notebook(
            source,
            output,
            parameters=parameters or None,
            kernel_name=kernel_name,
            cwd=environ.get("GPUHUB_CWD") or None,
            log_output=True,
            progress_bar=False,
        )
    except PapermillExecutionError as exc:
        where = _failed_where(output, exc.cell_index)
        error = f"The notebook failed in {where}: {exc.ename}: {_first_line(exc.evalue)}"
        print(_ANSI.sub("", "\n".join(exc.traceback)), file=sys.stderr)
        return 1, {
            "status": "failed",
            "error": error.rstrip(": ") + ".",
            "failed_cell": {
                "index": exc.cell_index,
                "execution_count": exc.exec_count,
                "source": exc.source[:MAX_SOURCE],
                "ename": exc.ename,
                "evalue": str(exc.evalue)[:MAX_SOURCE],
            },
        }
    except Exception as exc:  # kernel died, notebook unreadable, ...: still one sentence
        error = f"The notebook could not run: {type(exc).__name__}: {_first_line(exc)}"
        print(f"papermill could not run the notebook: {exc!r}", file=sys.stderr)
        return 1, {"status": "failed", "error": error.rstrip(": ") + ".", "failed_cell": None}
    return 0, {"status": "succeeded", "error": None, "failed_cell": None}


def main() -> int:
    # papermill logs each cell's output (log_output=True): that is the job's log.
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S"
    )
    environ = dict(os.environ)
    code, result = run(environ)
    if environ.get("GPUHUB_PRINT_OUTPUT") == "1" and os.path.exists(environ["GPUHUB_OUTPUT"]):
        print_output(environ["GPUHUB_OUTPUT"])
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
