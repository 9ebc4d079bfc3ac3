from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import e2e

pytest_plugins = ["tests.support.cluster"]


# Fixtures that put a test on the shared Kubernetes cluster (tests/support/cluster.py).
CLUSTER_FIXTURES = frozenset({"kube_cluster_config", "kube", "module_kube", "kube_api"})


# First: pytest-xdist reads the groups in its own hook of the same name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        # A browser test drives a real Chromium against a real server: end to end by definition.
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.e2e)
        groups[item] = side_by_side_group(item)
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    # The cluster's tests, the longest group, start first: a worker takes them at once
    # instead of after the rest, when they would be the run's tail.
    items.sort(key=lambda item: groups[item] != "cluster")


def side_by_side_group(item: pytest.Item) -> str:
    """Which tests share a worker when the suite runs side by side (``make pytest``:
    pytest-xdist, ``--dist loadgroup``). Tests on the cluster take turns on one worker:
    they read the cluster's whole capacity (16 kwok GPUs, the process node's 4) and its
    cluster-wide queues, which a neighbour's pods would change. Every other test stays
    with its module, whose module-scoped hub, server or service then starts once."""
    if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker(
        "cluster"
    ):
        return "cluster"
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    e2e.running(item)  # module- and session-scoped fixtures start during their first test
    yield
    e2e.running(None)
