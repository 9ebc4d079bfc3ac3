"""Waiting for a condition in tests: poll, never sleep a fixed time and hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(what: str, check: Callable[[], Any], timeout: float = 60, every: float = 0.3) -> Any:
    """``check()``'s first true answer; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(every)
    return found
