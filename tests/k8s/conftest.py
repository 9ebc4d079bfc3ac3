"""Fixtures of tests/support that tests in this folder ask for by name."""

from __future__ import annotations

from tests.support.manifests import no_cluster

__all__ = ["no_cluster"]
