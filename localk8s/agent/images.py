"""What a container runs when its spec names no command: the process node pulls no image, so
it knows one image's entrypoint only, the pause image's (``registry.k8s.io/pause``, any tag:
what z2jh's user placeholders and image pullers run), and does what it does; for any other
the container's status says what is missing."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

# pause: sleep until a signal; SIGTERM and SIGINT end it with 0 (kubernetes/build/pause).
PAUSE_PROGRAM = (
    "import signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM):  # SIGTERM last: caught means ready\n"
    "    signal.signal(s, lambda *_: sys.exit(0))\n"
    "while True:\n"
    "    signal.pause()\n"
)
_PAUSE = re.compile(r"(registry\.k8s\.io|k8s\.gcr\.io)/pause([:@].*)?")


def is_pause(image: str) -> bool:
    """Whether ``image`` is Kubernetes' pause image (the old registry's name too)."""
    return _PAUSE.fullmatch(image.strip()) is not None


def entrypoint(spec: dict[str, Any]) -> list[str]:
    """The program a container with neither command nor args runs here: pause's, or none."""
    return [sys.executable, "-c", PAUSE_PROGRAM] if is_pause(spec.get("image", "")) else []


def missing_entrypoint(container: str, image: str) -> str:
    """The container status message for a container this node cannot start."""
    return (
        f"container {container!r} names neither command nor args, so it would run the "
        f"entrypoint of image {image!r}; the process node pulls no image and knows only the "
        "pause image's: give the command in the pod spec"
    )


# Images whose user is not root (their Dockerfile's USER): Jupyter's docker-stacks and
# JupyterHub's singleuser image run as jovyan (uid 1000), as KubeSpawner's user pods expect.
_NON_ROOT = re.compile(
    r"((quay\.io|docker\.io)/)?(jupyterhub/singleuser|jupyter/[a-z-]+-notebook)([:@].*)?"
)


def runs_as_non_root(pod: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether the container would run as a user other than root on a kubelet: its or its
    pod's ``securityContext`` says so (``runAsUser`` not 0, ``runAsNonRoot``), or its image's
    user is not root. Here every container runs as the agent's user (root)."""
    for context in (spec.get("securityContext") or {}, pod["spec"].get("securityContext") or {}):
        if "runAsUser" in context:
            return bool(context["runAsUser"])
        if context.get("runAsNonRoot"):
            return True
    return _NON_ROOT.fullmatch(spec.get("image", "").strip()) is not None


def as_root_jupyter(folder: Path) -> str:
    """A Jupyter config folder (for ``JUPYTER_CONFIG_PATH``) that lets a Jupyter server run as
    root, which it refuses unless told: given to a container that would not be root on a
    kubelet, so that its server starts as it would there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}\n')
    return str(folder)
