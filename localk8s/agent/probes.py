"""Readiness probes as the kubelet runs them (``tcpSocket`` and ``httpGet``), so that a
container with a ``readinessProbe`` is ready once it answers, not once its process starts.

What waits for a pod to be Ready relies on it: KubeSpawner's test hub declares a
``tcpSocket`` probe on 8081 and its tests start spawning once the hub pod is Ready; a user
server that asks the hub for its version before it listens (JupyterHub 5+) would otherwise
find nothing there. ``exec`` and ``grpc`` probes are not run: such a container is ready once
started, as every container here was before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

PROBED = ("tcpSocket", "httpGet")  # the kinds run here


def runs(probe: dict[str, Any] | None) -> bool:
    """Whether this node runs the probe (its container is not ready until it passes)."""
    return probe is not None and any(kind in probe for kind in PROBED)


def port_of(value: int | str, container: dict[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"probe port {value!r} names no port of container {container['name']!r}")


async def probe_once(probe: dict[str, Any], ip: str, container: dict[str, Any]) -> str | None:
    """One try, within ``timeoutSeconds`` (1 by default), by the kubelet's rules (a TCP
    connection opens; an HTTP answer from 200 to 399, the certificate not checked): None when
    it passes, else why it failed."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "tcpSocket" in probe:
            check = probe["tcpSocket"]
            port = port_of(check["port"], container)
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(check.get("host") or ip, port), timeout
            )
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return None
        check = probe["httpGet"]
        port = port_of(check["port"], container)
        scheme = str(check.get("scheme") or "HTTP").lower()
        host = check.get("host") or ip
        url = f"{scheme}://{host}:{port}{check.get('path') or '/'}"
        headers = {h["name"]: h["value"] for h in check.get("httpHeaders") or []}
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url, headers=headers, ssl=context, allow_redirects=False) as answer,
        ):
            if 200 <= answer.status < 400:
                return None
            return f"HTTP probe failed with statuscode: {answer.status}"
    except TimeoutError:
        return f"timeout: no answer within {timeout:g}s"
    except (OSError, aiohttp.ClientError, ValueError) as error:
        return str(error) or type(error).__name__


async def readiness(
    probe: dict[str, Any],
    ip: str,
    container: dict[str, Any],
    set_ready: Callable[[bool], Awaitable[None]],
    warn: Callable[[str], Awaitable[None]],
) -> None:
    """Probe until cancelled (its container's process ended): after ``initialDelaySeconds``,
    every ``periodSeconds`` (10), ready after ``successThreshold`` passes in a row (1), not
    ready after ``failureThreshold`` failures in a row (3), as the kubelet's prober does.
    The first failure of each run of failures is told (``warn``: the kubelet's ``Unhealthy``
    event; it counts repeats, here one event per run)."""
    await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
    period = float(probe.get("periodSeconds") or 10)
    successes = int(probe.get("successThreshold") or 1)
    failures = int(probe.get("failureThreshold") or 3)
    ready, passed, failed = False, 0, 0
    while True:
        failure = await probe_once(probe, ip, container)
        if failure is None:
            passed, failed = passed + 1, 0
            if not ready and passed >= successes:
                ready = True
                await set_ready(True)
        else:
            passed, failed = 0, failed + 1
            if failed == 1:
                await warn(f"Readiness probe failed: {failure}")
            if ready and failed >= failures:
                ready = False
                await set_ready(False)
        await asyncio.sleep(period)
