"""Waiting for a condition in tests: poll, never sleep a fixed time and hope."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol


def until(what: str, check: Callable[[], Any], timeout: float = 60, every: float = 0.3) -> Any:
    """``check()``'s first true answer; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(every)
    return found


class HasLog(Protocol):
    def log(self) -> str: ...


def hub_until(what: str, check: Callable[[], Any], hub: HasLog, timeout: float = 90) -> Any:
    """:func:`until` for a test of a real hub: its failure ends with the last of the hub's
    log, which usually says why the condition never came."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}\n{hub.log()[-3000:]}"
        time.sleep(0.25)
    return found


async def eventually(check: Callable[[], Any], timeout: float = 10) -> Any:
    """``check()``'s first true answer, polled without blocking the event loop (a watch the
    test reads keeps running); an ``AssertionError`` it raises counts as not yet, and the last
    one is raised after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
        except AssertionError:
            if loop.time() > deadline:
                raise
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.05)
