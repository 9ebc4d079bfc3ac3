"""docs/admin-guide.md as the tests read it: its YAML files by name (each block's first-line
comment, `# my-values.yaml`) and its shell commands, parsed once."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from harness.helm import ROOT

GUIDE = ROOT / "docs" / "admin-guide.md"


@dataclass
class Guide:
    files: dict[str, str] = field(default_factory=dict)  # name -> YAML text
    commands: list[list[str]] = field(default_factory=list)


def parse_guide() -> Guide:
    guide = Guide()
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", GUIDE.read_text(), re.M | re.S):
        if lang == "":
            continue  # a diagram
        if lang == "yaml":
            first = body.splitlines()[0]
            match = re.fullmatch(r"# ([\w.-]+\.yaml)", first)
            assert match, f"YAML block without a file name comment: {first!r}"
            guide.files[match[1]] = body
        elif lang == "bash":
            text = body.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    guide.commands.append(shlex.split(line))
        else:
            raise AssertionError(f"code block of unknown language {lang!r} in the guide")
    return guide


GUIDE_CONTENT = parse_guide()


def is_manifest(doc: dict[str, Any]) -> bool:
    return "apiVersion" in doc and "kind" in doc


def documents(name: str) -> list[dict[str, Any]]:
    """The YAML documents of a guide file (Kubernetes manifests may be several, `---`)."""
    return [doc for doc in yaml.safe_load_all(GUIDE_CONTENT.files[name]) if doc]


def is_manifest_file(name: str) -> bool:
    return all(is_manifest(doc) for doc in documents(name))
