"""Kubernetes backends of the hub service: batch/v1 Jobs and Kubeflow PyTorchJob/TFJob.

:mod:`.manifests` (objects from a request), :mod:`.status` (status in human terms),
:mod:`.backend` (create, follow, cancel with the service's credentials),
:mod:`.rawapi` (the API's raw JSON). What the job pod runs is :mod:`gpuhub.jobs.run_notebook`,
shipped in the job's ConfigMap. Imports kubernetes_asyncio only from :mod:`.backend`.
"""
