"""The ``e2e`` marker: tests that start a real JupyterHub, Jupyter server, service or browser.

``make pytest-fast`` runs ``pytest -m "not e2e"``. So that the marker cannot drift from the
truth, every harness that starts such a process calls :func:`require` first: a test that
starts one without the marker fails, naming what it started. ``browser`` tests are ``e2e`` by
definition (``tests/conftest.py`` adds the marker).
"""

from __future__ import annotations

import pytest

_current: pytest.Item | None = None


def running(item: pytest.Item | None) -> None:
    """Remember the test being set up, run or torn down (called by ``tests/conftest.py``)."""
    global _current
    _current = item


def require(what: str) -> None:
    """Fail the current test unless it is marked ``e2e``: it is about to start ``what``."""
    item = _current
    if item is not None and item.get_closest_marker("e2e") is None:
        pytest.fail(
            f"{item.nodeid} starts {what} but is not marked e2e; add `pytestmark = "
            "pytest.mark.e2e` (or mark the test) so `make pytest-fast` leaves it out",
            pytrace=False,
        )
