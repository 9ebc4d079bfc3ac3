"""The chart's GPU-hour budgets (``gpuHours``) and line (``line``): rendered offline, the
ConfigMap's hub.yaml and the hub's extraConfig run as z2jh's hub runs them, and the result read
by a real GPUSpawner's own parsers (``gpu_budget_config``, ``gpu_line_order``), so that a key
the chart spells wrong fails here as it would fail the hub. Wrong values stop ``helm template``
and ``helm lint`` with a sentence naming them. The cluster's side of a fair queue (RBAC asked
of the apiserver) is tests/k8s/test_kueue_fair.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhub.core.budgets import BudgetConfig, BudgetConfigError, PeriodStart
from gpuhub.core.line_order import DEFAULT_HALF_LIFE, LineOrder
from harness.helm import (
    HELM,
    by_kind,
    exec_extra_config,
    helm,
    hub_values,
    hub_yaml,
    make_chart,
    make_spawner,
    render,
    service_config,
)
from tests.support.guide import documents

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")

# What the admin guide's budget-values.yaml says, as the hub's trait is written by hand.
GUIDE_BUDGETS: dict[str, Any] = {
    "default": {"hours": 20, "per": "week"},
    "groups": {
        "students": {"hours": 2.5, "per": "day"},
        "staff": {"hours": 500, "per": "month", "shared": True},
    },
    "period_start": "monday 00:00",
    "timezone": "Europe/Berlin",
    "at_limit": "refuse",
    "grace": 600,
}


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chart(tmp_path_factory.mktemp("budgets-chart"))


def hub_spawner(objects: list[dict[str, Any]], tmp_path: Path) -> Any:
    """A GPUSpawner configured as the hub would be by what the chart rendered."""
    data = by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["hub.yaml"]
    return make_spawner(exec_extra_config(hub_values(objects), data, tmp_path), groups=[])


def localqueue_verbs(objects: list[dict[str, Any]], role: str) -> list[str]:
    (rule,) = [
        r for r in by_kind(objects, "Role", role)["rules"] if "localqueues" in r["resources"]
    ]
    return sorted(rule["verbs"])


def refusal(chart: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    """Helm's message for values it must refuse."""
    with pytest.raises(AssertionError) as refused:
        render(chart, values=values, tmp=tmp_path)
    return str(refused.value)


