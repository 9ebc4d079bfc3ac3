"""The shipped Jupyter config, started for real.

Everything runs in an isolated Python environment (a venv that imports the project's packages
but has its own, empty ``etc/jupyter`` and ``etc/ipython``), so the development install's own
config cannot make a test pass: the server-extension JSON must come from ``jupyter_config/``
or from the built wheel, and the magics from the IPython kernel config the images install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from harness.paths import REPO

pytestmark = pytest.mark.e2e

ROOT = REPO
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
ENABLED = re.compile(r"gpuhub_lab\s+(\x1b\[\d+m)?enabled")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose sys.prefix has no Jupyter or IPython config, importing our packages."""
    root = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    # The project's dependencies (an `import` line in a .pth runs at start-up) and its own
    # sources, as an editable install would put them (not relying on one being present).
    (purelib / "_gpuhub_test_parent.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n"
        f"{ROOT / 'spawner'}\n{ROOT / 'labextension'}\n"
    )
    return root


def isolated(env_root: Path, tmp: Path, **extra: str) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JUPYTER", "IPYTHON", "PYTHON", "VIRTUAL_ENV"))
    }
    environ.update(
        PATH=f"{env_root / 'bin'}:{environ.get('PATH', '')}",
        JUPYTER_CONFIG_DIR=str(tmp / "user-jupyter"),
        JUPYTER_DATA_DIR=str(tmp / "user-data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        IPYTHONDIR=str(tmp / "user-ipython"),
        HOME=str(tmp),
        **extra,
    )
    return environ


def extension_list(env_root: Path, tmp: Path, **extra: str) -> str:
    result = subprocess.run(
        [env_root / "bin" / "python", "-m", "jupyter_server.extension.serverextension", "list"],
        env=isolated(env_root, tmp, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory, env: Path) -> Path:
    """The isolated env with the built wheel installed into it (as pip installs into images)."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            ".",
            "-w",
            dist,
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    target = tmp_path_factory.mktemp("wheel-env")
    shutil.copytree(env, target, symlinks=True, dirs_exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            # Without this pip uninstalls the editable gpuhub of the running venv first.
            "--ignore-installed",
            "--prefix",
            target,
            dist / f"gpuhub-{VERSION}-py3-none-any.whl",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_without_the_config_the_extension_is_not_enabled(env: Path, tmp_path: Path) -> None:
    """Control: the isolated env does not enable gpuhub_lab by itself."""
    assert not ENABLED.search(extension_list(env, tmp_path))


def test_wheel_installs_the_enablement_into_etc_jupyter(wheel_env: Path, tmp_path: Path) -> None:
    installed = wheel_env / "etc" / "jupyter" / "jupyter_server_config.d" / "gpuhub_lab.json"
    assert json.loads(installed.read_text()) == json.loads(
        (ROOT / "jupyter_config" / "jupyter_server_config.d" / "gpuhub_lab.json").read_text()
    )
    out = extension_list(wheel_env, tmp_path)
    assert ENABLED.search(out), out
    assert re.search(rf"gpuhub_lab {re.escape(VERSION)} .*OK", out), out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("source", ["shipped config dir", "installed wheel"])
def test_real_jupyter_server_loads_gpuhub_lab(
    source: str, env: Path, wheel_env: Path, tmp_path: Path
) -> None:
    """`jupyter server` enables gpuhub_lab from JUPYTER_CONFIG_PATH=jupyter_config, or from
    the etc/jupyter the wheel installed, and loads it."""
    if source == "installed wheel":
        python, environ = wheel_env / "bin" / "python", isolated(wheel_env, tmp_path)
    else:
        python = env / "bin" / "python"
        environ = isolated(env, tmp_path, JUPYTER_CONFIG_PATH=str(ROOT / "jupyter_config"))
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                python,
                "-m",
                "jupyter_server",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                "--IdentityProvider.token=gpuhub-test",
                "--ServerApp.open_browser=False",
                "--ServerApp.allow_root=True",  # CI containers often run as root
                f"--ServerApp.root_dir={tmp_path}",
            ],
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while "is running at" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        assert "gpuhub_lab | extension was successfully loaded." in text, text
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- IPython kernel ----------------------------------------------------------------------------

PROBE = """
import json
_ip = get_ipython()
_gpuhub = {
    kind: sorted(
        name
        for name, fn in table.items()
        if type(getattr(fn, "__self__", None)).__module__.startswith("gpuhub_lab")
        or getattr(fn, "__module__", "").startswith("gpuhub_lab")
    )
    for kind, table in _ip.magics_manager.magics.items()
}
print(json.dumps({"loaded": sorted(_ip.extension_manager.loaded), "magics": _gpuhub}))
"""


@pytest.fixture
def kernel_env(env: Path, tmp_path: Path) -> Iterator[tuple[Path, KernelSpecManager]]:
    spec_dir = tmp_path / "kernels" / "gpuhub-test"
    spec_dir.mkdir(parents=True)
    argv = [str(env / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec_dir / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "gpuhub test", "language": "python"})
    )
    yield env, KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    shutil.rmtree(env / "etc" / "ipython", ignore_errors=True)


def run_in_kernel(
    specs: KernelSpecManager, environ: dict[str, str], *cells: str
) -> list[dict[str, object]]:
    manager = KernelManager(kernel_spec_manager=specs, kernel_name="gpuhub-test")
    manager.start_kernel(env=environ)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        results = []
        for cell in cells:
            chunks: list[str] = []

            def collect(msg: dict, chunks: list[str] = chunks) -> None:
                if msg["msg_type"] == "stream":
                    chunks.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    chunks.append("\n".join(msg["content"]["traceback"]))

            reply = client.execute_interactive(cell, output_hook=collect, timeout=60)
            assert reply["content"]["status"] == "ok", "".join(chunks)
            lines = "".join(chunks).strip().splitlines()
            results.append(json.loads(lines[-1]) if lines and cell is PROBE else {})
        return [r for r in results if r]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_kernel_config_loads_the_magics(
    kernel_env: tuple[Path, KernelSpecManager], tmp_path: Path
) -> None:
    env_root, specs = kernel_env
    environ = isolated(env_root, tmp_path)
    # Control: a plain kernel, then one where the user types %load_ext gpuhub_lab.
    before, by_hand = run_in_kernel(specs, environ, PROBE, "%load_ext gpuhub_lab", PROBE)
    assert "gpuhub_lab" not in before["loaded"]
    assert not any(before["magics"].values())
    assert "gpuhub_lab" in by_hand["loaded"]
    # The image's place for it: <sys.prefix>/etc/ipython/ipython_kernel_config.py.
    target = env_root / "etc" / "ipython"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "jupyter_config" / "ipython" / "ipython_kernel_config.py", target)
    (configured,) = run_in_kernel(specs, environ, PROBE)
    assert "gpuhub_lab" in configured["loaded"]
    # Exactly the magics `%load_ext gpuhub_lab` gives: those docs/architecture.md lists.
    assert configured["magics"] == by_hand["magics"]
    assert {"gpu", "submit", "jobs", "job"} <= set(configured["magics"]["line"])
    assert "train" in configured["magics"]["cell"]


def test_wheel_loads_the_magics_in_every_kernel(wheel_env: Path, tmp_path: Path) -> None:
    """`pip install gpuhub` (the demo's editable install, the images) puts the kernel config in
    <env>/etc/ipython, so every kernel of that environment has the magics, even when the
    user's own profile sets its own list of extensions."""
    installed = wheel_env / "etc" / "ipython" / "ipython_kernel_config.py"
    shipped = ROOT / "jupyter_config" / "ipython" / "ipython_kernel_config.py"
    assert installed.read_text() == shipped.read_text()
    spec_dir = tmp_path / "kernels" / "gpuhub-test"
    spec_dir.mkdir(parents=True)
    argv = [
        str(wheel_env / "bin" / "python"),
        "-m",
        "ipykernel_launcher",
        "-f",
        "{connection_file}",
    ]
    (spec_dir / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "gpuhub test", "language": "python"})
    )
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    profile = tmp_path / "user-ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c = get_config()\nc.InteractiveShellApp.extensions = ['autoreload']\n"
    )
    (loaded,) = run_in_kernel(specs, isolated(wheel_env, tmp_path), PROBE)
    assert "gpuhub_lab" in loaded["loaded"]
    assert any(name.endswith("autoreload") for name in loaded["loaded"])  # the user's own
    assert {"gpu", "submit", "jobs", "job"} <= set(loaded["magics"]["line"])
