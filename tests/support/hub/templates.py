"""The hub's templates (gpuhub/hub/web/templates/hub) in a Jinja environment of their own, as
the fleet page renders them, for tests that build the page in-process without a hub."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader

from gpuhub.hub.web import fleet


def hub_templates() -> Environment:
    folder = Path(fleet.__file__).with_name("templates") / "hub"
    return Environment(loader=FileSystemLoader(folder), autoescape=True, enable_async=True)
