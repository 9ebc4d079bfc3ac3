"""Tests of the Kubernetes side (spawner/gpuhub/k8s): pod manifests, Kueue's words, shares
on the cluster."""
