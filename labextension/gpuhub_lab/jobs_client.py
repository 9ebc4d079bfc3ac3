"""The kernel's way to its own Jupyter server's jobs API (used by the magics).

A kernel that jupyter_server started has ``JPY_PARENT_PID`` (the server's pid, set by
jupyter_client; a job's kernel gets ``GPUHUB_SERVER_PID`` from the local jobs backend, as its
parent is the job's runner) and inherits the server's ``JUPYTER_RUNTIME_DIR``; the server writes
``jpserver-<pid>.json`` there with its URL (base_url included), token and root. Under
JupyterHub that token is empty and the server accepts its own ``JUPYTERHUB_API_TOKEN``
(the ``server`` role has ``access:servers!server``). ``GPUHUB_SERVER_URL`` (with
``GPUHUB_SERVER_TOKEN``) overrides discovery. Going through the server means the magics
get exactly the server's validation and messages.

Standard library only (and gpuhub's variable names, :mod:`gpuhub.core.env`), imported lazily:
``%load_ext gpuhub_lab`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuhub.core.env import SERVER_PID_ENV, SERVER_ROOT_ENV, SERVER_TOKEN_ENV, SERVER_URL_ENV


class JobsClientError(Exception):
    """One sentence for the person at the notebook (the server's own message when it sent one)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServerInfo:
    url: str  # ends with "/"
    token: str
    root_dir: str | None


def find_server(environ: dict[str, str] | None = None) -> ServerInfo:
    """The Jupyter server that started this kernel, or :class:`JobsClientError` saying why not."""
    env = dict(os.environ if environ is None else environ)
    hub_token = env.get("JUPYTERHUB_API_TOKEN", "")
    if env.get(SERVER_URL_ENV):
        url = env[SERVER_URL_ENV].rstrip("/") + "/"
        return ServerInfo(url, env.get(SERVER_TOKEN_ENV) or hub_token, env.get(SERVER_ROOT_ENV))
    pid = env.get(SERVER_PID_ENV) or env.get("JPY_PARENT_PID", "")
    if not pid.isdigit():
        raise JobsClientError(
            "This kernel was not started by a Jupyter server, so it has no jobs API to talk to; "
            "run this in JupyterLab, or set GPUHUB_SERVER_URL."
        )
    from jupyter_core.paths import jupyter_runtime_dir

    runtime_dir = env.get("JUPYTER_RUNTIME_DIR") or jupyter_runtime_dir()
    info_file = Path(runtime_dir) / f"jpserver-{pid}.json"
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError):
        raise JobsClientError(
            f"This kernel's parent (pid {pid}) is not a running Jupyter server (no {info_file.name} "
            "in the runtime directory); run this in JupyterLab, or set GPUHUB_SERVER_URL."
        ) from None
    url = str(info.get("url") or "")
    if not url.startswith(("http://", "https://")):
        raise JobsClientError(
            f"This kernel's Jupyter server listens on {url or 'a socket'}, which the magics "
            "cannot reach; set GPUHUB_SERVER_URL."
        )
    return ServerInfo(
        url.rstrip("/") + "/", str(info.get("token") or hub_token), info.get("root_dir")
    )


class JobsClient:
    """Blocking calls to ``/gpuhub/api/jobs`` (fine in a magic: the cell waits anyway)."""

    def __init__(self, server: ServerInfo | None = None, timeout: float = 60) -> None:
        self.server = server or find_server()
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        from urllib import error, request

        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.server.token:
            headers["Authorization"] = f"token {self.server.token}"
        req = request.Request(self.server.url + path, data=data, method=method, headers=headers)
        try:
            with request.urlopen(req, timeout=self.timeout) as response:
                payload = response.read()
        except error.HTTPError as exc:
            message = f"The Jupyter server answered {exc.code} {exc.reason}."
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                answer = json.loads(exc.read())
                message = answer["message"] or message
                # Everything wrong at once, each its own sentence, as the dialog shows them.
                said = [e["message"] for e in answer.get("errors") or [] if e.get("message")]
                if len(said) > 1:
                    message = " ".join(said)
            raise JobsClientError(message, exc.code) from None
        except (error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise JobsClientError(
                f"Cannot reach this kernel's Jupyter server at {self.server.url} ({reason})."
            ) from None
        return json.loads(payload) if payload else None

    # -- jobs -------------------------------------------------------------------------------
    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", "gpuhub/api/jobs", body)
        return result

    def list(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = self._request("GET", "gpuhub/api/jobs")["jobs"]
        return jobs

    def get(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self._request("GET", f"gpuhub/api/jobs/{quote(job_id, safe='')}")
        return job

    def logs(self, job_id: str, tail: int | None = None) -> dict[str, Any]:
        query = f"?tail={tail}" if tail else ""
        logs: dict[str, Any] = self._request(
            "GET", f"gpuhub/api/jobs/{quote(job_id, safe='')}/logs{query}"
        )
        return logs

    def cancel(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self._request("DELETE", f"gpuhub/api/jobs/{quote(job_id, safe='')}")
        return job

    # -- contents (for %%train) ----------------------------------------------------------------
    def save_notebook(self, path: str, notebook: dict[str, Any]) -> None:
        """Write a notebook through the contents API, creating its folders."""
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            self._request(
                "PUT", f"api/contents/{quote(folder)}", {"type": "directory", "format": None}
            )
        self._request(
            "PUT",
            f"api/contents/{quote(path)}",
            {"type": "notebook", "format": "json", "content": notebook},
        )

    def relative_path(self, os_path: str) -> str:
        """An absolute OS path as a path relative to the server root (when inside it)."""
        root = self.server.root_dir
        if root and os.path.isabs(os_path):
            try:
                relative = os.path.relpath(os_path, root)
            except ValueError:
                return os_path
            if not relative.startswith(".."):
                return Path(relative).as_posix()
        return os_path
