"""``pods/exec`` over the WebSocket channel protocols, for containers kubesim runs locally.

The kubelet's streaming protocol (``v4.channel.k8s.io``, and ``v5.channel.k8s.io`` which adds
closing a channel): every binary frame starts with a channel byte, 0 stdin, 1 stdout,
2 stderr, 3 the error channel (a ``Status`` when the command ends), 4 resize; under v5 a frame
``[255, channel]`` closes that channel. The command runs as a local process with the
container's environment and working directory, as a local container itself does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import Mapping
from typing import Any

from aiohttp import WSMsgType, web

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


def exit_status(argv: list[str], code: int) -> dict[str, Any]:
    """The Status the kubelet sends on the error channel when the command ends."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {argv}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def start_failure(argv: list[str]) -> dict[str, Any]:
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "OCI runtime exec failed: exec failed: unable to start container process: exec: "
            f'"{argv[0] if argv else ""}": executable file not found in $PATH: unknown'
        ),
        "reason": "InternalError",
        "details": {"causes": [{"message": "exec failed"}]},
        "code": 500,
    }


async def serve(
    request: web.Request, argv: list[str], env: Mapping[str, str], cwd: str, stdin: bool
) -> web.WebSocketResponse:
    """Run ``argv`` and stream it to the client; the error channel says how it ended."""
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    await ws.prepare(request)
    executable = shutil.which(argv[0], path=env.get("PATH")) if argv else None
    if executable is None:
        await ws.send_bytes(bytes([ERROR]) + json.dumps(start_failure(argv)).encode())
        await ws.close()
        return ws
    process = await asyncio.create_subprocess_exec(
        executable,
        *argv[1:],
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )

    async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            await ws.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        async for message in ws:
            if message.type != WSMsgType.BINARY or not message.data or process.stdin is None:
                continue
            channel, data = message.data[0], message.data[1:]
            if channel == STDIN:
                process.stdin.write(data)
                with contextlib.suppress(ConnectionError):
                    await process.stdin.drain()
            elif channel == CLOSE and data[:1] == bytes([STDIN]):
                process.stdin.close()

    reader = asyncio.create_task(feed())
    try:
        await asyncio.gather(pump(process.stdout, STDOUT), pump(process.stderr, STDERR))
        code = await process.wait()
        code = code if code >= 0 else 128 - code
        await ws.send_bytes(bytes([ERROR]) + json.dumps(exit_status(argv, code)).encode())
    finally:
        reader.cancel()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await ws.close()
    return ws
