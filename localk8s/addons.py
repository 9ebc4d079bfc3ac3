"""Kueue, JobSet, Kubeflow Trainer and the Training Operator: their manifests and processes.

Each operator's manifests come from its own module source (``kubectl kustomize`` over the
``config/`` or ``manifests/`` folder in the Go module cache, the same files its release
YAML is made from), changed only where running the operator as a local process needs it:

- its Deployment is left out (the binary runs here, started by the launcher);
- each Service becomes an ExternalName Service for ``127.0.0.1``, and the webhooks, CRD
  conversion webhooks and APIServices that name it get the local port and the cluster CA
  (kube-apiserver resolves an ExternalName service to ``https://<name>:<port>`` and still
  checks the certificate for ``<service>.<namespace>.svc``, which the serving certificate
  names: :mod:`localk8s.pki`);
- the operators' own certificate management is off; the serving certificate is given
  to each, at the paths they read it from (Kueue and the Kubeflow operators hard-code some,
  so each runs in a private mount namespace where those paths are bind mounts).
"""

from __future__ import annotations

import copy
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .build import go_env
from .components import JOBSET, KUEUE, TRAINER, TRAINING_OPERATOR
from .dra import kueue_device_class_mappings
from .kubeapi import load_documents

Obj = dict[str, Any]

KUEUE_FRAMEWORKS = (
    "batch/job",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "jobset.x-k8s.io/jobset",
    "trainer.kubeflow.org/trainjob",
    "pod",
)


def module_dir(module: str, version: str) -> Path:
    """Where the Go module cache holds ``module@version`` (downloaded by the build)."""
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env=go_env(),
        cwd=Path(__file__).with_name("go") / "k8s",
    )
    return Path(out.stdout.strip())


def kustomize(kubectl: Path, folder: Path, *, extra: list[str] | None = None) -> list[Obj]:
    out = subprocess.run(
        [str(kubectl), "kustomize", *(extra or []), str(folder)],
        capture_output=True,
        text=True,
        check=True,
    )
    return load_documents(out.stdout)


def kustomize_bases(kubectl: Path, namespace: str, bases: list[Path]) -> list[Obj]:
    """Render several kustomize bases into one namespace (an overlay of our own, since the
    operator's overlay pulls a third-party manifest from a URL this machine cannot reach)."""
    with tempfile.TemporaryDirectory() as tmp:
        relative = [os.path.relpath(b, tmp) for b in bases]
        Path(tmp, "kustomization.yaml").write_text(
            yaml.safe_dump({"namespace": namespace, "resources": relative})
        )
        return kustomize(kubectl, Path(tmp), extra=["--load-restrictor=LoadRestrictionsNone"])


@dataclass
class Operator:
    """One operator as the launcher runs it."""

    name: str
    version: str
    namespace: str
    binary: str  # component name (localk8s/components.py)
    manifests: list[Obj]
    ports: dict[str, int]  # webhook, metrics, health (+ visibility for Kueue)
    argv: list[str] = field(default_factory=list)
    binds: dict[str, Path] = field(default_factory=dict)  # hard-coded path -> our folder
    env: dict[str, str] = field(default_factory=dict)
    after: list[Obj] = field(default_factory=list)  # applied once the operator is ready
    # A Secret the operator writes its own serving certificate to, and the folder it reads
    # that certificate from: the launcher copies one to the other, as a kubelet syncs a
    # mounted Secret.
    cert_secret: tuple[str, str] | None = None
    cert_dir: Path | None = None
    # An object its webhooks must accept (created with dryRun=All) before it counts as up.
    probe: Obj | None = None

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['health']}/readyz"


