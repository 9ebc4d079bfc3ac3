"""The local cluster's own tests run as the suite's do, also when only this folder is given to
pytest: on the cluster fixtures of ``harness/cluster.py`` (``kube``: a namespace of the
running cluster) and with ``tests/conftest.py``'s hooks (the ``e2e`` check, which worker a
test runs on side by side)."""

from __future__ import annotations

from tests.conftest import pytest_collection_modifyitems, pytest_runtest_protocol

pytest_plugins = ["harness.cluster"]

__all__ = ["pytest_collection_modifyitems", "pytest_runtest_protocol"]
