"""Where things are in the repository, for code at any depth of the tree."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
