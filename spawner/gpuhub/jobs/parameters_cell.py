"""Whether a notebook's parameters would be applied: the one check for every submit (the
jobs dialog, ``%submit -p``, ``POST /gpuhub/api/jobs``).

papermill puts the parameters in a cell after the notebook's cell tagged ``parameters``.
Without one it puts them first, where the notebook's own assignments overwrite them: the job
would run without what was asked for, and its record would say otherwise. So a submit whose
notebook has no such cell runs without the parameters, its record lists none, and its
answer carries :func:`unapplied_parameters`'s sentence, which the magic and the dialog show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TAG = "parameters"


def has_parameters_cell(notebook: Any) -> bool:
    """Whether ``notebook`` (nbformat JSON) has a code cell tagged ``parameters``."""
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        tags = metadata.get("tags") if isinstance(metadata, dict) else None
        if isinstance(tags, list) and TAG in tags:
            return True
    return False


def unapplied_sentence(path: str, parameters: Mapping[str, Any]) -> str:
    """What a user reads when ``parameters`` cannot be applied to the notebook at ``path``."""
    names = sorted(parameters)
    named = (
        f"the parameter {names[0]}"
        if len(names) == 1
        else f"the parameters {', '.join(names[:-1])} and {names[-1]}"
    )
    return (
        f'{path} has no cell tagged "parameters", so {named} would not replace the '
        "notebook's own values: the job runs without them. Tag the cell that sets them "
        '"parameters" (in the cell\'s property inspector), save, and submit again.'
    )


def unapplied_parameters(os_path: Path, path: str, parameters: Mapping[str, Any]) -> str | None:
    """The sentence when ``parameters`` are given and the notebook at ``os_path`` (``path``
    for people) has no parameters cell; None when they apply or none are given. A notebook
    that cannot be read as JSON is the runner's to refuse, not this check's."""
    if not parameters:
        return None
    try:
        notebook = json.loads(os_path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return None if has_parameters_cell(notebook) else unapplied_sentence(path, parameters)
