"""GPU types claimed through DRA (gpuhub.k8s.dra), without a cluster: what the admin writes is
checked at hub start with one sentence per mistake, and a server's pod and every job kind's
pods ask for their GPUs through a ResourceClaimTemplate made for the request, never through an
extended resource; each object is checked against the official schema of Kubernetes 1.36."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpuhub.core.policy import Policy, PolicyConfigError
from gpuhub.jobs.k8s import backend
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.kinds import of_object
from gpuhub.jobs.model import JobError
from gpuhub.k8s import dra
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    USERNAME_ANNOTATION,
)
from tests.support.jobs_service import NOTEBOOK_OK, make_request, write_notebook
from tests.support.policies import DESIGN_CONFIG

pytestmark = pytest.mark.usefixtures("no_cluster")

K8S = "1.36"  # resource.k8s.io/v1 with consumable capacity
A100 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
MIG = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
# The design's three DRA types (docs/admin-guide.md, "GPUs through DRA").
DRA_TYPES: dict[str, Any] = {
    "a100": {
        "display_name": "A100",
        "max_gpus": 4,
        "dra": {"device_class": "gpu.nvidia.com", "selectors": [A100]},
    },
    "mig-1g": {
        "display_name": "A100 MIG 1g.10gb",
        "dra": {"device_class": "mig.nvidia.com", "selectors": [MIG]},
    },
    "a100-shared": {
        "display_name": "A100, shared",
        "dra": {"device_class": "gpu.nvidia.com"},
        "sharing": {"memory": "80G", "min": "4G"},
    },
}
CONFIG = {**DESIGN_CONFIG, "gpu_types": {**DESIGN_CONFIG["gpu_types"], **DRA_TYPES}}
POLICY = Policy.from_config(**CONFIG)


def validate(obj: dict[str, Any]) -> dict[str, Any]:
    kubernetes_validate.validate(obj, K8S, strict=True)
    return obj


def requests_of(template: dict[str, Any]) -> list[dict[str, Any]]:
    return template["spec"]["spec"]["devices"]["requests"]


# -- what the admin writes -----------------------------------------------------------------


def test_the_designs_types_parse_with_no_extended_resource() -> None:
    types = Policy.from_config(gpu_types=DRA_TYPES).check_platform("kubernetes").gpu_types
    assert types["a100"].dra is not None and types["a100"].dra.device_class == "gpu.nvidia.com"
    assert types["a100"].dra.expressions == (A100,)
    assert types["mig-1g"].dra is not None and types["mig-1g"].dra.device_class == "mig.nvidia.com"
    assert types["a100-shared"].shares_memory
    assert {t.resource_name for t in types.values()} == {""}


MISTAKES = [
    ({"dra": {"device_class": ""}}, "gpu_types['x'].dra.device_class must name a DeviceClass"),
    ({"dra": {"device_class": "gpu.nvidia.com", "selectors": A100}}, "list of CEL"),
    ({"dra": {"device_class": "gpu.nvidia.com", "selectors": [7]}}, "selectors[0] must be a"),
    ({"dra": {"device_class": "gpu.nvidia.com", "model": "a100"}}, "unknown keys ['model']"),
    (
        {"dra": {"device_class": "gpu.nvidia.com"}, "resource_name": "nvidia.com/gpu"},
        "sets both dra and resource_name ('nvidia.com/gpu')",
    ),
    ({"dra": {"device_class": "gpu.nvidia.com"}, "devices": [0]}, "sets both dra and devices"),
    (
        {"dra": {"device_class": "gpu.nvidia.com"}, "sharing": {"replicas": 4}},
        "sharing.replicas does not apply to a DRA type",
    ),
    (
        {"dra": {"device_class": "gpu.nvidia.com"}, "sharing": {"min": "4G"}},
        'sharing needs either "memory"',
    ),
    (
        {
            "dra": {"device_class": "gpu.nvidia.com"},
            "sharing": {"memory": "80G", "memory_resource": "nvidia.com/gpumem"},
        },
        "sharing.memory_resource is for a GPU-sharing device plugin",
    ),
    (
        {"dra": {"device_class": "gpu.nvidia.com", "capacity": "memory"}},
        "dra.capacity applies only to shares by memory",
    ),
    ({"dra": {"device_class": "gpu.nvidia.com"}, "max_gpus": 33}, "at most 32 devices"),
    # What Kueue cannot admit is never offered, with the reason.
    (
        {"dra": {"first_available": [{"device_class": "gpu.nvidia.com"}]}},
        "dra.first_available is not offered: it lists alternative devices",
    ),
    (
        {"dra": {"device_class": "gpu.nvidia.com", "allocation_mode": "All"}},
        "dra.allocation_mode is not offered",
    ),
    (
        {"dra": {"device_class": "gpu.nvidia.com", "admin_access": True}},
        "dra.admin_access is not offered",
    ),
]


@pytest.mark.parametrize(("entry", "said"), MISTAKES)
def test_each_mistake_is_one_sentence_naming_the_setting(entry: dict[str, Any], said: str) -> None:
    with pytest.raises(PolicyConfigError) as refused:
        Policy.from_config(gpu_types={"x": entry})
    assert said in str(refused.value)


def test_a_workstation_has_no_dra() -> None:
    with pytest.raises(PolicyConfigError, match="which a workstation does not have"):
        Policy.from_config(gpu_types=DRA_TYPES).check_platform("workstation")


# -- every job kind ---------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK)
    return tmp_path


SETTINGS = m.KubeJobSettings(namespace="jobs", job_image="img:1")


@pytest.mark.parametrize(("kind", "workers"), [("job", 1), ("pytorchjob", 3), ("tfjob", 2)])
def test_each_kinds_pods_claim_from_the_jobs_template(root: Path, kind: str, workers: int) -> None:
    extra = {"workers": workers} if workers > 1 else {}
    request = make_request(root, kind=kind, policy=POLICY, gpu_type="a100", gpus=2, **extra)
    job_id = f"{kind}-x1"
    obj = m.workload(request, "alice", job_id, SETTINGS, key="k", created="now")
    template = m.gpu_claim_template(request, "alice", job_id, SETTINGS)
    assert template is not None
    validate(template)
    assert template["metadata"]["name"] == f"{job_id}-gpus"
    assert template["metadata"]["namespace"] == "jobs"
    assert template["metadata"]["labels"][JOB_ID_LABEL] == job_id
    assert template["metadata"]["annotations"] == {USERNAME_ANNOTATION: "alice"}
    assert requests_of(template)[0]["exactly"]["count"] == 2
    pods = of_object(obj).pod_templates(obj)
    assert sum(count for _, count in pods) == workers
    for pod, _ in pods:
        assert pod["spec"]["resourceClaims"] == [
            {"name": "gpus", "resourceClaimTemplateName": f"{job_id}-gpus"}
        ]
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["claims"] == [{"name": "gpus"}]
        assert not [k for k in resources["limits"] if "/" in k]
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **pod},
            K8S,
            strict=True,
        )
    # What the jobs list and the service's own quota read back: 2 GPUs a pod.
    assert backend._workload_gpus(obj) == 2 * workers
    assert backend._resources(obj)["gpus"] == 2
    if kind == "job":
        validate(obj)
    # Without GPUs, or of an extended-resource type: no template, no claim.
    cpu = make_request(root, kind=kind, policy=POLICY, gpus=0, **extra)
    assert m.gpu_claim_template(cpu, "alice", job_id, SETTINGS) is None


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("trainjob", "Kubeflow Trainer has no field for a node's DRA resource claims"),
        ("pipeline", "Kubeflow Pipelines has no field for a step's DRA resource claims"),
    ],
)
def test_kinds_that_cannot_carry_a_claim_refuse_a_dra_type(root: Path, kind: str, why: str) -> None:
    with pytest.raises(JobError) as refused:
        make_request(root, kind=kind, policy=POLICY, gpu_type="a100", gpus=1)
    assert refused.value.field == "gpu_type"
    assert why in refused.value.message
    assert "submit a training job, a PyTorchJob or a TFJob instead" in refused.value.message
    make_request(root, kind=kind, policy=POLICY, gpus=0)  # CPU-only: nothing to claim


def test_a_missing_device_class_is_said_plainly() -> None:
    assert dra.missing_class_words("A100", "gpu.nvidia.com") == (
        'A100 GPUs cannot be used now: this cluster has no DeviceClass "gpu.nvidia.com" '
        "(its DRA driver is not installed); ask your admin."
    )
