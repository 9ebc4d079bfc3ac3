"""A Kubernetes server's GPUs against the cluster and the quota: a part of
:class:`gpuhub.hub.gpu_spawner.GPUSpawner`.

The spawn form's live figures (free and total GPUs per type, from the hub's shared watch),
the refusal of a request no node could ever hold, and the quota check and grant in the hub's
ledger before any pod exists.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from gpuhub.core import words
from gpuhub.core.holdings import QuotaExceeded
from gpuhub.core.options import LaunchOptions
from gpuhub.core.policy import GPUType
from gpuhub.core.quantity import format_cpu, format_memory, human_memory
from gpuhub.hub.ledger.capacity import (
    FIRST_SYNC_WAIT,
    CapacityUnavailable,
    shared_capacity,
    shared_ledger,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Grant, Ledger
from gpuhub.hub.refusals import log_name, refusal
from gpuhub.hub.spawner_parts import KubePart
from gpuhub.k8s.dra import unreadable_words

QUOTA_UNAVAILABLE = (
    "Your GPU quota cannot be checked right now (the cluster did not answer); "
    "try again in a minute, or start a server without GPUs."
)
CAPACITY_UNAVAILABLE = (
    "Live GPU availability cannot be shown right now (the cluster did not answer). "
    "You can still start a server; it will wait for free GPUs."
)
# The hub has just started and is still reading the cluster (a big one takes a while).
QUOTA_LOADING = (
    "Your GPU quota cannot be checked yet: the hub is still reading the cluster's pods "
    "after its start (over a minute so far); try again shortly, or start a server without "
    "GPUs."
)
CAPACITY_LOADING = (
    "Live GPU availability is still loading: the hub is reading the cluster's nodes and "
    "pods after its start; reload this page in a few seconds. You can still start a server; "
    "it will wait for free GPUs."
)


def dra_note(
    types: list[GPUType],
    figures: Mapping[str, GPUCapacity],
    missing: Mapping[str, str],
    forbidden: str,
) -> str:
    """What the form says of DRA types: each one whose DeviceClass the cluster lacks
    (``missing``' sentences), then those the hub may not read (``forbidden``: a 403, the
    capacity watch's sentence), which have no figure."""
    notes = list(missing.values())
    unread = [t.display_name for t in types if t.dra is not None and t.key not in figures]
    if unread and forbidden:
        notes.append(unreadable_words(unread, forbidden))
    return " ".join(notes)


def _unavailable(cache: Any, loading: str, failed: str) -> str:
    """Why the cluster's figures are missing: still loading, or the cluster did not answer."""
    return failed if getattr(cache, "error", "") is not None else loading


class LiveCapacity(KubePart):
    """The cluster's GPUs as the form shows them, and the checks before a pod exists."""

    async def gpu_capacity(self) -> tuple[dict[str, GPUCapacity], str]:
        """Free/total GPUs per type from the shared watch of the cluster (no LIST per view)."""
        if not self.gpu_policy.gpu_types:
            return {}, ""
        types = list(self.gpu_policy.gpu_types.values())
        if any(t.dra is not None for t in types):
            await self._sweep_orphan_templates()
        missing = await self._missing_classes(types)
        cache = shared_capacity(self.api)
        if not await cache.wait_ready(self.capacity_wait):
            return {}, _unavailable(cache, CAPACITY_LOADING, CAPACITY_UNAVAILABLE)
        try:
            figures = cache.capacity(map(self._as_placed, types))
        except CapacityUnavailable:
            return {}, _unavailable(cache, CAPACITY_LOADING, CAPACITY_UNAVAILABLE)
        # A DRA type whose DeviceClass the cluster lacks has no device: none free, and why.
        figures.update({key: GPUCapacity(free=0, total=0) for key in missing})
        return figures, dra_note(types, figures, missing, cache.dra.forbidden)

    async def gpu_ledger(self, wait: float | None = None) -> Ledger:
        """The hub's ledger of this cluster, once the pod watch has answered (waiting up to
        ``wait`` seconds, else ``capacity_wait``, for the first sync after the hub's start)."""
        cache = shared_capacity(self.api)
        if not await cache.wait_ready(max(wait or 0.0, self.capacity_wait)):
            raise refusal(_unavailable(cache, QUOTA_LOADING, QUOTA_UNAVAILABLE), 503)
        return shared_ledger(self.api)

    async def reserve_launch(self, options: LaunchOptions) -> None:
        """Refuse, before any pod exists, a request no node of the cluster could ever hold,
        or one that would put the user over their GPU quota; else reserve its GPUs in the
        hub's ledger (a grant, until its pod shows in the watch)."""
        gpu_type = options.gpu_type
        if gpu_type is None or options.gpus == 0:
            return
        await self._check_fit(gpu_type, options)
        if self._queued(options):
            await self._expect_kueue()
            await self._choose_queue(options)
            # The time in Kueue's line comes on top of the time to start, and JupyterHub
            # waits for start() that long too (set before it starts waiting).
            self.extend_start_timeout()
        limit = self.gpu_quota_limit()
        if limit is None:
            return
        ledger = await self.gpu_ledger(wait=FIRST_SYNC_WAIT)
        async with ledger.lock(self.user.name):
            try:
                ledger.check(
                    self.user.name, limit, options.gpu_amount, replacing=("server", self.name)
                )
            except (QuotaExceeded, CapacityUnavailable) as exc:
                if isinstance(exc, CapacityUnavailable):
                    message = _unavailable(ledger.source, QUOTA_LOADING, QUOTA_UNAVAILABLE)
                    raise refusal(message, 503) from None
                self.log.warning("Spawn of %s over quota: %s", log_name(self), exc.message)
                raise refusal(exc.message, exc.status) from None
            # Counted from now on, until the pod shows in the watch (then the pod counts).
            ledger.grant(
                Grant(
                    self.user.name,
                    "server",
                    self.name,
                    options.gpus,
                    gpu_type.key,
                    time.time() + self.start_timeout + 60,
                    share=options.share,
                    memory=options.gpu_memory or 0,
                )
            )

    def _release_grant(self) -> None:
        if self.gpu_quota_limit() is not None:
            with contextlib.suppress(RuntimeError):
                shared_ledger(self.api).release_grant(self.user.name, self.name)

    async def _check_fit(self, gpu_type: GPUType, options: LaunchOptions) -> None:
        if gpu_type.dra is not None:
            # Without its DeviceClass the claim could never be allocated, whatever the slices.
            missing = await self._missing_classes([gpu_type])
            if missing:
                raise refusal(missing[gpu_type.key])
        cache = shared_capacity(self.api)
        if not await cache.wait_ready(self.capacity_wait):
            return  # cannot tell now; the scheduler will
        try:
            fit = cache.fit(self._as_placed(gpu_type), options.gpus)
        except CapacityUnavailable:
            return
        name = gpu_type.display_name
        if fit.nodes == 0:
            raise refusal(
                f"This cluster has no nodes with {words.gpu_noun(name, 2)}, so the server could never start; "
                "pick another GPU type."
            )
        if options.gpus > fit.max_gpus:
            raise refusal(
                f"No node in this cluster has {words.gpus(options.gpus, name)} (the most on one node "
                f"is {fit.max_gpus}); ask for {fit.max_gpus} or fewer."
            )
        memory = options.gpu_memory or 0
        if fit.max_device_memory is not None and memory > fit.max_device_memory:
            # A DRA type's devices say their memory: a share none could ever hold.
            raise refusal(
                f"No {name} GPU has {human_memory(memory)} of memory; the largest has "
                f"{human_memory(fit.max_device_memory)} ({fit.largest_device}); ask for less "
                "GPU memory."
            )
        if options.cpu > fit.max_cpu:
            raise refusal(
                f"No node with {words.gpus(options.gpus, name)} has "
                f"{words.plural(options.cpu, 'CPU')} "
                f"(the most is {format_cpu(fit.max_cpu)}); ask for fewer CPUs."
            )
        if options.memory > fit.max_memory:
            raise refusal(
                f"No node with {words.gpus(options.gpus, name)} has {format_memory(options.memory)} "
                f"of memory (the most is {format_memory(fit.max_memory)}); ask for less memory."
            )
