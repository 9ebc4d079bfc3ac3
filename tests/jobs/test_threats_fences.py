"""Threat: a hostile notebook escaping its job pod (root, privileges, cluster credentials).

Job pods (batch/v1 Job, every PyTorchJob/TFJob replica) and pipeline steps run as a
non-root user without privilege escalation, capabilities or an unconfined seccomp profile;
an image that insists on root fails with one sentence saying why. The manifests are checked
against the official schemas (strict) as well as for the fields themselves, and the test
cluster's apiserver (harness/cluster.py) admits their pods in a namespace that enforces
the restricted Pod Security Standard. NetworkPolicies are created on the cluster for real; it
has no CNI to enforce them, so their content is what is checked.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.kinds import of_object, workload_kind
from gpuhub.jobs.kinds.phase import ROOT_IMAGE, pod_waiting
from gpuhub.jobs.pipeline import compile_pipeline
from gpuhub.k8s.labels import JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, USER_LABEL
from harness.cluster import Kube
from tests.support.jobs_service import (
    NOTEBOOK_OK,
    accepted,
    cluster_request,
    make_request,
    validate,
    write_notebook,
)

# A real kube-apiserver, controllers and operators (harness/cluster.py).
pytestmark = pytest.mark.e2e

SETTINGS = m.KubeJobSettings(namespace="jhub", job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0")


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    return root


def pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return [template for template, _ in of_object(workload).pod_templates(workload)]


def restricted(kube: Kube) -> None:
    """The test's namespace enforces the restricted Pod Security Standard (PodSecurity
    admission refuses any pod that breaks it)."""
    level = "pod-security.kubernetes.io/enforce"
    kube.patch("Namespace", kube.namespace, {"metadata": {"labels": {level: "restricted"}}})


@pytest.mark.parametrize(("kind", "workers"), [("job", 1), ("pytorchjob", 3), ("tfjob", 2)])
def test_threat_job_pods_run_unprivileged(root, kube, kind, workers):
    request = make_request(root, kind=kind, workers=workers, gpus=1, gpu_type="a100")
    workload = m.workload(request, "mallory", "train-x7k2p", SETTINGS, key="k", created="now")
    if kind == "job":
        validate(workload)
    accepted(kube, workload)
    restricted(kube)
    templates = pod_templates(workload)
    assert len(templates) == (1 if workers == 1 else 2)
    for template in templates:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "name": "p"},
            "spec": template["spec"],
        }
        validate(pod)
        accepted(kube, pod)  # PodSecurity admission: restricted
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        for container in spec["containers"]:
            assert container["securityContext"] == {
                "runAsNonRoot": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            }


def root_image_pod(image: str, message: str) -> dict[str, Any]:
    """A job pod as the apiserver shows it when the kubelet refuses to run it as root."""
    return {
        "metadata": {"name": "train-x7k2p-abcde", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "gpu-1"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "notebook",
                    "image": image,
                    "state": {
                        "waiting": {"reason": "CreateContainerConfigError", "message": message}
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize(
    "kubelet_says",
    [
        'container has runAsNonRoot and image will run as root (pod: "train_jhub(uid)", '
        "container: notebook)",
        "container has runAsNonRoot and image has non-numeric user (jovyan), cannot verify "
        "user is non-root",
    ],
)
def test_threat_root_image_fails_with_a_sentence_saying_why(kubelet_says):
    image = "registry.example.org/me/root-image:1"
    pod = root_image_pod(image, kubelet_says)
    expected = ROOT_IMAGE.format(image=image)
    assert pod_waiting([pod], "1 x NVIDIA A100 80GB") == expected
    job = {"metadata": {"name": "train-x7k2p"}, "status": {}}
    phase = workload_kind("job").phase(job, [pod], "1 x NVIDIA A100 80GB")
    assert (phase.status, phase.message) == ("pending", expected)
    tfjob = {"metadata": {"name": "train-x7k2p"}, "status": {"conditions": []}}
    assert workload_kind("tfjob").phase(tfjob, [pod], "CPU only").message == expected
    assert expected.startswith(f"Cannot start {image}: it runs as root")


def test_other_config_errors_are_not_blamed_on_root():
    pod = root_image_pod("img:1", 'configmap "x" not found')
    assert pod_waiting([pod], "CPU only") != ROOT_IMAGE.format(image="img:1")


def test_threat_pipeline_step_runs_as_non_root(root):
    request = make_request(root, kind="pipeline", gpus=1, gpu_type="a100")
    text = compile_pipeline(request, (root / "train.ipynb").read_bytes(), image="img:1")
    platform = list(yaml.safe_load_all(text))[1]["platforms"]["kubernetes"]
    executor = platform["deploymentSpec"]["executors"]["exec-run-notebook"]
    assert executor["securityContext"]["runAsNonRoot"] is True


# -- pipeline steps: no KFP credentials --------------------------------------------------------------
async def test_threat_pipeline_step_runs_under_the_account_without_permissions(kube, root):
    from kubernetes_asyncio import config

    from gpuhub.jobs.pipeline import KFPBackend, KFPSettings
    from tests.support.kfp_standin import KFPStandIn

    standin = KFPStandIn()
    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    try:
        settings = KFPSettings(endpoint=standin.url, service_account="gpuhub-pipeline-steps")
        jobs = m.KubeJobSettings(namespace=kube.namespace, job_image="img:1")
        backend = KFPBackend(api, jobs, settings)
        request = make_request(root, kind="pipeline")
        await backend.submit(request, "mallory", notebook=(root / "train.ipynb").read_bytes())
        [run] = standin.runs.values()
        assert run["service_account"] == "gpuhub-pipeline-steps"
    finally:
        await api.close()
        standin.stop()


# -- the network fence -------------------------------------------------------------------------------
def test_threat_replicas_of_one_job_reach_each_other_only(root, kube):
    request = make_request(root, kind="pytorchjob", workers=3)
    policy = m.replica_network_policy(request, "mallory", "train-x7k2p", SETTINGS)
    assert policy is not None
    validate(policy)
    accepted(kube, policy)
    # By owner as well as id: another user's pods labelled with the same id never match.
    same = {
        "matchLabels": {
            MANAGED_BY_LABEL: MANAGED_BY,
            USER_LABEL: m.user_label("mallory"),
            JOB_ID_LABEL: "train-x7k2p",
        }
    }
    assert policy["spec"]["podSelector"] == same
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": same}]}]
    assert policy["spec"]["egress"] == [{"to": [{"podSelector": same}]}]
    assert m.replica_network_policy(make_request(root), "mallory", "j-x", SETTINGS) is None


async def test_distributed_submit_creates_the_replicas_policy_owned_by_the_job(kube, root):
    from kubernetes_asyncio import config

    from gpuhub.jobs.k8s.backend import KubernetesBackend

    api = await config.new_client_from_config(config_file=str(kube.kubeconfig))
    backend = KubernetesBackend(api, m.KubeJobSettings(namespace=kube.namespace, job_image="img:1"))
    try:
        # On kwok's A100 nodes: the replicas wait there (on the process node a worker would
        # wait for its master's DNS name, which this cluster does not serve).
        request = cluster_request(root, kind="pytorchjob", workers=2, gpus=1, gpu_type="a100")
        record = await backend.submit(request, "mallory", notebook=b'{"cells": []}')
        policy = await asyncio.to_thread(kube.get, "NetworkPolicy", f"{record.id}-replicas")
        assert policy is not None
        job = await asyncio.to_thread(kube.get, "PyTorchJob", record.id)
        assert policy["metadata"]["ownerReferences"] == [m.owner_reference(job)]
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert selector[JOB_ID_LABEL] == record.id
        assert selector[USER_LABEL] == m.user_label("mallory")
        # Every replica of the job is selected: they carry both labels.
        pods = await asyncio.to_thread(
            kube.wait_for,
            lambda: (
                len(kube.job_pods(record.id, "PyTorchJob")) == 2
                and kube.job_pods(record.id, "PyTorchJob")
            ),
        )
        assert all(selector.items() <= p["metadata"]["labels"].items() for p in pods)
        # It goes with the job (the garbage collector follows the ownerReference).
        await backend.cancel("mallory", record.id)
        await asyncio.to_thread(
            kube.wait_for, lambda: kube.get("NetworkPolicy", f"{record.id}-replicas") is None, 60
        )
    finally:
        await backend.close()


PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
METADATA = "169.254.169.254/32"


def render_chart(kube, tmp_path, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's objects (helm template), every fence object accepted by the apiserver."""
    from harness.helm import HELM, make_chart, render, validate_all

    if not HELM.exists():
        pytest.skip("helm from npm is not installed")
    objects = render(make_chart(tmp_path), values=values or {}, tmp=tmp_path)
    validate_all(kube, [o for o in objects if o["kind"] in ("NetworkPolicy", "ServiceAccount")])
    return objects


