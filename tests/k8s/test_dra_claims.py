"""GPU types claimed through DRA (gpuhub.k8s.dra), without a cluster: what the admin writes is
checked at hub start with one sentence per mistake, and a server's pod and every job kind's
pods ask for their GPUs through a ResourceClaimTemplate made for the request, never through an
extended resource; each object is checked against the official schema of Kubernetes 1.36."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpuhub import GPUSpawner
from gpuhub.core.policy import Policy, PolicyConfigError
from gpuhub.hub.kube_capacity import dra_note
from gpuhub.hub.ledger.dra_capacity import forbidden_words
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.progress import SpawnRequest, describe
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.resources import workload_gpus, workload_resources
from gpuhub.jobs.kinds import of_object
from gpuhub.jobs.model import JobError
from gpuhub.k8s import dra
from gpuhub.k8s.labels import (
    JOB_ID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_NAME_LABEL,
    USERNAME_ANNOTATION,
)
from tests.support.jobs_service import NOTEBOOK_OK, make_request, write_notebook
from tests.support.manifests import make_spawner, manifest
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


# -- a server's pod ---------------------------------------------------------------------------


async def test_server_pod_claims_its_gpus_from_a_template_made_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No cluster to ask whether Kueue runs: as if it did.
    monkeypatch.setattr(GPUSpawner, "_gpuhub_kueue_checked", True)
    spawner = make_spawner(["staff"], gpu_types=CONFIG["gpu_types"], kueue_queue_name="gpus")
    body = await manifest(spawner, {"gpu_type": "a100", "gpus": 2, "cpu": 2, "memory": "16G"})
    container = body["spec"]["containers"][0]
    assert not [k for k in container["resources"]["limits"] if "/" in k]  # no extended resource
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    template = spawner._gpuhub_claims
    assert template is not None
    name = template["metadata"]["name"]
    assert name == f"{spawner.pod_name}-gpus"
    assert body["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": name}]
    validate(template)
    assert requests_of(template) == [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 2,
                "selectors": [{"cel": {"expression": A100}}],
            },
        }
    ]
    labels = template["metadata"]["labels"]
    assert labels[MANAGED_BY_LABEL] == MANAGED_BY
    assert labels["component"] == "singleuser-server"
    # Kueue's queue label is the pod's alone; claims of the template carry gpuhub's labels.
    assert body["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpus"
    assert QUEUE_NAME_LABEL not in labels
    assert template["spec"]["metadata"]["labels"] == labels
    assert template["metadata"]["annotations"]["hub.jupyter.org/username"] == "alice"
    # The type's placement and /dev/shm still apply; the environment names the GPUs.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUHUB_GPUS"] == "2" and env["GPUHUB_GPU_TYPE_NAME"] == "A100"


async def test_share_and_mig_claims_and_a_cpu_server_claims_nothing() -> None:
    spawner = make_spawner(["staff"], gpu_types=CONFIG["gpu_types"])
    await manifest(spawner, {"gpu_type": "a100-shared", "gpu_memory": "8Gi"})
    template = validate(copy.deepcopy(spawner._gpuhub_claims or {}))
    (request,) = requests_of(template)
    assert request["exactly"]["count"] == 1
    assert request["exactly"]["capacity"] == {"requests": {"memory": "8Gi"}}
    assert "selectors" not in request["exactly"]
    await manifest(spawner, {"gpu_type": "mig-1g", "gpus": 1})
    (request,) = requests_of(validate(copy.deepcopy(spawner._gpuhub_claims or {})))
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    body = await manifest(spawner, {"gpus": 0, "image": "cpu"})
    assert spawner._gpuhub_claims is None
    assert "resourceClaims" not in body["spec"]
    assert "claims" not in body["spec"]["containers"][0]["resources"]


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
    assert workload_gpus(obj) == 2 * workers
    assert workload_resources(obj)["gpus"] == 2
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


def test_dra_types_the_hub_may_not_read_say_which_right_is_missing() -> None:
    """A 403 on DRA's objects (no RBAC for DRA): the form names the right and what to do for
    the DRA types without a figure, after those whose class is missing; others are not named."""
    types = Policy.from_config(gpu_types=DRA_TYPES).check_platform("kubernetes").gpu_types
    why = forbidden_words({"resourceslices": "list"})
    missing = {"mig-1g": dra.missing_class_words("MIG 1g", "mig.nvidia.com")}
    figures = {"a100-shared": GPUCapacity(free=1, total=4), "mig-1g": GPUCapacity(0, 0)}
    note = dra_note(list(types.values()), figures, missing, why)
    a100 = types["a100"].display_name
    assert note == (
        f"{missing['mig-1g']} Live availability of {a100} GPUs cannot be shown: the hub's "
        "service account may not list resourceslices (API group resource.k8s.io), so GPUs "
        "claimed through DRA cannot be counted; an admin should install the chart's RBAC for "
        "DRA (rbac.create, templates/rbac-dra.yaml) or grant list and watch on resourceslices, "
        "resourceclaims and deviceclasses of resource.k8s.io to the hub. You can still start a "
        "server; it will wait for free GPUs."
    )
    assert dra_note(list(types.values()), figures, missing, "") == missing["mig-1g"]


def test_a_dra_server_waiting_for_devices_is_said_in_words() -> None:
    """The scheduler's "cannot allocate all claims" is a wait for GPUs, as "Insufficient
    nvidia.com/gpu" is for a device plugin's: never fatal, in the form's words."""
    request = SpawnRequest(image="PyTorch", gpus=2, gpu_name="A100")
    for message in (
        "0/8 nodes are available: 8 cannot allocate all claims. still not schedulable, "
        "preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling.",
        "0/8 nodes are available: 1 cannot allocate all claims, 7 node(s) didn't match Pod's "
        "node affinity/selector. preemption: 0/8 nodes are available: 8 Preemption is not "
        "helpful for scheduling.",
    ):
        event = {"reason": "FailedScheduling", "message": message, "type": "Warning"}
        step = describe(event, request, GPUCapacity(free=1, total=4, largest_free=1))
        assert step is not None and not step.fatal and step.waiting_for_gpus
        assert step.message == "Waiting for 2 free A100 GPUs (1 free now)"