def sentence(chart: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    """The one sentence the chart's own checks fail ``helm template`` with."""
    first = refusal(chart, tmp_path, values).splitlines()[0]
    assert first.startswith("Error: execution error at (gpuhub/templates/"), first
    return first.split("): ", 1)[1]


async def test_defaults_render_no_budgets_and_a_first_come_line(
    chart: Path, tmp_path: Path, no_cluster: None
) -> None:
    objects = render(chart)
    assert hub_yaml(objects)["gpu_hours"] is None
    spawner = hub_spawner(objects, tmp_path)
    assert spawner.gpu_budget_config() is None
    assert spawner.gpu_line_order() == LineOrder("fifo", DEFAULT_HALF_LIFE)
    assert service_config(objects)["kueue"]["line_order"] == "fifo"
    # The chart's other defaults (periodStart, timezone, atLimit, grace) are the hub's own.
    only_default = {"gpuHours": {"default": {"hours": 20, "per": "week"}}}
    budgets = hub_spawner(render(chart, values=only_default, tmp=tmp_path), tmp_path)
    assert budgets.gpu_budget_config() == BudgetConfig.from_config(
        {"default": {"hours": 20, "per": "week"}}
    )


async def test_the_guides_values_reach_the_hub_the_service_and_rbac(
    chart: Path, tmp_path: Path, no_cluster: None
) -> None:
    (budget_values,) = documents("budget-values.yaml")
    (fair_values,) = documents("fair-values.yaml")
    values = {**budget_values, **fair_values, "jobs": {"kueue": {"queueName": "gpu-jobs"}}}
    values["line"] = {**values["line"], "usageHalfLife": 86400}
    values["gpuHours"]["groups"]["night"] = {
        "hours": 0.5,
        "per": "day",
        "periodStart": "22:00",
        "timezone": "UTC",
    }
    objects = render(chart, values=values, tmp=tmp_path)
    spawner = hub_spawner(objects, tmp_path)
    expected = {**GUIDE_BUDGETS, "groups": dict(GUIDE_BUDGETS["groups"])}
    expected["groups"]["night"] = {
        "hours": 0.5,
        "per": "day",
        "period_start": "22:00",
        "timezone": "UTC",
    }
    config = spawner.gpu_budget_config()
    assert config == BudgetConfig.from_config(expected)
    assert config.groups["staff"].shared and config.groups["night"].start == PeriodStart(22, 0)
    assert spawner.gpu_line_order() == LineOrder("fair", 86400.0)
    assert service_config(objects)["kueue"] == {"queue_name": "gpu-jobs", "line_order": "fair"}
    # line.order is the switch for the hub's and the service's right to make LocalQueues.
    assert localqueue_verbs(objects, "jhub-gpuhub-gpuhub-hub-kueue") == ["create", "get"]
    assert localqueue_verbs(objects, "gpuhub-service") == ["create", "get"]
    fifo = render(chart, values={**values, "line": {"order": "fifo"}}, tmp=tmp_path)
    assert localqueue_verbs(fifo, "jhub-gpuhub-gpuhub-hub-kueue") == ["get"]
    assert localqueue_verbs(fifo, "gpuhub-service") == ["get"]


async def test_older_values_files_keep_working_and_conflicts_are_refused(
    chart: Path, tmp_path: Path, no_cluster: None
) -> None:
    # The hub's traits written under jupyterhub.hub.config.GPUSpawner, as before `line` and
    # `gpuHours` existed: still the hub's setting, the service's and the RBAC's.
    old: dict[str, Any] = {
        "line_order": "fair",
        "usage_half_life": 3600,
        "kueue_queue_name": "gpu-jobs",
    }
    old["gpu_hours"] = {"default": {"hours": 1, "per": "day"}}
    objects = render(chart, values={"jupyterhub": {"hub": {"config": {"GPUSpawner": old}}}})
    spawner = hub_spawner(objects, tmp_path)
    assert spawner.gpu_line_order() == LineOrder("fair", 3600.0)
    assert spawner.gpu_budget_config() == BudgetConfig.from_config(old["gpu_hours"])
    assert localqueue_verbs(objects, "jhub-gpuhub-gpuhub-hub-kueue") == ["create", "get"]
    assert service_config(objects)["kueue"]["line_order"] == "fair"

    def spawner_values(**traits: Any) -> dict[str, Any]:
        return {"jupyterhub": {"hub": {"config": {"GPUSpawner": traits}}}}

    assert sentence(
        chart, tmp_path, {**spawner_values(line_order="fifo"), "line": {"order": "fair"}}
    ) == (
        'jupyterhub.hub.config.GPUSpawner.line_order is "fifo" but line.order is "fair": set '
        "only line.order, which the hub, the jobs service and the chart's RBAC share."
    )
    assert sentence(
        chart, tmp_path, {**spawner_values(usage_half_life=3600), "line": {"usageHalfLife": 60}}
    ) == (
        "jupyterhub.hub.config.GPUSpawner.usage_half_life is 3600 but line.usageHalfLife is "
        "60: set only line.usageHalfLife."
    )
    both = {
        **spawner_values(gpu_hours=old["gpu_hours"]),
        "gpuHours": {"groups": {"a": old["gpu_hours"]["default"]}},
    }
    assert sentence(chart, tmp_path, both) == (
        "jupyterhub.hub.config.GPUSpawner.gpu_hours and gpuHours are both set: keep only "
        "gpuHours, which the chart hands to the hub."
    )


def test_wrong_values_are_refused_by_name(chart: Path, tmp_path: Path) -> None:
    bad = {
        "gpuHours": {
            "default": {"hours": -1, "per": "year", "shared": True},
            "groups": {"staff": {"per": "week"}},
            "atLimit": "stop",
            "grace": -5,
            "weekly": True,
        },
        "line": {"order": "random", "usageHalfLife": 0},
    }
    message = refusal(chart, tmp_path, bad)
    for line in (
        "- gpuHours.default.hours: Must be greater than or equal to 0",
        '- gpuHours.default.per: gpuHours.default.per must be one of the following: "day", '
        '"week", "month"',
        "- gpuHours.default: Additional property shared is not allowed",
        "- gpuHours.groups.staff: hours is required",
        '- gpuHours.atLimit: gpuHours.atLimit must be one of the following: "refuse", "idle_only"',
        "- gpuHours.grace: Must be greater than or equal to 0",
        "- gpuHours: Additional property weekly is not allowed",
        '- line.order: line.order must be one of the following: "fifo", "fair"',
        "- line.usageHalfLife: Must be greater than 0",
    ):
        assert line in message.splitlines(), (line, message)
    # helm lint says the same.
    values = tmp_path / "bad.yaml"
    values.write_text(yaml.safe_dump({"line": {"order": "random"}}))
    linted = helm("lint", "--strict", chart, "-f", values)  # helm 3.10: no --kube-version
    assert linted.returncode != 0
    assert 'line.order must be one of the following: "fifo", "fair"' in linted.stdout


def test_period_starts_and_zones_the_chart_takes_are_the_hubs(chart: Path, tmp_path: Path) -> None:
    """The chart checks periodStart as the hub's parser does (one sentence naming the value)."""
    good = ["monday 00:00", "Tue 06:30", "wednes 9:05", "1 00:00", "28 23:59", "07:00"]
    bad = ["mo 00:00", "mondayx 00:00", "29 00:00", "24:00", "monday 9:60"]
    for text in good:
        PeriodStart.parse(text, "start")
    for text in bad:
        with pytest.raises(BudgetConfigError):
            PeriodStart.parse(text, "start")
    groups = {
        f"g{i}": {"hours": 1, "per": "week", "periodStart": text} for i, text in enumerate(good)
    }
    objects = render(chart, values={"gpuHours": {"groups": groups}}, tmp=tmp_path)
    rendered = BudgetConfig.from_config(hub_yaml(objects)["gpu_hours"])
    assert rendered is not None
    assert [rendered.groups[g].start for g in groups] == [
        PeriodStart.parse(t, "start") for t in good
    ]
    for text in bad:
        values = {
            "gpuHours": {"groups": {"staff": {"hours": 1, "per": "week", "periodStart": text}}}
        }
        assert sentence(chart, tmp_path, values) == (
            'gpuHours.groups.staff.periodStart must be "HH:MM", "<weekday> HH:MM" or "<day of '
            f'month 1-28> HH:MM" (such as "monday 00:00" or "1 06:00"), not "{text}".'
        )
    wrong_zone = {"gpuHours": {"timezone": "Europe/Ber lin", "default": {"hours": 1, "per": "day"}}}
    assert sentence(chart, tmp_path, wrong_zone) == (
        'gpuHours.timezone must be an IANA time zone such as "Europe/Berlin" or "UTC", not '
        '"Europe/Ber lin".'
    )
