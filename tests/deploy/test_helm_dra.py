"""The chart's RBAC for GPUs claimed through DRA (helm/gpuhub/templates/rbac-dra.yaml): the hub
reads ResourceSlices, claims and DeviceClasses everywhere and makes its servers'
ResourceClaimTemplates in the servers' namespace; the jobs service makes its jobs' templates
in the user namespace; neither may do more, as the real apiserver's authorizer says."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhub.core.policy import Policy
from harness.cluster import Kube
from harness.helm import (
    HELM,
    NAMESPACE,
    by_kind,
    can_i,
    hub_values,
    install,
    make_chart,
    render,
    served_api_versions,
    service_config,
)

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm from npm is not installed")

DRA = f"{NAMESPACE}-gpuhub-gpuhub-dra"
HUB_CLAIMS = f"{NAMESPACE}-gpuhub-gpuhub-hub-claims"
SERVICE_DRA = f"{NAMESPACE}-gpuhub-gpuhub-service-dra"


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chart(tmp_path_factory.mktemp("chart"))


def rules(role: dict) -> dict[tuple[str, str], list[str]]:
    return {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_dra_rbac_is_exactly_what_claims_need(chart: Path) -> None:
    users = "jupyter-users"  # servers' and jobs' (the chart's jobs.namespace)
    objects = render(chart, values={"jobs": {"namespace": users}})
    assert rules(by_kind(objects, "ClusterRole", DRA)) == {
        ("resource.k8s.io", "resourceslices"): ["list", "watch"],
        ("resource.k8s.io", "resourceclaims"): ["list", "watch"],
        ("resource.k8s.io", "deviceclasses"): ["get", "list", "watch"],
    }
    assert [s["name"] for s in by_kind(objects, "ClusterRoleBinding", DRA)["subjects"]] == ["hub"]
    # The jobs service reads only a job's DeviceClass (is it there?).
    assert rules(by_kind(objects, "ClusterRole", SERVICE_DRA)) == {
        ("resource.k8s.io", "deviceclasses"): ["get"]
    }
    assert [s["name"] for s in by_kind(objects, "ClusterRoleBinding", SERVICE_DRA)["subjects"]] == [
        "gpuhub-service"
    ]
    hub = by_kind(objects, "Role", HUB_CLAIMS)
    assert hub["metadata"]["namespace"] == users  # where the servers' pods are
    assert rules(hub) == {
        ("resource.k8s.io", "resourceclaimtemplates"): sorted(
            ["create", "get", "list", "patch", "delete"]
        )
    }
    service = by_kind(objects, "Role", "gpuhub-service-claims")
    assert service["metadata"]["namespace"] == users  # where the jobs are
    assert rules(service) == {
        ("resource.k8s.io", "resourceclaimtemplates"): sorted(["create", "get", "patch", "delete"])
    }
    assert by_kind(objects, "RoleBinding", "gpuhub-service-claims")["subjects"][0]["name"] == (
        "gpuhub-service"
    )
    none = render(chart, values={"rbac": {"create": False}})
    assert not [o for o in none if o["metadata"]["name"] in (DRA, HUB_CLAIMS)]


A100 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
DRA_TYPES = {
    "a100": {
        "display_name": "A100",
        "dra": {"device_class": "gpu.nvidia.com", "selectors": [A100]},
    },
    "a100-shared": {
        "display_name": "A100, shared",
        "dra": {"device_class": "gpu.nvidia.com", "capacity": "memory"},
        "sharing": {"memory": "80G", "min": "4G"},
    },
}


def test_dra_types_reach_the_hub_and_the_jobs_service(chart: Path) -> None:
    values = {"jupyterhub": {"hub": {"config": {"GPUSpawner": {"gpu_types": DRA_TYPES}}}}}
    objects = render(chart, values=values)
    hub = hub_values(objects)["hub"]["config"]["GPUSpawner"]["gpu_types"]
    service = service_config(objects)["policy"]["gpu_types"]
    for types in (hub, service):
        parsed = Policy.from_config(gpu_types=types).check_platform("kubernetes").gpu_types
        assert parsed["a100"].dra is not None and parsed["a100"].dra.expressions == (A100,)
        assert parsed["a100-shared"].shares_memory
    # The chart's schema names a mistake before the hub could.
    bad = {"gpu_types": {"a": {"dra": {"device_class": "gpu.nvidia.com", "model": "a100"}}}}
    with pytest.raises(AssertionError) as refused:
        render(chart, values={"jupyterhub": {"hub": {"config": {"GPUSpawner": bad}}}})
    assert "Additional property model is not allowed" in str(refused.value)


@pytest.mark.e2e
def test_the_apiserver_lets_each_do_its_part_and_no_more(chart: Path, kube: Kube) -> None:
    """Installed for real: SubjectAccessReviews of the hub's and the service's accounts."""
    ns = kube.namespace
    objects = render(chart, namespace=ns, api_versions=served_api_versions(kube))
    install(kube, [o for o in objects if o["metadata"]["name"].endswith(("-dra", "-claims"))])
    hub, service = (f"system:serviceaccount:{ns}:{sa}" for sa in ("hub", "gpuhub-service"))
    kube.wait_for(lambda: can_i(kube, "watch", "resourceslices.resource.k8s.io", None, hub))
    kube.wait_for(lambda: can_i(kube, "get", "deviceclasses.resource.k8s.io", None, service))
    for verb, resource in [
        ("list", "resourceslices"),
        ("watch", "resourceclaims"),
        ("get", "deviceclasses"),
    ]:
        assert can_i(kube, verb, f"{resource}.resource.k8s.io", None, hub), (verb, resource)
        service_may = (verb, resource) == ("get", "deviceclasses")
        assert can_i(kube, verb, f"{resource}.resource.k8s.io", None, service) == service_may
    templates = "resourceclaimtemplates.resource.k8s.io"
    for verb in ("create", "patch", "delete", "list"):
        assert can_i(kube, verb, templates, ns, hub), verb
    for verb in ("create", "patch", "delete"):
        assert can_i(kube, verb, templates, ns, service), verb
    # Nowhere else, and never the claims or slices themselves.
    assert not can_i(kube, "create", templates, "default", hub)
    assert not can_i(kube, "create", templates, "default", service)
    assert not can_i(kube, "list", templates, ns, service)
    assert not can_i(kube, "create", "resourceclaims.resource.k8s.io", ns, hub)
    assert not can_i(kube, "update", "resourceslices.resource.k8s.io", None, hub)
    assert not can_i(kube, "delete", "deviceclasses.resource.k8s.io", None, hub)
