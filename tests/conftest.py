from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import e2e

pytest_plugins = ["tests.support.cluster"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A browser test drives a real Chromium against a real server: end to end by definition.
    for item in items:
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    e2e.running(item)  # module- and session-scoped fixtures start during their first test
    yield
    e2e.running(None)