def rendered_policy(kube, tmp_path, values: dict[str, Any] | None = None) -> dict[str, Any]:
    from harness.helm import by_kind

    return by_kind(render_chart(kube, tmp_path, values), "NetworkPolicy", "gpuhub-jobs")


def cidrs(rule: dict[str, Any]) -> list[str]:
    return [peer["ipBlock"]["cidr"] for peer in rule.get("to", []) if "ipBlock" in peer]


def test_threat_job_pods_are_fenced_from_metadata_and_private_ranges(tmp_path, root, kube):
    policy = rendered_policy(kube, tmp_path)
    assert policy["metadata"]["namespace"] == "jhub"
    kube.create({**policy, "metadata": {**policy["metadata"], "namespace": kube.namespace}})
    policy = kube.get("NetworkPolicy", policy["metadata"]["name"])  # as the apiserver keeps it
    # It selects the pods of every job kind, and not the chart's own service pod.
    selector = policy["spec"]["podSelector"]["matchLabels"]
    for kind, workers in (("job", 1), ("pytorchjob", 2), ("tfjob", 2)):
        request = make_request(root, kind=kind, workers=workers)
        for template in pod_templates(
            m.workload(request, "u", "j-x", SETTINGS, key="k", created="t")
        ):
            assert selector.items() <= template["metadata"]["labels"].items()
    assert selector == {"app.kubernetes.io/managed-by": "gpuhub"}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # No ingress rule at all (the apiserver keeps an empty list as no list).
    assert policy["spec"].get("ingress", []) == []
    dns, internet = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert internet == {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [*PRIVATE, METADATA]}}]}
    # No rule opens a private range or the metadata server on any port but DNS.
    assert not any(set(cidrs(rule)) & {*PRIVATE, METADATA} for rule in policy["spec"]["egress"][1:])


