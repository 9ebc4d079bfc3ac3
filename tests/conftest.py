from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness import e2e

pytest_plugins = ["harness.cluster"]


# Fixtures that put a test on the shared Kubernetes cluster (harness/cluster.py).
CLUSTER_FIXTURES = frozenset({"kube_cluster_config", "kube", "module_kube", "kube_api"})


# First: pytest-xdist reads the groups, and `-m` the marks, in their own hooks of this name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # A browser test drives a real Chromium against a real server: end to end by definition.
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.e2e)
        group = side_by_side_group(item)
        if group == "cluster" and item.get_closest_marker("cluster") is None:
            item.add_marker(pytest.mark.cluster)
        item.add_marker(pytest.mark.xdist_group(group))


def side_by_side_group(item: pytest.Item) -> str:
    """Which tests share a worker when tests run side by side (pytest-xdist, ``--dist
    loadgroup``). Tests on the cluster (marked ``cluster`` here) take turns on one worker:
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
