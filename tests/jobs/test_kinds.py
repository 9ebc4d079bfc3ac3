"""Job kinds have one home each (gpuhub.jobs.kinds): the registry holds gpuhub's five, each
answers for its manifest, its phase, its pods and its RBAC through one interface, the Helm
chart grants what each needs, and a kind registered from outside (one class, one register
line) is offered by the model and the jobs service without touching another module."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuhub.core.holdings import Workload
from gpuhub.jobs import kinds
from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.kinds.base import (
    Access,
    Obj,
    Parts,
    Resource,
    Rule,
    WorkloadKind,
)
from gpuhub.jobs.kinds.phase import Phase
from gpuhub.jobs.model import KIND_NAMES, KINDS, JobError, kinds_sentence, parse_kind
from gpuhub.k8s.labels import KIND_LABEL, QUEUE_NAME_LABEL
from gpuhub.service.app import Jobs
from gpuhub.service.config import ServiceConfig
from harness.helm import HELM, by_kind, make_chart, render
from tests.support.jobs_service import NOTEBOOK_OK, make_request, write_notebook
from tests.support.policies import DESIGN_CONFIG

SETTINGS = m.KubeJobSettings(namespace="jobs", job_image="img:1")
QUEUED = m.KubeJobSettings(namespace="jobs", job_image="img:1", kueue_queue="gpus")
WORKERS = {"job": 1, "pytorchjob": 3, "tfjob": 2, "trainjob": 2}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_notebook(tmp_path / "train.ipynb", NOTEBOOK_OK)
    return tmp_path


def manifest(root: Path, name: str, settings: m.KubeJobSettings = SETTINGS) -> Obj:
    workers = {"workers": WORKERS[name]} if WORKERS[name] > 1 else {}
    request = make_request(root, kind=name, gpu_type="a100", gpus=1, **workers)
    return m.workload(request, "alice", f"{name}-x1", settings, key="k", created="now")


def test_the_registry_holds_gpuhubs_five_kinds_in_order() -> None:
    assert list(kinds.KINDS) == ["job", "pytorchjob", "tfjob", "trainjob", "pipeline"]
    assert KINDS is kinds.KINDS  # the model offers the registry itself
    assert dict(KIND_NAMES) == {
        "job": "training job",
        "pytorchjob": "PyTorchJob",
        "tfjob": "TFJob",
        "trainjob": "TrainJob",
        "pipeline": "pipeline step",
    }
    assert [k.name for k in kinds.workload_kinds()] == ["job", "pytorchjob", "tfjob", "trainjob"]
    assert kinds.by_api_kind("TFJob") is kinds.kind_for("tfjob")
    assert kinds.kind_for("pipeline").runs_in == "Kubeflow Pipelines"
    with pytest.raises(KeyError):
        kinds.workload_kind("pipeline")  # KFP's runs, not an object of gpuhub's
    with pytest.raises(ValueError, match="registered already"):
        kinds.register(kinds.kind_for("job"))


@pytest.mark.parametrize("name", list(WORKERS))
def test_each_kind_makes_and_reads_its_object(root: Path, name: str) -> None:
    kind = kinds.workload_kind(name)
    obj = manifest(root, name)
    assert kinds.of_object(obj) is kind
    assert (obj["apiVersion"], obj["kind"]) == (kind.resource.api_version, kind.resource.kind)
    assert obj["metadata"]["labels"][KIND_LABEL] == name
    assert not kind.suspended(obj)
    queued = manifest(root, name, QUEUED)
    assert kind.suspended(queued) and QUEUE_NAME_LABEL in queued["metadata"]["labels"]
    # Its pods: how many, and the primary one's container as the object says it.
    assert kind.replicas(obj) == WORKERS[name]
    assert sum(count for _, count in kind.pod_templates(obj)) == WORKERS[name]
    container = kind.primary_container(obj)
    assert container["image"] == DESIGN_CONFIG["images"]["pytorch"]["image"]  # the default
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPUHUB_PRINT_OUTPUT"] == "1"  # the primary replica's: it sends the notebook


FINISHED = {
    "job": "Complete",
    "pytorchjob": "Succeeded",
    "tfjob": "Succeeded",
    "trainjob": "Complete",
}


@pytest.mark.parametrize("name", list(WORKERS))
def test_each_kind_reads_its_phase(root: Path, name: str) -> None:
    kind = kinds.workload_kind(name)
    obj = manifest(root, name)
    waiting = kind.phase(obj, [], "1 x NVIDIA A100 80GB")
    assert waiting.status == "pending" and waiting.message
    done = copy.deepcopy(obj)
    done["status"] = {"conditions": [{"type": FINISHED[name], "status": "True"}]}
    assert kind.phase(done, [], "1 x NVIDIA A100 80GB").status == "succeeded"
    done["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert kind.phase(done, [], "CPU only").status == "cancelled"


def pod_meta(labels: dict[str, str], owner: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "jobs", "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "uid": owner[1], "controller": True}]
    return meta


def test_each_kind_says_whose_its_pods_are() -> None:
    for name, controller in (("job", "Job"), ("pytorchjob", "PyTorchJob"), ("tfjob", "TFJob")):
        meta = pod_meta({KIND_LABEL: name}, (controller, "u1"))
        assert kinds.pod_workload(meta) == Workload(name, "u1")
        # Another kind's controller is not its object.
        assert kinds.pod_workload(pod_meta({KIND_LABEL: name}, ("ReplicaSet", "u2"))) is None
    # A TrainJob's pods belong to its JobSet: counted by it until the hub reads its owner.
    jobset = {"jobset.sigs.k8s.io/jobset-uid": "js1", "jobset.sigs.k8s.io/jobset-name": "t-x"}
    node = pod_meta({KIND_LABEL: "trainjob", **jobset}, ("Job", "j1"))
    assert kinds.pod_workload(node) == Workload("jobset", "js1")
    trainjob = kinds.workload_kind("trainjob")
    between = trainjob.between(node)
    assert between is not None
    assert between.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/jobs/jobsets/t-x"
    owned = {
        "metadata": {"ownerReferences": [{"kind": "TrainJob", "uid": "t1", "controller": True}]}
    }
    assert trainjob.owner_uid(owned) == "t1"
    assert kinds.owning_kind(Workload("jobset", "js1")) is trainjob
    # A pipeline step's run, by KFP's label.
    step = pod_meta({KIND_LABEL: "pipeline", "pipeline/runid": "r1"})
    assert kinds.pod_workload(step) == Workload("pipeline", "r1")
    assert kinds.pod_workload(pod_meta({KIND_LABEL: "nonesuch"}, ("Job", "u3"))) is None


# -- RBAC: the chart grants every registered kind's rules -----------------------------------
def granted(objects: list[Obj], account: str) -> list[tuple[Obj, bool]]:
    """The rules the chart binds to ServiceAccount ``account``, each with whether it holds
    cluster-wide (a ClusterRole bound by a ClusterRoleBinding)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    out = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in subjects):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        wide = binding["kind"] == "ClusterRoleBinding"
        out += [(rule, wide) for rule in role["rules"]]
    return out


