"""gpuhub's benchmarks: they prove the budgets in docs/architecture.md and write ``docs/benchmarks.md``.

``python -m benchmarks`` runs every module here that has a ``main(argv)``;
``python -m benchmarks metrics load_ext`` runs ``bench_metrics`` (or ``metrics``) and
``load_ext``. Each benchmark owns one section of ``docs/benchmarks.md`` between
``<!-- name:start -->`` and ``<!-- name:end -->`` markers and rewrites only that section.
"""

from __future__ import annotations

import math
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(name: str, body: str, path: Path = DOC) -> None:
    """Replace (or append) the section ``name`` of docs/benchmarks.md, re-reading it first."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n\nWritten by `make benchmarks`.\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]
