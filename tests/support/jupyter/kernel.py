"""Run code in a real kernel and keep what it printed and displayed."""

from __future__ import annotations

from dataclasses import dataclass, field

from jupyter_client import BlockingKernelClient


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
