"""The cluster's fake GPU nodes (kwok) and the stages that drive their pods.

A nodes file is a YAML list, one entry per node::

    - name: a100-0
      labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      allocatable: {cpu: "64", memory: 512Gi, pods: 110, nvidia.com/gpu: 8}

A node may also have GPUs claimed through Dynamic Resource Allocation, published by the
simulated NVIDIA DRA driver (:mod:`localk8s.dra`, which describes the entry)::

    - name: dra-a100-0
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      allocatable: {cpu: "64", memory: 512Gi, pods: 110}
      dra: {product: NVIDIA A100-SXM4-80GB, gpus: 4}

Such a node advertises no ``nvidia.com/*`` extended resources: a GPU is offered one way.

Each becomes a Node that kwok manages (annotation ``kwok.x-k8s.io/node=fake``) and that
carries kwok's usual taint ``kwok.x-k8s.io/node=fake:NoSchedule``, so only pods that
tolerate it land there; everything else goes to the process node, where it really runs.

kwok moves pods through *stages*. Beside its own (node-initialize, heartbeat with lease,
pod-ready, pod-delete, read from kwok's module source), gpuhub adds two, driven by what a
test writes on the pod, since a fake node has no process to end:

- ``gpuhub-pod-finish``: a running pod annotated ``gpuhub.io/kwok-exit-code: "<n>"`` ends,
  ``Succeeded`` for 0, else ``Failed``, with that exit code (``harness/cluster.py``
  ``finish_pods``).
- ``gpuhub-pod-image-missing``: a pod whose image ends in ``:missing`` never starts; its
  containers wait in ``ImagePullBackOff`` and a ``Failed to pull image`` event says why, as on
  a node whose registry lacks the image.
kwok's Job ``pod-complete`` stage is left out on purpose: a Job's pods run until told.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from .build import go_env
from .dra import check_spec

DEFAULT_NODES_FILE = Path(__file__).with_name("nodes.yaml")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
EXIT_CODE_ANNOTATION = "gpuhub.io/kwok-exit-code"
MISSING_IMAGE_SUFFIX = ":missing"

# kwok's own stages, as its module ships them.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


def node_object(entry: dict[str, Any]) -> dict[str, Any]:
    """A kwok-managed Node from one nodes-file entry."""
    unknown = set(entry) - {"name", "labels", "taints", "allocatable", "unschedulable", "dra"}
    if unknown or "name" not in entry:
        raise ValueError(
            f"a node entry takes name, labels, taints, allocatable, unschedulable and dra; "
            f"got {sorted(entry)}"
        )
    allocatable = {k: str(v) for k, v in (entry.get("allocatable") or {}).items()}
    if "dra" in entry:
        check_spec(entry["name"], entry["dra"])
        plugin = sorted(k for k in allocatable if k.startswith("nvidia.com/"))
        if plugin:
            raise ValueError(
                f"node {entry['name']} has DRA GPUs and also advertises {', '.join(plugin)}; "
                "a node offers its GPUs one way, so leave those out of its allocatable"
            )
    allocatable.setdefault("pods", "110")
    name = entry["name"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(entry.get("labels") or {}),
            },
        },
        "spec": {
            "providerID": f"kwok://{name}",
            "taints": [KWOK_TAINT, *(entry.get("taints") or [])],
            "unschedulable": bool(entry.get("unschedulable", False)),
        },
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def schedulable(node: dict[str, Any] | None) -> bool:
    """Ready, and the node lifecycle controller has lifted its ``not-ready`` taint."""
    if node is None:
        return False
    conditions = node.get("status", {}).get("conditions") or []
    taints = node.get("spec", {}).get("taints") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
        t["key"] == "node.kubernetes.io/not-ready" for t in taints
    )


def _entries(path: Path) -> list[dict[str, Any]]:
    entries = yaml.safe_load(path.read_text()) or []
    if not isinstance(entries, list):
        raise ValueError(f"{path} must hold a YAML list of nodes, not {type(entries).__name__}")
    return entries


def load_nodes(path: Path) -> list[dict[str, Any]]:
    return [node_object(e) for e in _entries(path)]


def load_dra(path: Path) -> dict[str, dict[str, Any]]:
    """Each node's ``dra`` entry (checked by :func:`load_nodes`), by node name."""
    return {e["name"]: e["dra"] for e in _entries(path) if "dra" in e}


def kwok_module_dir(kwok_version: str) -> Path:
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", f"sigs.k8s.io/kwok@{kwok_version}"],
        capture_output=True,
        text=True,
        check=True,
        env=go_env(),
        cwd=Path(__file__).with_name("go") / "k8s",
    )
    return Path(out.stdout.strip())


_FINISH_STAGE = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuhub-pod-finish
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.annotations["%(annotation)s"]', operator: Exists}
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := index .metadata.annotations "%(annotation)s" }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ $code }}
            finishedAt: {{ $now | Quote }}
            reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
            startedAt: {{ $now | Quote }}
      {{ end }}
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
"""

_IMAGE_MISSING_STAGE = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuhub-pod-image-missing
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  weight: 100
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
    - {key: '[.spec.containers[].image | endswith("%(suffix)s")] | any', operator: In, values: ["true"]}
    - {key: '.status.containerStatuses', operator: DoesNotExist}
  next:
    event:
      type: Warning
      reason: Failed
      message: "Failed to pull image: not found (the image's tag is missing on this node)"
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: ImagePullBackOff
            message: {{ printf "Back-off pulling image %%q" .image | Quote }}
      {{ end }}
      phase: Pending
      startTime: {{ $now | Quote }}
"""


def stages(kwok_dir: Path) -> str:
    """Every stage kwok runs, as one multi-document YAML."""
    documents = [(kwok_dir / p).read_text() for p in KWOK_STAGES]
    ready = yaml.safe_load(documents[2])
    # A pod whose image is missing never becomes ready; a finished pod stays finished.
    ready["spec"]["selector"]["matchExpressions"].append(
        {
            "key": f'[.spec.containers[].image | endswith("{MISSING_IMAGE_SUFFIX}")] | any',
            "operator": "NotIn",
            "values": ["true"],
        }
    )
    documents[2] = yaml.safe_dump(ready)
    documents.append(_FINISH_STAGE % {"annotation": EXIT_CODE_ANNOTATION})
    documents.append(_IMAGE_MISSING_STAGE % {"suffix": MISSING_IMAGE_SUFFIX})
    return "\n---\n".join(d.strip() for d in documents) + "\n"