def missing(rules: tuple[Rule, ...], grants: list[tuple[Obj, bool]]) -> list[Rule]:
    return [
        rule
        for rule in rules
        if not any(
            rule.group in g["apiGroups"]
            and set(rule.resources) <= set(g["resources"])
            and set(rule.verbs) <= set(g["verbs"])
            and (wide or not rule.cluster)
            for g, wide in grants
        )
    ]


@pytest.fixture(scope="module")
def chart_objects(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    if not HELM.exists():
        pytest.skip("helm from npm is not installed")
    return render(make_chart(tmp_path_factory.mktemp("chart")))


def accounts(objects: list[Obj]) -> tuple[str, str]:
    """The jobs service's ServiceAccount and the hub's (z2jh's ``hub``)."""
    service = by_kind(objects, "Deployment", "gpuhub-service")["spec"]["template"]["spec"]
    return service["serviceAccountName"], by_kind(objects, "ServiceAccount", "hub")["metadata"][
        "name"
    ]


@pytest.mark.parametrize("name", list(kinds.KINDS))
def test_the_chart_grants_each_kind_its_rules(chart_objects: list[Obj], name: str) -> None:
    service, hub = accounts(chart_objects)
    access = kinds.kind_for(name).rbac
    assert missing(access.service, granted(chart_objects, service)) == []
    assert missing(access.hub, granted(chart_objects, hub)) == []
    if isinstance(kinds.kind_for(name), WorkloadKind):
        assert access.service and access.hub  # created by the service, cancelled by the hub


# -- a sixth kind, from outside ---------------------------------------------------------------
class Fake(WorkloadKind):
    """A kind of some operator: one pod, Complete when done."""

    name = "fakejob"
    display_name = "FakeJob"
    resource = Resource("FakeJob", "example.org", "v1", "fakejobs")
    operator = "Example operator"
    rbac = Access(
        service=(Rule("example.org", ("fakejobs",), ("create", "get", "list", "delete")),),
        hub=(Rule("example.org", ("fakejobs",), ("list", "patch", "delete")),),
    )

    def manifest(self, parts: Parts) -> Obj:
        template = {"metadata": parts.pod_metadata(), "spec": parts.pod_spec("main", primary=True)}
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": parts.metadata,
            "spec": {"template": template},
        }

    def pod_templates(self, obj: Obj) -> list[tuple[Obj, int]]:
        return [(obj["spec"]["template"], 1)]

    def primary_container(self, obj: Obj) -> Obj:
        return obj["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]

    def phase(self, obj: Obj, pods: list[Obj], gpu: str, refused: str | None = None) -> Phase:
        return Phase("pending", "Waiting for the example operator.")


@pytest.fixture
def fake() -> Iterator[Fake]:
    kind = kinds.register(Fake())
    yield kind
    del kinds.KINDS[kind.name]


class ServedNothingOptional:
    """What the jobs service's kinds list asks of its Kubernetes backend, on a cluster that
    runs Kueue's queue fine and no operator."""

    def __init__(self) -> None:
        self.kinds = frozenset(k.name for k in kinds.workload_kinds())

    async def served_custom_kinds(self) -> frozenset[str]:
        return frozenset()

    async def queue_problem(self) -> None:
        return None


class KFP:
    kinds = frozenset({"pipeline"})


async def test_a_registered_kind_is_offered_end_to_end(root: Path, fake: Fake) -> None:
    # The model: parsed, named in refusals, made by the manifests into its object.
    assert "fakejob" in KINDS and KIND_NAMES["fakejob"] == "FakeJob"
    assert parse_kind("fakejob") == "fakejob"
    assert '"fakejob" (FakeJob)' in kinds_sentence(KINDS)
    with pytest.raises(JobError, match="runs once"):
        make_request(root, kind="fakejob", workers=2)
    request = make_request(root, kind="fakejob", gpu_type="a100", gpus=1)
    obj = m.workload(request, "alice", "fake-x1", QUEUED, key="k", created="now")
    assert obj["kind"] == "FakeJob" and fake.suspended(obj)
    assert obj["spec"]["template"]["metadata"]["labels"][KIND_LABEL] == "fakejob"
    assert kinds.of_object(obj) is fake
    meta = pod_meta({KIND_LABEL: "fakejob"}, ("FakeJob", "f1"))
    assert kinds.pod_workload(meta) == Workload("fakejob", "f1")
    # The jobs service: the admin may offer it, and the kinds list says why it cannot run.
    config = ServiceConfig.from_dict(
        {"policy": DESIGN_CONFIG, "job_image": "img:1", "kinds": ["job", "fakejob"]}
    )
    assert config.kinds == ("job", "fakejob")
    assert "fakejob" in ServiceConfig.from_dict({"policy": DESIGN_CONFIG, "job_image": "i"}).kinds
    jobs = Jobs(config, ServedNothingOptional(), KFP())  # type: ignore[arg-type]
    assert jobs.backend("fakejob") is jobs.kube and "fakejob" in jobs.router.kinds
    # What the lab offers it by comes with it: a new kind touches the lab not at all.
    facts = {
        "distributed": False,
        "takes_runtime": False,
        "runs_in": None,
        "no_claims": None,
        "description": "",
        "run_page": "Run page",
    }
    assert await jobs.kinds() == [
        {"kind": "job", "label": "training job", **facts, "available": True, "reason": None},
        {
            "kind": "fakejob",
            "label": "FakeJob",
            **facts,
            "available": False,
            "reason": "This cluster does not run FakeJobs (no Example operator).",
        },
    ]


def test_a_kind_the_chart_does_not_grant_fails_the_rbac_check(
    chart_objects: list[Obj], fake: Fake
) -> None:
    service, hub = accounts(chart_objects)
    assert missing(fake.rbac.service, granted(chart_objects, service)) == list(fake.rbac.service)
    assert missing(fake.rbac.hub, granted(chart_objects, hub)) == list(fake.rbac.hub)