def localise(
    objects: list[Obj], ca_bundle: str, service_ports: dict[tuple[str, str], int]
) -> list[Obj]:
    """Drop what runs in the cluster and point every Service at this machine."""
    out = []
    for original in objects:
        obj = copy.deepcopy(original)
        kind = obj["kind"]
        if kind == "Deployment":
            continue
        if kind == "Service":
            spec = obj["spec"]
            obj["spec"] = {
                "type": "ExternalName",
                "externalName": "127.0.0.1",
                "ports": [
                    {k: v for k, v in p.items() if k != "targetPort"} for p in spec.get("ports", [])
                ],
            }
        elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj["webhooks"]:
                service = hook["clientConfig"]["service"]
                service["port"] = service_ports[(service["namespace"], service["name"])]
                hook["clientConfig"]["caBundle"] = ca_bundle
        elif (
            kind == "CustomResourceDefinition"
            and (obj["spec"].get("conversion") or {}).get("strategy") == "Webhook"
        ):
            client = obj["spec"]["conversion"]["webhook"]["clientConfig"]
            service = client["service"]
            service["port"] = service_ports[(service["namespace"], service["name"])]
            client["caBundle"] = ca_bundle
        elif kind == "APIService":
            service = obj["spec"]["service"]
            service["port"] = service_ports[(service["namespace"], service["name"])]
            obj["spec"].pop("insecureSkipTLSVerify", None)
            obj["spec"]["caBundle"] = ca_bundle
        out.append(obj)
    return out


