"""kubesim: a wire-level Kubernetes API simulator for gpuhub's tests (see README.md)."""

from .sim import KubeSim, KubeSimThread, kubeconfig_text, load_nodes, node_object

__all__ = ["KubeSim", "KubeSimThread", "kubeconfig_text", "load_nodes", "node_object"]
