"""What the local cluster is made of: each component, the Go module and version it is built
from, and the binary it becomes.

Three wrapper modules hold the pins (``localk8s/go/k8s``, ``localk8s/go/etcd`` and
``localk8s/go/coredns``, with their ``go.sum``). Every Kubernetes-side component lives in
the one ``k8s`` module on purpose: Kueue, JobSet, Trainer, the Training Operator and kwok
are all built against the 0.36 client libraries, so one module graph lets them share one
compiled copy of ``k8s.io/*`` with the control plane instead of five (the cold build is
most of CI's budget). etcd keeps its own module so its client libraries never skew the apiserver's;
CoreDNS too (it is built against newer client libraries), and its module holds a small
``main.go`` that links only the plugins the cluster's Corefile uses.
``python -m localk8s.build --update`` rewrites the modules from the pins below.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GO_DIR = Path(__file__).with_name("go")

KUBERNETES = "v1.36.3"
ETCD = "v3.6.16"
KWOK = "v0.8.0"
KUEUE = "v0.19.2"
JOBSET = "v0.12.0"
TRAINER = "v2.3.0"
TRAINING_OPERATOR = "v1.9.4"
COREDNS = "v1.15.0"

# Modules the k8s wrapper requires, beside k8s.io/kubernetes (whose staging modules are
# pinned by ``replace`` lines, since its own go.mod names them at the unpublished v0.0.0).
K8S_FAMILY_MODULES = {
    "k8s.io/kubernetes": KUBERNETES,
    "sigs.k8s.io/kwok": KWOK,
    "sigs.k8s.io/kueue": KUEUE,
    "sigs.k8s.io/jobset": JOBSET,
    "github.com/kubeflow/trainer/v2": TRAINER,
    "github.com/kubeflow/training-operator": TRAINING_OPERATOR,
}


def _kubernetes_version_flags() -> tuple[str, ...]:
    """What ``hack/lib/version.sh`` stamps into a release build: clients read ``/version``
    (Kueue's job webhooks do), and without these a source build says ``v0.0.0-master``."""
    major, minor = KUBERNETES.lstrip("v").split(".")[:2]
    stamps = {
        "gitVersion": KUBERNETES,
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": f"gpuhub-{KUBERNETES}",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",  # fixed, so the link is reproducible and cached
    }
    return tuple(
        f"-X {package}.{key}={value}"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, value in stamps.items()
    )


@dataclass(frozen=True)
class Component:
    """One binary of the cluster."""

    name: str  # the binary's file name
    module: str
    version: str
    package: str  # the main package
    family: str  # the wrapper module under localk8s/go/ it builds in
    ldflags: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return f"{self.name} ({self.module} {self.version})"

    @property
    def module_dir(self) -> Path:
        return GO_DIR / self.family


_K8S_STAMPS = _kubernetes_version_flags()

COMPONENTS: tuple[Component, ...] = (
    Component(
        "etcd",
        "go.etcd.io/etcd/server/v3",
        ETCD,
        "go.etcd.io/etcd/server/v3",
        "etcd",
        (f"-X go.etcd.io/etcd/api/v3/version.GitSHA=gpuhub-{ETCD}",),
    ),
    Component(
        "kube-apiserver",
        "k8s.io/kubernetes",
        KUBERNETES,
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s",
        _K8S_STAMPS,
    ),
    Component(
        "kube-controller-manager",
        "k8s.io/kubernetes",
        KUBERNETES,
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s",
        _K8S_STAMPS,
    ),
    Component(
        "kube-scheduler",
        "k8s.io/kubernetes",
        KUBERNETES,
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s",
        _K8S_STAMPS,
    ),
    # kubectl: `kubectl kustomize` renders the operators' manifests from their module
    # sources (and admins get a kubectl matching the cluster).
    Component(
        "kubectl",
        "k8s.io/kubernetes",
        KUBERNETES,
        "k8s.io/kubernetes/cmd/kubectl",
        "k8s",
        _K8S_STAMPS,
    ),
    Component("kwok", "sigs.k8s.io/kwok", KWOK, "sigs.k8s.io/kwok/cmd/kwok", "k8s"),
    Component(
        "kueue",
        "sigs.k8s.io/kueue",
        KUEUE,
        "sigs.k8s.io/kueue/cmd/kueue",
        "k8s",
        (f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE}",),
    ),
    Component(
        "jobset",
        "sigs.k8s.io/jobset",
        JOBSET,
        "sigs.k8s.io/jobset",
        "k8s",
        (f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={JOBSET}",),
    ),
    Component(
        "trainer-controller-manager",
        "github.com/kubeflow/trainer/v2",
        TRAINER,
        "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
        "k8s",
    ),
    Component(
        "training-operator",
        "github.com/kubeflow/training-operator",
        TRAINING_OPERATOR,
        "github.com/kubeflow/training-operator/cmd/training-operator.v1",
        "k8s",
    ),
    # The process node's kubelet port: exec, attach and port-forward through Kubernetes'
    # own streaming server (its staging module k8s.io/cri-streaming); gpuhub's own main
    # package in the k8s wrapper module, so it adds seconds to a cold build.
    Component(
        "process-kubelet",
        "k8s.io/kubernetes",
        KUBERNETES,
        "gpuhub.local/cluster/k8s/cmd/process-kubelet",
        "k8s",
    ),
    # Cluster DNS: the wrapper module's own main package (CoreDNS's plugins, a few of them).
    Component(
        "coredns",
        "github.com/coredns/coredns",
        COREDNS,
        "gpuhub.local/cluster/coredns",
        "coredns",
        (f"-X github.com/coredns/coredns/coremain.GitCommit=gpuhub-{COREDNS}",),
    ),
)

BY_NAME = {c.name: c for c in COMPONENTS}
