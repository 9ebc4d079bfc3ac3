"""The gpuhub chart with its zero-to-jupyterhub dependency in ``charts/``, ready for Helm.

z2jh cannot be downloaded here, so a chart to install comes from one of, in order: what
`helm dependency update helm/gpuhub` left in ``helm/gpuhub/charts/``; the archive
``GPUHUB_Z2JH_CHART`` names (a jupyterhub-4.4.0.tgz built from z2jh's source); gpuhub's
stand-in (``localk8s/z2jh``, its README says what it does). `make demo-helm` and the tests
both take it from here; nothing here imports the tests.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "gpuhub"
STANDIN = Path(__file__).resolve().parent / "z2jh"
# The values the admin guide shows for the local cluster (docs/admin-guide.md).
LOCAL_VALUES = Path(__file__).resolve().parent / "values-local.yaml"
HELM = REPO / "node_modules" / ".bin" / "helm"
Z2JH_ENV = "GPUHUB_Z2JH_CHART"


def with_standin(dest: Path, *, pods: bool = True) -> Path:
    """A copy of helm/gpuhub under ``dest`` with the stand-in z2jh in its ``charts/``.

    ``pods=False``: the stand-in renders only the hub's Secret, ServiceAccount (and, with
    ``jupyterhub.rbac.create``, its Role), what the chart tests check and create without
    running anything; rbac.create is then off by default, so they see gpuhub's Roles only."""
    chart = dest / "gpuhub"
    shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    standin = chart / "charts" / "jupyterhub"
    shutil.copytree(STANDIN, standin, ignore=shutil.ignore_patterns("README.md"))
    if not pods:
        values_file = standin / "values.yaml"
        values = yaml.safe_load(values_file.read_text())
        values["standIn"]["pods"] = False
        values["rbac"]["create"] = False
        values_file.write_text(yaml.safe_dump(values, sort_keys=False))
    return chart


def dependency_in_chart(chart: Path = CHART) -> Path | None:
    """What `helm dependency update` left in ``chart``'s charts/ for z2jh, if anything."""
    folder = chart / "charts"
    found = sorted(folder.glob("jupyterhub-*.tgz")) if folder.is_dir() else []
    if found:
        return found[-1]
    return folder / "jupyterhub" if (folder / "jupyterhub" / "Chart.yaml").is_file() else None


def installable(dest: Path) -> tuple[Path, str]:
    """The chart to install and where its z2jh came from, in the order the module says.

    Raises ValueError naming the archive if ``GPUHUB_Z2JH_CHART`` names no file."""
    found = dependency_in_chart()
    if found is not None:
        return CHART, f"z2jh from {found.relative_to(REPO)}"
    archive = os.environ.get(Z2JH_ENV, "")
    if archive:
        path = Path(archive).expanduser().resolve()
        if not path.is_file() or not path.name.endswith(".tgz"):
            raise ValueError(
                f"{Z2JH_ENV} must name a chart archive (jupyterhub-4.4.0.tgz); {archive!r} is "
                "not a .tgz file"
            )
        chart = dest / "gpuhub"
        shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
        (chart / "charts").mkdir()
        shutil.copy(path, chart / "charts" / path.name)
        return chart, f"z2jh from {path}"
    return with_standin(dest), "gpuhub's stand-in z2jh (localk8s/z2jh)"