@pytest.mark.e2e
def test_admin_opens_what_they_list_and_nothing_else(module_kube, tmp_path):
    store = {"to": [{"ipBlock": {"cidr": "10.3.0.5/32"}}], "ports": [{"port": 9000}]}
    values = {
        "networkPolicy": {
            "jobs": {
                "egressAllowRules": {"nonPrivateIPs": False, "dnsPorts": True},
                "egress": [store],
            }
        }
    }
    policy = rendered_policy(module_kube, tmp_path, values)
    dns, extra = policy["spec"]["egress"]
    assert "ports" in dns and extra == store


@pytest.mark.e2e
def test_pipeline_steps_service_account_has_no_token(module_kube, tmp_path):
    from harness.helm import by_kind

    objects = render_chart(
        module_kube, tmp_path, {"kfp": {"endpoint": "http://ml-pipeline.kubeflow:8888"}}
    )
    account = by_kind(objects, "ServiceAccount", "gpuhub-pipeline-steps")
    assert account["metadata"]["namespace"] == "kubeflow"
    assert account["automountServiceAccountToken"] is False
    bound = [
        o
        for o in objects
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s.get("name") == "gpuhub-pipeline-steps" for s in o.get("subjects") or [])
    ]
    assert bound == []
    config = yaml.safe_load(by_kind(objects, "ConfigMap", "gpuhub-config")["data"]["service.yaml"])
    assert config["kfp"]["service_account"] == "gpuhub-pipeline-steps"


# -- TrainJobs (Kubeflow Trainer v2): the pods Trainer and JobSet make are fenced too ---------------
@pytest.mark.parametrize(
    ("account", "mounts_token"),
    [
        ("gpuhub-jobs", False),  # the chart's: no token
        ("jobs-with-a-token", True),  # an admin's account that mounts its token
        ("", None),  # none named: the namespace's default account, which mounts its token
    ],
)
def test_threat_trainjob_nodes_run_unprivileged_without_credentials(
    root, kube, account, mounts_token
):
    """gpuhub's runtime patch gives a TrainJob's node pods the restricted security context,
    gpuhub's labels (the replicas' NetworkPolicy and the ledger select by them) and no
    ServiceAccount token, whatever account they run as (Trainer's patch cannot turn the token
    off: the node container mounts an empty directory where the token would go, and
    Kubernetes then mounts none); the namespace enforces the restricted Pod Security
    Standard, so a pod that broke it would never be made."""
    restricted(kube)
    if account:
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account},
                "automountServiceAccountToken": mounts_token,
            }
        )
    request = cluster_request(root, kind="trainjob", workers=2, gpus=1, gpu_type="a100")
    settings = m.KubeJobSettings(
        namespace=kube.namespace, job_image="img:1", job_service_account=account
    )
    job_id = "train-x7k2p"
    workload = m.workload(request, "mallory", job_id, settings, key="k", created="now")
    assert workload["kind"] == "TrainJob"
    kube.create(workload)

    def two_pods() -> list[dict[str, Any]] | None:
        pods = kube.list("Pod", labels={JOB_ID_LABEL: job_id})
        return pods if len(pods) == 2 else None

    for pod in kube.wait_for(two_pods, timeout=60):
        labels = pod["metadata"]["labels"]
        assert labels[MANAGED_BY_LABEL] == MANAGED_BY
        assert labels[USER_LABEL] == m.user_label("mallory")
        spec = pod["spec"]
        assert spec["serviceAccountName"] == (account or "default")
        # No token: no token volume, and where the token would be, an empty directory.
        volumes = spec.get("volumes") or []
        assert not [v for v in volumes if v["name"].startswith("kube-api") or "projected" in v]
        assert {"name": "gpuhub-no-token", "emptyDir": {"sizeLimit": "1Mi"}} in volumes
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        (container,) = spec["containers"]
        [token_path] = [
            mount
            for mount in container["volumeMounts"]
            if mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
        ]
        assert token_path["name"] == "gpuhub-no-token"
        assert container["securityContext"] == {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
