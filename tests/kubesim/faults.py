"""Faults a test can inject into the apiserver: errors, slowness, dropped watches."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .errors import APIError

_REASONS = {
    500: ("InternalError", "Internal error occurred: injected by kubesim"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be processing the request",
    ),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
}


@dataclass
class Rule:
    kind: str  # "error" | "slow"
    method: str | None
    path: str | None  # substring of the request path
    skip: int  # matching requests to let through first
    count: int | None  # how many to affect (None: all)
    status: int = 500
    seconds: float = 0.0
    watch: bool | None = None  # None: any; True: only watch requests; False: no watches

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        return (
            (self.method is None or self.method == method)
            and (self.path is None or self.path in path)
            and (self.watch is None or self.watch == is_watch)
        )


class Faults:
    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.requests = 0  # every request the apiserver has served

    def error(
        self,
        status: int = 500,
        *,
        nth: int = 1,
        count: int | None = 1,
        method: str | None = None,
        path: str | None = None,
        watch: bool | None = None,
    ) -> Rule:
        """Answer the ``nth`` matching request from now (and ``count - 1`` after it) with ``status``."""
        rule = Rule("error", method, path, nth - 1, count, status=status, watch=watch)
        self.rules.append(rule)
        return rule

    def slow(
        self,
        seconds: float,
        *,
        method: str | None = None,
        path: str | None = None,
        count: int | None = None,
        watch: bool | None = None,
    ) -> Rule:
        rule = Rule("slow", method, path, 0, count, seconds=seconds, watch=watch)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    async def apply(self, method: str, path: str, is_watch: bool) -> None:
        """Sleep and/or raise as the active rules say, for one request."""
        self.requests += 1
        for rule in list(self.rules):
            if not rule.matches(method, path, is_watch):
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    self.rules.remove(rule)
            if rule.kind == "slow":
                await asyncio.sleep(rule.seconds)
            else:
                reason, message = _REASONS.get(
                    rule.status, ("InternalError", f"injected HTTP {rule.status}")
                )
                raise APIError(
                    rule.status,
                    reason,
                    message,
                    {"retryAfterSeconds": 1} if rule.status in (429, 503) else None,
                )
