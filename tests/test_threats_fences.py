"""Threat: a hostile notebook escaping its job pod (root, privileges, cluster credentials).

Job pods (batch/v1 Job, every PyTorchJob/TFJob replica) and pipeline steps run as a
non-root user without privilege escalation, capabilities or an unconfined seccomp profile;
an image that insists on root fails with one sentence saying why. The manifests are checked
against the official schemas (strict) as well as for the fields themselves.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuhub.jobs.k8s import manifests as m
from gpuhub.jobs.k8s.status import ROOT_IMAGE, job_phase, pod_waiting, training_phase
from gpuhub.jobs.pipeline import compile_pipeline
from tests.jobs_k8s_helpers import NOTEBOOK_OK, make_request, validate, write_notebook

SETTINGS = m.KubeJobSettings(namespace="jhub", job_image="ghcr.io/gpuhub/gpuhub-notebook:0.1.0")


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "home"
    write_notebook(root / "train.ipynb", NOTEBOOK_OK)
    return root


def pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    if workload["kind"] == "Job":
        return [workload["spec"]["template"]]
    custom = next(c for c in m.CUSTOM_KINDS.values() if c.kind == workload["kind"])
    return [replica["template"] for replica in workload["spec"][custom.specs_key].values()]


@pytest.mark.parametrize(("kind", "workers"), [("job", 1), ("pytorchjob", 3), ("tfjob", 2)])
def test_threat_job_pods_run_unprivileged(root, kind, workers):
    request = make_request(root, kind=kind, workers=workers, gpus=1, gpu_type="a100")
    workload = m.workload(request, "mallory", "train-x7k2p", SETTINGS, key="k", created="now")
    if kind == "job":
        validate(workload)
    templates = pod_templates(workload)
    assert len(templates) == (1 if workers == 1 else 2)
    for template in templates:
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **template})
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
    phase = job_phase(job, [pod], "1 x NVIDIA A100 80GB")
    assert (phase.status, phase.message) == ("pending", expected)
    tfjob = {"metadata": {"name": "train-x7k2p"}, "status": {"conditions": []}}
    assert training_phase(tfjob, [pod], "CPU only", "TFJob").message == expected
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
