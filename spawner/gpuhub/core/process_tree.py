"""Ending a job's processes on a workstation, the one way both cancels do it: the user's
server's (:mod:`gpuhub.jobs.local`) and the fleet page's (:mod:`gpuhub.hub.monitor.cancel`).

The kernel papermill starts is in its own session (jupyter_client does that), so a process
group alone would miss it: the tree is walked. A job runner leads its own process group
(``start_new_session``), which is signalled too, for anything re-parented out of the tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from typing import Any

KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


def end_process_trees(roots: Sequence[Any], grace: float = KILL_GRACE) -> None:
    """SIGTERM every one of ``roots`` (``psutil.Process``), their descendants and the
    process groups they lead; after ``grace`` seconds, SIGKILL what is left."""
    import psutil

    procs: dict[int, Any] = {}
    for root in roots:
        procs[root.pid] = root
        with contextlib.suppress(psutil.Error):
            procs.update((c.pid, c) for c in root.children(recursive=True))
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    leaders = []
    for root in roots:
        with contextlib.suppress(OSError):
            if os.getpgid(root.pid) == root.pid:
                leaders.append(root.pid)
                os.killpg(root.pid, signal.SIGTERM)
    _, left = psutil.wait_procs(list(procs.values()), timeout=grace)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for leader in leaders:
        with contextlib.suppress(OSError):
            os.killpg(leader, signal.SIGKILL)
    psutil.wait_procs(left, timeout=grace)
