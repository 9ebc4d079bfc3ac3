"""Real processes standing in for jobs that outlive their server (local GPU holds)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import psutil


@contextmanager
def sleeping_process(env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A Python process that sleeps (with ``env``, if given) until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env=dict(env) if env is not None else None,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def identity(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """(pid, start time): how the hub knows a process (a pid alone may be reused)."""
    return proc.pid, psutil.Process(proc.pid).create_time()
