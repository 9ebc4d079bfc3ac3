"""gpuhub_lab: the JupyterLab side of gpuhub (server extension, GPU metrics, magics)."""

from __future__ import annotations

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "gpuhub_lab"}]


def _load_jupyter_server_extension(server_app) -> None:  # type: ignore[no-untyped-def]
    """Registered by jupyter_config/jupyter_server_config.d/gpuhub_lab.json."""
    server_app.log.info("gpuhub_lab %s loaded", __version__)
