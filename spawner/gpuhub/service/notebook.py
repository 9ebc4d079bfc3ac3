"""The user's notebook as the jobs service receives it: a path and the file's content.

The service has no access to the user's files; the user's server sends the notebook it has
already resolved inside its root, and this checks again what matters here: a relative path
that stays inside the home directory, an ``.ipynb`` name, JSON with cells, and the size cap.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from gpuhub.core.options import as_given
from gpuhub.core.quantity import format_memory
from gpuhub.jobs.model import JobError, NotebookRef


def shipped_notebook(
    path: Any, content: Any, *, max_bytes: int, mount_path: str, required: bool = True
) -> tuple[NotebookRef, bytes | None]:
    """Validate ``path`` (relative to the user's home) and ``content`` (the file's text).

    Returns the notebook reference (``os_path``: where it is in the job pod's home mount)
    and the content as bytes (None when not sent and not ``required``).
    """
    if not isinstance(path, str) or not path.strip():
        raise JobError("notebook", "notebook must be the path of a notebook, such as train.ipynb.")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\0" in path or len(path) > 4096:
        raise JobError("notebook", f"notebook {as_given(path)} is outside your home directory.")
    if pure.suffix != ".ipynb":
        raise JobError("notebook", f"notebook {as_given(path)} is not a notebook (an .ipynb file).")
    data: bytes | None = None
    if content is None:
        if required:
            raise JobError(
                "notebook_content",
                "notebook_content is missing: the jobs service needs the notebook itself.",
            )
    elif not isinstance(content, str):
        raise JobError("notebook_content", "notebook_content must be the notebook's JSON text.")
    else:
        data = content.encode("utf-8")
        if len(data) > max_bytes:
            raise JobError(
                "notebook",
                f"notebook {as_given(path)} is {format_memory(len(data))}, over the "
                f"{format_memory(max_bytes)} a job may take; clear large outputs and try again.",
                413,
            )
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("cells"), list):
            raise JobError("notebook", f"notebook {as_given(path)} is not a valid notebook file.")
    size = len(data) if data is not None else 0
    ref = NotebookRef(path=pure.as_posix(), os_path=Path(mount_path) / pure, size=size)
    return ref, data