def _write_config(folder: Path, name: str, config: Obj) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def operators(
    *,
    kubectl: Path,
    pick: Callable[[int], int],
    folder: Path,
    kubeconfig: Path,
    certs: Path,
    ca_bundle: str,
) -> list[Operator]:
    """JobSet, Kueue, Trainer and the Training Operator, ready to apply and start.

    ``certs`` holds ``tls.crt``/``tls.key`` (the serving certificate) and the CA; ``pick``
    hands out free ports.
    """
    folder.mkdir(parents=True, exist_ok=True)
    result = []

    # JobSet first: Trainer's TrainJobs become JobSets.
    ports = {"webhook": pick(9443), "metrics": pick(8443), "health": pick(8081)}
    config = _write_config(
        folder,
        "jobset",
        {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
            "clientConnection": {"qps": 500, "burst": 500},
        },
    )
    manifests = kustomize(kubectl, module_dir("sigs.k8s.io/jobset", JOBSET) / "config/default")
    result.append(
        Operator(
            "jobset",
            JOBSET,
            "jobset-system",
            "jobset",
            localise(
                manifests,
                ca_bundle,
                {
                    ("jobset-system", "jobset-webhook-service"): ports["webhook"],
                    ("jobset-system", "jobset-controller-manager-metrics-service"): ports[
                        "metrics"
                    ],
                },
            ),
            ports,
            argv=[f"--config={config}", f"--kubeconfig={kubeconfig}"],
            # JobSet reads its namespace from the ServiceAccount file of a pod.
            env={"POD_NAMESPACE": "jobset-system", "NAMESPACE": "jobset-system"},
        )
    )

    ports = {
        "webhook": pick(9444),
        "metrics": pick(8444),
        "health": pick(8082),
        "visibility": pick(8182),
    }
    config = _write_config(
        folder,
        "kueue",
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "visibilityServer": {"bindPort": ports["visibility"], "bindAddress": "127.0.0.1"},
            "clientConnection": {"qps": 300, "burst": 500},
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
            # DRA requests count against quota (localk8s/dra.py names the resources).
            "resources": {"deviceClassMappings": kueue_device_class_mappings()},
            # Admission fair sharing (beta and on by default since Kueue 0.15): a ClusterQueue
            # with admissionScope.admissionMode UsageBasedAdmissionFairSharing orders its
            # LocalQueues' workloads by their decayed past usage, which gpuhub's fair line
            # uses (one LocalQueue per user). Usage halves in a week, as gpuhub's own
            # usage_half_life, and only GPUs count; sampled every few seconds rather than
            # Kueue's 5 minutes, so that this small cluster shows it at once.
            "admissionFairSharing": {
                "usageHalfLifeTime": "168h",
                "usageSamplingInterval": "5s",
                "resourceWeights": {"cpu": 0, "memory": 0},
            },
        },
    )
    manifests = kustomize(kubectl, module_dir("sigs.k8s.io/kueue", KUEUE) / "config/default")
    manifests = [m for m in manifests if m["kind"] != "ConfigMap"]
    result.append(
        Operator(
            "kueue",
            KUEUE,
            "kueue-system",
            "kueue",
            localise(
                manifests,
                ca_bundle,
                {
                    ("kueue-system", "kueue-webhook-service"): ports["webhook"],
                    ("kueue-system", "kueue-visibility-server"): ports["visibility"],
                    ("kueue-system", "kueue-controller-manager-metrics-service"): ports["metrics"],
                },
            ),
            ports,
            argv=[f"--config={config}", f"--kubeconfig={kubeconfig}"],
            binds={"/etc/kueue/metrics/certs": certs, "/visibility": certs},
        )
    )

    ports = {"webhook": pick(9445), "health": pick(8083)}
    config = _write_config(
        folder,
        "trainer",
        {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "health": {
                "healthProbeBindAddress": f"127.0.0.1:{ports['health']}",
                "readinessEndpointName": "readyz",
                "livenessEndpointName": "healthz",
            },
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1"},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "clientConnection": {"qps": 50, "burst": 100},
        },
    )
    base = module_dir("github.com/kubeflow/trainer/v2", TRAINER) / "manifests/base"
    manifests = kustomize_bases(
        kubectl,
        "kubeflow-system",
        [base / "crds", base / "manager", base / "rbac", base / "webhook"],
    )
    manifests = [m for m in manifests if m["kind"] != "ConfigMap"]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow-system"}}
    runtime = load_documents((base / "runtimes/torch_distributed.yaml").read_text())
    result.append(
        Operator(
            "trainer",
            TRAINER,
            "kubeflow-system",
            "trainer-controller-manager",
            [
                namespace,
                *localise(
                    manifests,
                    ca_bundle,
                    {
                        ("kubeflow-system", "kubeflow-trainer-controller-manager"): ports[
                            "webhook"
                        ],
                    },
                ),
            ],
            ports,
            argv=[f"--config={config}", f"--kubeconfig={kubeconfig}"],
            binds={"/tmp/k8s-webhook-server/serving-certs": certs},
            after=runtime,
        )
    )

    ports = {"webhook": pick(9446), "metrics": pick(8084), "health": pick(8085)}
    root = module_dir("github.com/kubeflow/training-operator", TRAINING_OPERATOR)
    manifests = kustomize(kubectl, root / "manifests/overlays/standalone")
    # Its cert rotator cannot be turned off: it makes its own CA and certificate in the
    # Secret training-operator-webhook-cert and writes the webhook's caBundle, but waits
    # for a certificate in its folder first. It starts with ours; the launcher then copies
    # the rotator's into the folder (cert_secret), and the webhook server reloads it.
    private = folder / "training-operator-certs"
    private.mkdir(exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (private / name).write_bytes((certs / name).read_bytes())
    localised = localise(
        manifests, ca_bundle, {("kubeflow", "training-operator"): ports["webhook"]}
    )
    result.append(
        Operator(
            "training-operator",
            TRAINING_OPERATOR,
            "kubeflow",
            "training-operator",
            localised,
            ports,
            argv=[
                f"--kubeconfig={kubeconfig}",
                f"--webhook-server-port={ports['webhook']}",
                f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
                f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
                "--enable-scheme=pytorchjob",
                "--enable-scheme=tfjob",
                "--leader-elect=false",
            ],
            binds={"/tmp/k8s-webhook-server/serving-certs": private},
            env={"MY_POD_NAMESPACE": "kubeflow"},
            cert_secret=("kubeflow", "training-operator-webhook-cert"),
            cert_dir=private,
            probe={
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "gpuhub-cluster-probe", "namespace": "default"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {"name": "pytorch", "image": "probe", "command": ["true"]}
                                    ]
                                }
                            },
                        }
                    }
                },
            },
        )
    )
    return result


def in_mount_namespace(argv: list[str], binds: dict[str, Path]) -> list[str]:
    """``argv`` run where each hard-coded path in ``binds`` shows our folder instead."""
    if not binds:
        return argv
    lines = ["set -e"]
    for target, source in binds.items():
        lines.append(f"mkdir -p '{target}'")
        lines.append(f"mount --bind '{source}' '{target}'")
    lines.append('exec "$@"')
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "\n".join(lines),
        "sh",
        *argv,
    ]
