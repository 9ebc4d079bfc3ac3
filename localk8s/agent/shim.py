"""Build the wildcard-bind shim (``bindshim.c``) that every container of the process node
preloads, so that a program listening on ``0.0.0.0`` or ``::`` listens on its pod's address.

Compiled once per agent start with the machine's C compiler (a second; ``cc`` is on CI's
machines and any with Python's build tools). Without one, the agent says so once and pods
bind the wildcard as they ask: two pods listening on one port then collide.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger("gpuhub.node-agent")

SOURCE = Path(__file__).with_name("bindshim.c")
POD_IP_ENV = "GPUHUB_POD_IP"  # what the shim reads: the address a wildcard bind becomes


def build(folder: Path) -> Path | None:
    """Compile the shim into ``folder``; returns the library, or None without a compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler (cc): pods that bind 0.0.0.0 take the port from every other pod")
        return None
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "bindshim.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(target), str(SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return target
