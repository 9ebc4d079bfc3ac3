"""What a spawner's part is written against: for the type checker, the spawner it is mixed into.

A part (``kube_capacity``, ``local_line``, …) is a class of its own that ``GPUSpawner`` or
``LocalGPUSpawner`` mixes in; its methods use the spawner's traits and methods
(``GPUSpawnerMixin`` and ``KubeSpawner`` or ``LocalProcessSpawner``). At run time a part's
base is ``object``, so nothing is inherited twice; for mypy it is the spawner it joins, said
once here rather than in every part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyterhub.spawner import LocalProcessSpawner
    from kubespawner import KubeSpawner

    from gpuhub.hub import cgroups
    from gpuhub.hub.ledger.line import Ticket
    from gpuhub.hub.spawner_mixin import GPUSpawnerMixin

    class KubePart(GPUSpawnerMixin, KubeSpawner):
        """A part of GPUSpawner."""

    class LocalPart(GPUSpawnerMixin, LocalProcessSpawner):
        """A part of LocalGPUSpawner; what the other parts keep (local_line, local_limits)."""

        _gpuhub_ticket: Ticket | None
        _gpuhub_cgroup: cgroups.ServerCgroup | None

else:
    KubePart = LocalPart = object
