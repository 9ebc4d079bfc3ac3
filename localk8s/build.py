"""Build the cluster's binaries from their Go modules, cached by version outside the work tree.

``python -m localk8s.build`` builds what is missing (``--update`` first rewrites the
wrapper modules from the pins in :mod:`localk8s.components`). Each binary lands in
``$GPUHUB_CLUSTER_CACHE`` (default ``~/.cache/gpuhub-cluster``) under a folder named by a
hash of its wrapper module, package and link flags, so a second run finds it and a new pin
builds beside the old one. Go's own module and build caches (``GOMODCACHE``, ``GOCACHE``)
stay where Go keeps them; they make a rebuild after a pin change take minutes, not tens.

Never a downloaded binary: everything is ``go build`` from the Go module proxy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from .components import BY_NAME, COMPONENTS, K8S_FAMILY_MODULES, KUBERNETES, Component

CACHE = Path(os.environ.get("GPUHUB_CLUSTER_CACHE", Path.home() / ".cache" / "gpuhub-cluster"))


class BuildError(RuntimeError):
    """A component did not build; the message is one sentence for the person at the terminal."""


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CGO_ENABLED="0",
        GOFLAGS="-mod=readonly",  # the committed go.sum is the lock; a drift is an error
        GOTOOLCHAIN="local",
    )
    return env


def binary_path(component: Component) -> Path:
    """Where ``component``'s binary lives in the cache (whether or not it is built yet)."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):  # main.go: a module's own main package
        path = component.module_dir / name
        if path.exists():
            digest.update(path.read_bytes())
    for source in own_sources(component):  # gpuhub's own Go code: a change is a new binary
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    digest.update(component.package.encode())
    digest.update("\0".join(component.ldflags).encode())
    return (
        CACHE
        / "bin"
        / f"{component.name}-{component.version}-{digest.hexdigest()[:12]}"
        / (component.name)
    )


def own_sources(component: Component) -> list[Path]:
    """The Go files of ``component``'s main package when it is one of its wrapper module's
    own (``gpuhub.local/cluster/<family>/...``, e.g. process-kubelet), else none."""
    module = f"gpuhub.local/cluster/{component.family}"
    if component.package != module and not component.package.startswith(module + "/"):
        return []
    folder = component.module_dir / component.package[len(module) :].lstrip("/")
    return sorted(folder.glob("*.go"))


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "Go is not installed: the local cluster is built from Go modules (Go 1.26 or "
            "newer, with the module proxy reachable)."
        )
    return go


def _last_error(log: str) -> str:
    """The line of a Go build log that says what went wrong."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"(error|cannot|undefined|missing|not found|refused|timeout)", line, re.I):
            return line
    return lines[-1] if lines else "no output"


def build(component: Component, *, quiet: bool = False) -> Path:
    """Build ``component`` unless its cached binary exists; returns the binary's path."""
    target = binary_path(component)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{component.name}.log"
    partial = target.with_name(f".{component.name}.partial")
    command = [_go(), "build", "-trimpath", "-o", str(partial)]
    if component.ldflags:
        command += ["-ldflags", " ".join(("-s", "-w", *component.ldflags))]
    else:
        command += ["-ldflags", "-s -w"]
    command.append(component.package)
    if not quiet:
        print(f"building {component.title} ...", flush=True)
    started = time.monotonic()
    with log_path.open("w") as log:
        result = subprocess.run(
            command, cwd=component.module_dir, env=go_env(), stdout=log, stderr=subprocess.STDOUT
        )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(
            f"Building {component.name} {component.version} from {component.module} failed: "
            f"{_last_error(log_path.read_text(errors='replace'))} (full log: {log_path})."
        )
    partial.rename(target)  # atomic: an interrupted build never leaves a half binary
    if not quiet:
        print(f"built {component.name} in {time.monotonic() - started:.0f} s", flush=True)
    return target


def build_all(names: Iterable[str] | None = None, *, quiet: bool = False) -> dict[str, Path]:
    """Build (or find) every component, or those named; returns name -> binary."""
    chosen = [BY_NAME[n] for n in names] if names else list(COMPONENTS)
    return {c.name: build(c, quiet=quiet) for c in chosen}


def missing() -> list[Component]:
    return [c for c in COMPONENTS if not binary_path(c).exists()]


# -- rewriting the wrapper modules ----------------------------------------------------------


def _staging_modules(go: str) -> list[str]:
    """k8s.io/kubernetes's staging modules: the ones its go.mod requires at v0.0.0."""
    out = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES}"],
        check=True,
        capture_output=True,
        text=True,
        env=go_env(),
    )
    gomod = Path(json.loads(out.stdout)["GoMod"]).read_text()
    return sorted(set(re.findall(r"^\s+(k8s\.io/[\w.-]+) v0\.0\.0$", gomod, re.M)))


def update_modules() -> None:
    """Rewrite both wrapper modules from the pins, then let ``go mod tidy`` write go.sum."""
    go = _go()
    staging_version = "v0." + KUBERNETES.split(".", 1)[1]  # v1.36.3 -> v0.36.3
    # Tools of the modules it requires; its own main packages (process-kubelet) need no line.
    k8s_tools = [c.package for c in COMPONENTS if c.family == "k8s" and not own_sources(c)]
    lines = ["module gpuhub.local/cluster/k8s", "", "go 1.26.0", "", "require ("]
    lines += [f"\t{m} {v}" for m, v in K8S_FAMILY_MODULES.items()]
    lines += [")", "", "tool ("] + [f"\t{t}" for t in k8s_tools] + [")", "", "replace ("]
    lines += [f"\t{m} => {m} {staging_version}" for m in _staging_modules(go)]
    lines += [")", ""]
    etcd, coredns = BY_NAME["etcd"], BY_NAME["coredns"]
    modules = {
        "k8s": "\n".join(lines),
        "etcd": (
            f"module gpuhub.local/cluster/etcd\n\ngo 1.26.0\n\nrequire {etcd.module} "
            f"{etcd.version}\n\ntool {etcd.package}\n"
        ),
        # Its main package is the module's own main.go (kept): the plugins it links.
        "coredns": (
            f"module {coredns.package}\n\ngo 1.26.0\n\nrequire {coredns.module} {coredns.version}\n"
        ),
    }
    env = go_env() | {"GOFLAGS": "-mod=mod"}
    for family, text in modules.items():
        folder = COMPONENTS[0].module_dir.parent / family
        (folder / "go.mod").write_text(text)
        subprocess.run([go, "mod", "tidy"], cwd=folder, check=True, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localk8s.build", description=__doc__)
    parser.add_argument("components", nargs="*", help="only these (default: all)")
    parser.add_argument("--update", action="store_true", help="rewrite the wrapper modules first")
    args = parser.parse_args(argv)
    unknown = [n for n in args.components if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown component {unknown[0]!r}; known: {', '.join(BY_NAME)}")
    try:
        if args.update:
            update_modules()
        started = time.monotonic()
        built = build_all(args.components or None)
    except BuildError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{len(built)} binaries ready in {CACHE / 'bin'} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
