"""What a container runs when its spec names no command: the process node pulls no image, so
it knows one image's entrypoint only, the pause image's (``registry.k8s.io/pause``, any tag:
what z2jh's user placeholders and image pullers run), and does what it does; for any other
the container's status says what is missing."""

from __future__ import annotations

import re
import sys
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
