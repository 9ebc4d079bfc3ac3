"""Small real notebooks for the job tests."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def write_notebook(path: Path, *cells: str, parameters: str | None = None) -> Path:
    """Write a Python 3 notebook: an optional tagged parameters cell, then ``cells``."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells.append(new_markdown_cell("A notebook written by gpuhub's tests."))
    if parameters is not None:
        nb.cells.append(new_code_cell(parameters, metadata={"tags": ["parameters"]}))
    nb.cells.extend(new_code_cell(source) for source in cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def read_outputs(path: Path) -> str:
    """Every text output of an executed notebook, joined."""
    nb = nbformat.read(path, as_version=4)
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                texts.append(output["text"])
            elif "data" in output:
                texts.append(output["data"].get("text/plain", ""))
    return "".join(texts)
