"""Readiness probes, as the kubelet's prober runs them.

A container with a ``readinessProbe`` starts not ready; it becomes ready when the probe
succeeds (``successThreshold`` times in a row) and unready again after ``failureThreshold``
failures, probed every ``periodSeconds`` after ``initialDelaySeconds``. For a container that
runs as a local process, ``httpGet`` and ``tcpSocket`` probes really connect to the pod IP;
``exec`` and ``grpc`` probes, and every probe of a simulated container, succeed (kubesim has
nothing to run them against; see README).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import aiohttp


def resolve_port(container: Mapping[str, Any], port: Any) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for entry in container.get("ports") or []:
        if entry.get("name") == port:
            return int(entry["containerPort"])
    return 0


async def check(probe: Mapping[str, Any], container: Mapping[str, Any], ip: str) -> str | None:
    """Run ``probe`` once against a local process at ``ip``: None if it passed, else why not
    (worded as the kubelet's ``Unhealthy`` events)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    if probe.get("httpGet"):
        get = probe["httpGet"]
        scheme = (get.get("scheme") or "HTTP").lower()
        host = get.get("host") or ip
        port = resolve_port(container, get.get("port"))
        url = f"{scheme}://{host}:{port}{get.get('path') or '/'}"
        headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http,
                http.get(url, headers=headers, allow_redirects=False, ssl=False) as response,
            ):
                if 200 <= response.status < 400:
                    return None
                return f"HTTP probe failed with statuscode: {response.status}"
        except TimeoutError:
            return f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
        except aiohttp.ClientError:
            return f'Get "{url}": dial tcp {host}:{port}: connect: connection refused'
    if probe.get("tcpSocket"):
        sock = probe["tcpSocket"]
        host = sock.get("host") or ip
        port = resolve_port(container, sock.get("port"))
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (OSError, TimeoutError):
            return f"dial tcp {host}:{port}: connect: connection refused"
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return None
    return None  # exec and grpc probes are not run (README)
