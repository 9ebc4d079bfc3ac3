"""Run code in a real kernel and keep what it printed and displayed; connect to a kernel a
Jupyter server started (as JupyterLab's client would).

``BlockingKernelClient.wait_for_ready`` on a client that no ``KernelManager`` made judges
the kernel alive by its heartbeat, which by default is dead after one second without an
answer: on a busy shared test machine a kernel still starting misses that, and the wait
reports "Kernel died before replying to kernel_info" for a kernel that runs. A dead kernel
still fails the wait (it never replies); it just takes the wait's timeout to say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client import BlockingKernelClient

#: Seconds without a heartbeat before the client calls the kernel dead.
HEARTBEAT_DEAD_S = 30.0


def kernel_client(connection_file: Path | str) -> BlockingKernelClient:
    """A client of the kernel that ``connection_file`` describes, its channels started;
    the caller waits for it (``wait_for_ready``) and stops the channels."""
    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.hb_channel.time_to_dead = HEARTBEAT_DEAD_S
    client.start_channels()
    return client


def ready_kernel_client(connection_file: Path | str, timeout: float = 60) -> BlockingKernelClient:
    """:func:`kernel_client`, once the kernel has answered (``timeout`` seconds at most)."""
    client = kernel_client(connection_file)
    try:
        client.wait_for_ready(timeout=timeout)
    except BaseException:
        client.stop_channels()
        raise
    return client


@dataclass
class Output:
    stdout: str = ""
    stderr: str = ""
    html: list[str] = field(default_factory=list)
    plain: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def text(self) -> str:
        return self.stdout + self.stderr + "".join(self.plain)


def run(client: BlockingKernelClient, code: str, timeout: float = 120) -> Output:
    out = Output()

    def hook(msg: dict) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                out.stdout += content["text"]
            else:
                out.stderr += content["text"]
        elif kind in ("execute_result", "display_data"):
            out.plain.append(content["data"].get("text/plain", ""))
            if "text/html" in content["data"]:
                out.html.append(content["data"]["text/html"])
        elif kind == "error":
            out.error = f"{content['ename']}: {content['evalue']}"

    client.execute_interactive(code, output_hook=hook, timeout=timeout)
    return out
