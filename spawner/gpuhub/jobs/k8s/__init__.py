"""The Kubernetes backend of the hub service, for every kind whose job is a Kubernetes object
(:mod:`gpuhub.jobs.kinds`).

:mod:`.manifests` (objects from a request), :mod:`.status` (queue and log in human terms),
:mod:`.objects` (any kind's objects through one client), :mod:`.cancel` (the one cancel, the
fleet page's too), :mod:`.backend` (create, follow, cancel with the service's credentials).
What the job pod runs is :mod:`gpuhub.jobs.run_notebook`, shipped in the job's ConfigMap.
Imports kubernetes_asyncio only from :mod:`.objects`, :mod:`.cancel` and :mod:`.backend`.
"""
