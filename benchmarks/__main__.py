"""``python -m benchmarks [NAME ...] [--options]``: run the named benchmarks, or all of them."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path


def _module_for(name: str) -> str:
    for candidate in (f"benchmarks.bench_{name}", f"benchmarks.{name}"):
        if importlib.util.find_spec(candidate) is not None:
            return candidate
    raise SystemExit(f"No benchmark named {name!r} in benchmarks/.")


def main(argv: list[str]) -> int:
    # Leading names pick benchmarks; options after them go to each one's main().
    split = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, options = argv[:split], argv[split:]
    if names:
        modules = [_module_for(name) for name in names]
    else:
        here = str(Path(__file__).parent)
        modules = [
            f"benchmarks.{info.name}"
            for info in pkgutil.iter_modules([here])
            if not info.name.startswith("_")
        ]
    failed = []
    for name in modules:
        module = importlib.import_module(name)
        if not hasattr(module, "main"):
            continue
        print(f"== {name}", flush=True)
        if module.main(options) not in (0, None):
            failed.append(name)
    if failed:
        print(f"Over budget or failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
