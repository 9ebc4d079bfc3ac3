"""A real ``jupyter server`` (with the gpuhub_lab extension) as a child process, for tests.

It runs on 127.0.0.1 with a known token from a root directory the test chooses, with an
environment the test controls (e.g. ``CUDA_VISIBLE_DEVICES``, ``GPUHUB_POLICY``), and
isolated Jupyter config/data/runtime directories so nothing from the machine leaks in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from harness import e2e
from harness.hub.process import free_port
from harness.paths import REPO

TOKEN = "gpuhub-jobs-test-token-0123456789"
SOURCE_PATHS = [str(REPO / "spawner"), str(REPO / "labextension"), str(REPO)]


BUILT_LABEXTENSION = REPO / "labextension" / "gpuhub_lab" / "labextension"


def expose_lab_extension(tmp: Path) -> None:
    """Make the built extension visible to a server whose Jupyter dirs are under ``tmp``.

    The test server's data dir is isolated: the extension is linked there, as the wheel's
    shared-data installs it; JupyterLab's "news" question is turned off so that it covers
    nothing in screenshots and clicks.
    """
    import pytest

    if not (BUILT_LABEXTENSION / "package.json").exists():
        pytest.fail("The lab extension is not built; run `npm run build`.")
    labextensions = tmp / "data" / "labextensions"
    labextensions.mkdir(parents=True)
    (labextensions / "gpuhub").symlink_to(BUILT_LABEXTENSION, target_is_directory=True)
    labconfig = tmp / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )


@dataclass
class JupyterServer:
    url: str  # base URL, ending in "/"
    root: Path
    runtime_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"token {TOKEN}", **kwargs.pop("headers", {})}
        return requests.request(
            method, self.url + path.lstrip("/"), headers=headers, timeout=30, **kwargs
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def jupyter_server(
    root: Path,
    tmp: Path,
    *,
    env: Mapping[str, str] | None = None,
    config: str = "",
    base_url: str = "/",
    lab: bool = False,
) -> Iterator[JupyterServer]:
    """Start the server; ``lab=False`` leaves JupyterLab's own extensions off (faster)."""
    e2e.require("a Jupyter server")
    others = ("jupyterlab", "jupyter_lsp", "jupyter_server_terminals", "notebook_shim")
    extensions = {"gpuhub_lab": True, **{name: lab for name in others}}
    port = free_port()
    jupyter_dirs = {name: tmp / name for name in ("config", "data", "runtime")}
    for path in jupyter_dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    (jupyter_dirs["config"] / "jupyter_server_config.py").write_text(
        f"c.ServerApp.jpserver_extensions = {extensions!r}\n{config}"
    )
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JUPYTER", "JPY_", "GPUHUB_")) and k != "CUDA_VISIBLE_DEVICES"
    }
    full_env.update(
        {
            "JUPYTER_CONFIG_DIR": str(jupyter_dirs["config"]),
            "JUPYTER_DATA_DIR": str(jupyter_dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(jupyter_dirs["runtime"]),
            "JUPYTER_PLATFORM_DIRS": "1",
            # The data dir above, where this tree's build is linked, wins over the copy an
            # install left in the venv (inside a venv Jupyter prefers the env's own path).
            "JUPYTER_PREFER_ENV_PATH": "0",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            # The sources themselves, whether or not an editable install is present.
            "PYTHONPATH": os.pathsep.join([*SOURCE_PATHS, os.environ.get("PYTHONPATH", "")]),
            **(env or {}),
        }
    )
    log_path = tmp / "jupyter-server.log"
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            f"--ServerApp.base_url={base_url}",
            f"--IdentityProvider.token={TOKEN}",
            "--allow-root",
        ],
        cwd=root,
        env=full_env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}{base_url}"
    server = JupyterServer(url, root, jupyter_dirs["runtime"], process, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter server exited:\n{server.log()}")
            try:
                if server.api("GET", "api/status").status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter server did not start:\n{server.log()}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log_file.close()
