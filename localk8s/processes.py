"""Starting and stopping the cluster's processes, and choosing ports that are free.

Every process the launcher starts, and every process the node agent runs for a pod,
carries ``GPUHUB_CLUSTER=<the cluster's folder>`` in its environment. ``make cluster-down``
ends them by that mark, read from ``/proc``, not only by the pids it wrote down: a pod's
grandchild or a component restarted by hand goes too, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

MARK = "GPUHUB_CLUSTER"


class Ports:
    """Hands out ports, starting from each component's usual one and skipping busy ones
    (and ones already handed out), so two clusters or a stray process never collide.

    A port handed out stays bound (not listening) by this process until :meth:`release`,
    just before the component that listens on it starts: a second cluster starting at the
    same time sees it busy instead of picking it too.
    """

    def __init__(self) -> None:
        self.held: dict[int, socket.socket] = {}

    def pick(self, preferred: int) -> int:
        port = preferred
        while True:
            if port > 65000:
                raise RuntimeError(f"no free port at or above {preferred}")
            if port not in self.held:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    sock.close()
                else:
                    self.held[port] = sock
                    return port
            port += 1

    def release(self, *ports: int) -> None:
        for port in ports:
            sock = self.held.pop(port, None)
            if sock is not None:
                sock.close()

    def release_all(self) -> None:
        self.release(*list(self.held))


def start(
    name: str,
    argv: Sequence[str],
    *,
    root: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start one component in its own session, its output in ``<root>/logs/<name>.log``."""
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ if env is None else env)
    environment[MARK] = str(root)
    with (logs / f"{name}.log").open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=cwd,
            start_new_session=True,
        )


def marked(root: Path) -> list[int]:
    """Pids of live processes whose environment carries this cluster's mark."""
    return carrying(f"{MARK}={root}")


def carrying(*entries: str) -> list[int]:
    """Pids of live processes (but this one) whose environment has every ``NAME=value``."""
    wanted = {entry.encode() for entry in entries}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted <= set(environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal the process group ``pid`` leads (a component started in its own session),
    and the process itself (a pod's child that leads no group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def terminate(pids: Iterable[int], grace: float = 10.0) -> None:
    """SIGTERM each process (and its group), then SIGKILL what is left after ``grace``."""
    pids = [p for p in pids if alive(p)]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)


def stop_marked(root: Path, grace: float = 10.0) -> int:
    """End every process of this cluster; returns how many there were."""
    total = 0
    for _ in range(3):  # a dying parent may start nothing new, but look again to be sure
        pids = marked(root)
        if not pids:
            break
        total += len(pids)
        terminate(pids, grace)
    return total
