"""Build the wildcard-bind shim (``bindshim.c``) that every container of the process node
preloads, so that a program listening on ``0.0.0.0`` or ``::`` listens on its pod's address.

Compiled once per agent start with the machine's C compiler (a second; ``cc`` is on CI's
machines and any with Python's build tools). Without one, the agent says so once and pods
bind the wildcard as they ask: two pods listening on one port then collide.

Pods preload it from outside the cluster's folder (:func:`install`): a pod may mount a volume
over any folder, and one that mounts an emptyDir at ``/tmp`` would hide a shim kept in a
cluster rooted there, leaving every program it starts without it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger("gpuhub.node-agent")

SOURCE = Path(__file__).with_name("bindshim.c")
POD_IP_ENV = "GPUHUB_POD_IP"  # what the shim reads: the address a wildcard bind becomes
# Where a root agent puts the shim pods preload: runtime state of the machine's, as a
# container runtime keeps its own under /run, not under /tmp where pods mount emptyDirs.
INSTALL_FOLDER = Path("/run/gpuhub-node")


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


def install(built: Path | None, folder: Path = INSTALL_FOLDER) -> Path | None:
    """The path pods preload the shim from: a copy named by its content in ``folder``, so
    that agents of several clusters share one and none replaces another's in use. Only a
    root agent mounts pods' volumes (in private mount namespaces); any other keeps ``built``,
    which nothing can hide from its pods."""
    if built is None or os.geteuid() != 0:
        return built
    data = built.read_bytes()
    target = folder / f"bindshim-{hashlib.sha256(data).hexdigest()[:16]}.so"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}")
        partial.write_bytes(data)
        partial.chmod(0o755)
        partial.replace(target)  # whole or absent, for an agent starting beside this one
    return target
