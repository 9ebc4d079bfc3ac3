"""What users saw go wrong in gpuhub's sentences, as one check every message sweep shares:
doubled words ("NVIDIA GPU GPUs"), raw keys and environment variables ("gpus: …", "no
GPUHUB_JOBS_URL"), Python literals ("got True", "'gpu'"), wrong plurals ("1 cores") and
sentences that do not start with a capital, doubled full stops ("GPUs..") and a space before
one ("held ."). Quoted text ("…") is what the user typed or must type, so it is not held
against the sentence."""

from __future__ import annotations

import re
from typing import Any

_QUOTED = re.compile(r'"[^"]*"')
_DOUBLED = re.compile(r"\b([A-Za-z]+?)s?\s+\1s?\b", re.IGNORECASE)
_RAW_KEY = re.compile(r"\b[a-z]+_[a-z_]+\b|\bGPUHUB_\w+|^\w+: ")
_PYTHON = re.compile(r"\b(True|False|None)\b|(?<![\w])'[^'\s]+'(?![\w])")
_ONE_PLURAL = re.compile(r"(?<![\d.])1 (cores|GPUs|cells|nodes|workers|CPUs)\b")
# Two full stops where a sentence was ended twice (an ellipsis is "…"), or a space before one
# that ends a sentence (" .ipynb" is a file's extension, not a full stop).
_DOUBLED_STOP = re.compile(r"\.\.|\s\.(?!\w)")


def loose_stop(message: str) -> str | None:
    """A doubled full stop ("GPUs..") or a space before one ("held ."), outside quoted text;
    None when there is none."""
    match = _DOUBLED_STOP.search(_QUOTED.sub('""', message))
    return match[0] if match else None


def problems(message: str) -> list[str]:
    """What is wrong with one message, in words; empty when it reads right."""
    text = _QUOTED.sub('""', message)
    found = []
    if match := _DOUBLED.search(text):
        found.append(f"doubled word {match[0]!r}")
    if match := _RAW_KEY.search(text):
        found.append(f"raw key {match[0]!r}")
    if match := _PYTHON.search(text):
        found.append(f"Python literal {match[0]!r}")
    if match := _ONE_PLURAL.search(text):
        found.append(f"plural after 1: {match[0]!r}")
    if stop := loose_stop(message):
        found.append(f"doubled or loose full stop {stop!r}")
    if message[:1].islower():
        found.append("starts lower-case")
    return found


def visible_text(page: str) -> list[str]:
    """The text a reader sees in an HTML fragment (no script or style), one string per block
    of inline text as a browser runs it together."""
    import html.parser

    class Text(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.blocks: list[str] = [""]
            self.skip = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            self.skip += tag in ("script", "style")
            if tag in ("div", "p", "br", "label", "legend", "fieldset", "option", "select"):
                self.blocks.append("")

        def handle_endtag(self, tag: str) -> None:
            self.skip -= tag in ("script", "style")

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.blocks[-1] += data

    parser = Text()
    parser.feed(page)
    return [" ".join(b.split()) for b in parser.blocks if b.strip()]
