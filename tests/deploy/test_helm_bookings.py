"""The chart's GPU bookings (``bookings``): rendered offline, the ConfigMap's hub.yaml and the
hub's extraConfig run as z2jh's hub runs them, so that the hub starts with
``GPUSpawner.bookings`` in the shape the hub reads (docs/architecture.md, bookings), keys
spelled as the hub spells them. Wrong values stop ``helm template`` and ``helm lint`` with
Helm's message naming them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from traitlets.config import Config

from harness.helm import (
    HELM,
    by_kind,
    exec_extra_config,
    helm,
    hub_values,
    hub_yaml,
    make_chart,
    render,
)
from tests.support.guide import GUIDE, documents

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")

STAFF = {"maxGpus": 4, "maxHours": 8, "daysAhead": 14}


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chart(tmp_path_factory.mktemp("bookings-chart"))


def hub_config(objects: list[dict[str, Any]], tmp_path: Path) -> Config:
    """The traitlets config the hub starts with, from what the chart rendered."""
    data = by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["hub.yaml"]
    return exec_extra_config(hub_values(objects), data, tmp_path)


def refusal(chart: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    with pytest.raises(AssertionError) as refused:
        render(chart, values=values, tmp=tmp_path)
    return str(refused.value)


def test_defaults_render_no_bookings(chart: Path, tmp_path: Path) -> None:
    objects = render(chart)
    assert hub_yaml(objects)["bookings"] is None
    assert "bookings" not in hub_config(objects, tmp_path).GPUSpawner


def test_bookings_reach_the_hub_in_its_own_spelling(chart: Path, tmp_path: Path) -> None:
    values = {
        "bookings": {
            "groups": {
                "staff": STAFF,
                "Class_2026": {"maxGpus": 2, "maxHours": 1.5, "daysAhead": 1},
            },
            "adminsBookForGroups": False,
            "warnBefore": 300,
        }
    }
    config = hub_config(render(chart, values=values, tmp=tmp_path), tmp_path)
    assert config.GPUSpawner.bookings == {
        "groups": {
            "staff": {"max_gpus": 4, "max_hours": 8, "days_ahead": 14},
            # A group's name is the hub's, never re-spelled.
            "Class_2026": {"max_gpus": 2, "max_hours": 1.5, "days_ahead": 1},
        },
        "admins_book_for_groups": False,
        "warn_before": 300,
    }
    # The chart's defaults for the rest: the contract's shape.
    only_groups = {"bookings": {"groups": {"staff": STAFF}}}
    config = hub_config(render(chart, values=only_groups, tmp=tmp_path), tmp_path)
    assert config.GPUSpawner.bookings == {
        "groups": {"staff": {"max_gpus": 4, "max_hours": 8, "days_ahead": 14}},
        "admins_book_for_groups": True,
        "warn_before": 900,
    }


def test_bookings_in_hub_config_keep_working_and_both_are_refused(
    chart: Path, tmp_path: Path
) -> None:
    own = {"groups": {"staff": {"max_gpus": 1, "max_hours": 2, "days_ahead": 3}}}
    spawner = {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"bookings": own}}}}}
    config = hub_config(render(chart, values=spawner, tmp=tmp_path), tmp_path)
    assert config.GPUSpawner.bookings == own
    message = refusal(chart, tmp_path, {**spawner, "bookings": {"groups": {"staff": STAFF}}})
    first = message.splitlines()[0]
    assert first.split("): ", 1)[1] == (
        "jupyterhub.hub.config.GPUSpawner.bookings and bookings are both set: keep only "
        "bookings, which the chart hands to the hub."
    ), message


def test_wrong_values_are_refused_by_name(chart: Path, tmp_path: Path) -> None:
    bad = {
        "bookings": {
            "groups": {
                "staff": {"maxGpus": 0, "maxHours": 0, "daysAhead": -1},
                "students": {"maxGpus": 1.5, "maxHours": 2, "daysAhead": 1, "max_gpus": 1},
                "night": {"maxGpus": 1, "maxHours": 2},
            },
            "adminsBookForGroups": "yes",
            "warnBefore": -1,
            "weekly": True,
        }
    }
    message = refusal(chart, tmp_path, bad)
    for line in (
        "- bookings.groups.staff.maxGpus: Must be greater than or equal to 1",
        "- bookings.groups.staff.maxHours: Must be greater than 0",
        "- bookings.groups.staff.daysAhead: Must be greater than 0",
        "- bookings.groups.students.maxGpus: Invalid type. Expected: integer, given: number",
        "- bookings.groups.students: Additional property max_gpus is not allowed",
        "- bookings.groups.night: daysAhead is required",
        "- bookings.adminsBookForGroups: Invalid type. Expected: boolean, given: string",
        "- bookings.warnBefore: Must be greater than or equal to 0",
        "- bookings: Additional property weekly is not allowed",
    ):
        assert line in message.splitlines(), (line, message)
    # helm lint says the same.
    values = tmp_path / "bad-bookings.yaml"
    values.write_text(yaml.safe_dump({"bookings": {"warnBefore": -1}}))
    linted = helm("lint", "--strict", chart, "-f", values)
    assert linted.returncode != 0
    assert "bookings.warnBefore: Must be greater than or equal to 0" in linted.stdout


def test_the_guides_values_reach_the_hub_as_the_guide_writes_the_trait(
    chart: Path, tmp_path: Path
) -> None:
    (values,) = documents("booking-values.yaml")
    config = hub_config(render(chart, values=values, tmp=tmp_path), tmp_path)
    assert config.GPUSpawner.bookings == {
        "groups": {
            "staff": {"max_gpus": 4, "max_hours": 8, "days_ahead": 14},
            "students": {"max_gpus": 1, "max_hours": 2, "days_ahead": 3},
        },
        "admins_book_for_groups": True,
        "warn_before": 900,
    }
    guide = GUIDE.read_text()
    assert '"students": {"max_gpus": 1, "max_hours": 2, "days_ahead": 3}},' in guide


def rules_for(role: dict[str, Any], resource: str) -> list[str]:
    (rule,) = [r for r in role["rules"] if resource in r["resources"]]
    return sorted(rule["verbs"])


def test_bookings_on_kueue_let_the_hub_move_quota_between_queues(chart: Path) -> None:
    """With servers in Kueue (kueue_queue_name), bookings move quota between ClusterQueues
    and make a LocalQueue per booking (gpuhub.hub.monitor.booking_queues); without bookings
    the hub only reads them."""
    spawner: dict[str, Any] = {"kueue_queue_name": "gpus"}
    values: dict[str, Any] = {"jupyterhub": {"hub": {"config": {"GPUSpawner": spawner}}}}
    plain = render(chart, values=values)
    assert rules_for(
        by_kind(plain, "ClusterRole", "jhub-gpuhub-gpuhub-hub-kueue"), "clusterqueues"
    ) == ["get"]
    assert rules_for(by_kind(plain, "Role", "jhub-gpuhub-gpuhub-hub-kueue"), "localqueues") == [
        "get"
    ]
    booked = render(chart, values={**values, "bookings": {"groups": {"staff": STAFF}}})
    cluster = by_kind(booked, "ClusterRole", "jhub-gpuhub-gpuhub-hub-kueue")
    assert rules_for(cluster, "clusterqueues") == [
        "create",
        "delete",
        "get",
        "list",
        "patch",
        "update",
    ]
    assert rules_for(cluster, "resourceflavors") == ["list"]
    local = by_kind(booked, "Role", "jhub-gpuhub-gpuhub-hub-kueue")
    assert rules_for(local, "localqueues") == ["create", "delete", "get", "list"]
    # The jobs service lists them, for a booker's jobs.
    jobs = {**values, "jobs": {"kueue": {"queueName": "gpus"}}}
    assert rules_for(
        by_kind(render(chart, values=jobs), "Role", "gpuhub-service"), "localqueues"
    ) == ["get"]
    jobs["bookings"] = {"groups": {"staff": STAFF}}
    assert rules_for(
        by_kind(render(chart, values=jobs), "Role", "gpuhub-service"), "localqueues"
    ) == ["get", "list"]
    # Bookings set in the hub's own config count the same.
    spawner["bookings"] = {"groups": {"staff": {"max_gpus": 1, "max_hours": 1, "days_ahead": 1}}}
    own = render(chart, values=values)
    assert rules_for(by_kind(own, "Role", "jhub-gpuhub-gpuhub-hub-kueue"), "localqueues") == [
        "create",
        "delete",
        "get",
        "list",
    ]
