"""The container images, checked without Docker (none runs here).

Each Dockerfile is parsed: pinned bases, the gpuhub wheel installed with the right extras from
a path the build context really provides, a non-root user at the end. The wheel they install
is built here the way `make images` builds it, and `make -n images` shows the three builds.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.paths import REPO

ROOT = REPO
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
WHEEL = f"gpuhub-{VERSION}-py3-none-any.whl"

IMAGES = {
    # directory: (base image repository, gpuhub extras, installs the IPython kernel config)
    "hub": (
        "quay.io/jupyterhub/k8s-hub",
        {"hub", "kfp"},
        False,
    ),  # kfp: the jobs service compiles pipelines
    "notebook": ("quay.io/jupyter/pytorch-notebook", {"lab", "kfp"}, True),
    "notebook-cpu": ("quay.io/jupyter/scipy-notebook", {"lab", "kfp"}, True),
}


@dataclass
class Instruction:
    command: str
    args: str


def parse(path: Path) -> list[Instruction]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        command, _, args = full.partition(" ")
        instructions.append(Instruction(command.upper(), args.strip()))
    assert not pending, f"{path}: dangling line continuation"
    return instructions


def build_args(instructions: list[Instruction]) -> dict[str, str]:
    args = {}
    for ins in instructions:
        if ins.command == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            args[name] = value
    return args


def expand(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: variables.get(m.group(1), m.group(0)), text)


def dockerignore_allows(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    allowed = True
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            allowed = negate
    return allowed


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `make wheel` builds (offline: the build backend is in the test extra)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", ".", "-w", out],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out / WHEEL


@pytest.mark.parametrize("name", IMAGES)
def test_base_image_is_pinned(name: str) -> None:
    instructions = parse(ROOT / "images" / name / "Dockerfile")
    froms = [i for i in instructions if i.command == "FROM"]
    assert len(froms) == 1
    ref = expand(froms[0].args.split()[0], build_args(instructions))
    repository, _, tag = ref.rpartition(":")
    assert repository == IMAGES[name][0]
    # A release tag with a version or date, never a moving one.
    assert re.fullmatch(r"(cuda12-)?(\d{4}-\d{2}-\d{2}|\d+\.\d+\.\d+)", tag), ref


def test_hub_image_matches_the_charts_z2jh_version() -> None:
    import yaml

    chart = yaml.safe_load((ROOT / "helm" / "gpuhub" / "Chart.yaml").read_text())
    z2jh = chart["dependencies"][0]["version"]
    (base,) = [i for i in parse(ROOT / "images" / "hub" / "Dockerfile") if i.command == "FROM"]
    assert base.args == f"quay.io/jupyterhub/k8s-hub:{z2jh}"
    assert chart["appVersion"] == VERSION


@pytest.mark.parametrize("name", IMAGES)
def test_final_user_is_not_root(name: str) -> None:
    instructions = parse(ROOT / "images" / name / "Dockerfile")
    users = [i.args for i in instructions if i.command == "USER"]
    assert users, "no USER: the base image's user is not stated"
    assert instructions[-1].command == "USER", "USER must be the last instruction"
    assert users[-1] not in ("root", "0", "0:0")
    # Docker Stacks' ${NB_UID} is 1000; the hub base's jovyan too.
    assert users[-1] in ("1000", "${NB_UID}")


@pytest.mark.parametrize("name", IMAGES)
def test_installs_the_local_wheel_with_its_extras(name: str) -> None:
    instructions = parse(ROOT / "images" / name / "Dockerfile")
    variables = build_args(instructions)
    assert variables["GPUHUB_VERSION"] == VERSION
    runs = [expand(i.args, variables) for i in instructions if i.command == "RUN"]
    installs = [r for r in runs if "pip install" in r]
    assert len(installs) == 1, "one layer installs gpuhub"
    run = installs[0]
    mount = re.search(r"--mount=type=bind,source=(\S+),target=(\S+)", run)
    assert mount, "the wheel is bind-mounted, so no layer keeps a copy"
    source, target = mount.groups()
    assert source == "dist"
    words = shlex.split(run)
    (requirement,) = [w for w in words if w.endswith("]") and WHEEL in w]
    path, _, extras = requirement.partition("[")
    assert path == f"{target}/{WHEEL}"
    assert set(extras.rstrip("]").split(",")) == IMAGES[name][1]
    assert "--no-cache-dir" in words
    assert dockerignore_allows(f"dist/{WHEEL}"), ".dockerignore would hide the wheel"
    if IMAGES[name][1] >= {"lab"}:
        assert any(w.startswith("papermill") for w in words)


@pytest.mark.parametrize("name", [n for n, spec in IMAGES.items() if spec[2]])
def test_notebook_images_load_the_magics_in_every_kernel(name: str) -> None:
    instructions = parse(ROOT / "images" / name / "Dockerfile")
    copies = [i.args for i in instructions if i.command == "COPY"]
    (copy,) = copies
    words = [w for w in copy.split() if not w.startswith("--")]
    source, destination = words
    assert (ROOT / source).is_file()
    assert dockerignore_allows(source)
    # IPython reads <sys.prefix>/etc/ipython for every kernel; ~/.ipython is under the
    # user's home volume and would hide anything the image put there.
    assert destination == "${CONDA_DIR}/etc/ipython/ipython_kernel_config.py"
    assert source == "jupyter_config/ipython/ipython_kernel_config.py"


def test_dockerignore_keeps_the_context_small() -> None:
    for heavy in ("node_modules/x", ".venv/bin/python", ".git/HEAD", "tests/deploy/test_images.py"):
        assert not dockerignore_allows(heavy)


def test_wheel_builds_with_what_the_images_need(wheel: Path) -> None:
    assert wheel.is_file()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"gpuhub-{VERSION}.dist-info/METADATA").decode()
    assert "gpuhub/__init__.py" in names
    assert "gpuhub_lab/__init__.py" in names
    # The server extension is enabled wherever the wheel is installed (etc/jupyter).
    assert (
        f"gpuhub-{VERSION}.data/data/etc/jupyter/jupyter_server_config.d/gpuhub_lab.json" in names
    )
    # The prebuilt lab extension ships in the wheel (no Node.js in the images).
    assert f"gpuhub-{VERSION}.data/data/share/jupyter/labextensions/gpuhub/package.json" in names
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))
    for _, needed, _ in IMAGES.values():
        assert needed <= extras


def test_make_images_builds_all_three(tmp_path: Path) -> None:
    result = subprocess.run(
        ["make", "-n", "images", "IMAGE_PREFIX=registry.example.org/lab"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("pip wheel --no-deps --no-build-isolation . -w dist" in line for line in lines)
    builds = [shlex.split(line) for line in lines if line.startswith("docker build")]
    assert len(builds) == 3
    for words, (name, image) in zip(
        builds,
        [
            ("hub", "gpuhub-hub"),
            ("notebook", "gpuhub-notebook"),
            ("notebook-cpu", "gpuhub-notebook-cpu"),
        ],
        strict=True,
    ):
        assert words[words.index("-f") + 1] == f"images/{name}/Dockerfile"
        assert words[words.index("--build-arg") + 1] == f"GPUHUB_VERSION={VERSION}"
        assert words[words.index("-t") + 1] == f"registry.example.org/lab/{image}:{VERSION}"
        assert words[-1] == "."  # the repository root is the context (.dockerignore applies)


def test_chart_defaults_name_the_images_make_builds() -> None:
    import yaml

    values = yaml.safe_load((ROOT / "helm" / "gpuhub" / "values.yaml").read_text())["jupyterhub"]
    prefix = re.search(r"^IMAGE_PREFIX \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert prefix
    assert values["hub"]["image"] == {"name": f"{prefix[1]}/gpuhub-hub", "tag": VERSION}
    assert values["singleuser"]["image"] == {"name": f"{prefix[1]}/gpuhub-notebook", "tag": VERSION}
