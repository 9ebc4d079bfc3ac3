"""The GPU ledger: who holds which GPUs, and whether a user may take more.

Every "may this user hold N more GPUs?" question in gpuhub is answered here, by
:meth:`Ledger.check`, under one lock per user (:meth:`Ledger.lock`): spawns of both
spawners (named servers too), and cluster jobs, PyTorchJob/TFJob replicas and pipeline runs
submitted through the jobs service, which asks the hub's ledger (:mod:`gpuhub.hub.web.api`).
"May this user have *this* request?" (image, GPU type, count per group) is the policy's
question: :class:`gpuhub.core.policy.UserLimits`, applied by :func:`gpuhub.core.options.parse_launch_options`.

What a user holds comes from a :class:`HoldingsSource`: the local device book
(:mod:`gpuhub.hub.ledger.device_book`) on a workstation, the watch-backed pod cache
(:mod:`gpuhub.hub.ledger.capacity`) plus grants not yet visible as pods on Kubernetes. Neither ever
lists anything per request. CPU-only servers and jobs hold nothing and never count.

``gpu_quota = {"default": 2, "groups": {"staff": 8}}``: the most GPUs one user holds at
once. A user's quota is the largest among their groups, else ``default``; ``None`` means no
quota beyond the per-request limits. Over quota is HTTP 403 with one sentence naming the
quota and what the user holds where.

A share of a GPU (:mod:`gpuhub.core.sharing`) counts as its fraction of a GPU, exactly
(:class:`~fractions.Fraction`): 8 GB of a 16 GB GPU is half a GPU, so a quota of 1 holds two
such shares or one whole GPU. Quotas may be fractions too (``"default": 0.5``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

from gpuhub.core.holdings import (
    HolderKind,
    Holding,
    QuotaExceeded,
    Workload,
    per_workload,
    quota_sentence,
)


class HoldingsSource(Protocol):
    """Where a ledger learns what each user holds (the local device book, the pod cache)."""

    def holdings(self, user: str | None = None) -> list[Holding]: ...


@runtime_checkable
class SeenSource(Protocol):
    """A source that remembers the most GPUs it ever saw a workload hold at once
    (:meth:`gpuhub.hub.ledger.capacity.ClusterCapacity.seen_most`): a job that ran and ended between two
    looks at the ledger settled its grant, though its pods are gone now."""

    def seen_most(self, match: tuple[str, ...]) -> int: ...


@dataclass
class Grant:
    """GPUs promised to a workload that its holdings source does not show yet: a server whose
    pod is not in the watch yet, a job the jobs service is creating or that waits in Kueue's
    queue.

    A server's grant is matched to its pods by user and server name (JupyterHub keeps those
    unique). A job's is matched by its object's kind and uid (``workload``, ``uid``), which the
    service sends once it has created the object; until then it matches nothing and counts
    whole (the safe direction), never by the job's name."""

    user: str
    kind: HolderKind
    name: str
    gpus: int
    gpu_type: str
    expires: float
    workload: str = ""  # a job's kind: job, pytorchjob, tfjob, pipeline
    uid: str = ""  # its object's uid (a pipeline: its KFP run id), once created
    # A share of GPUs (all of the workload's, gpuhub.core.sharing): what the grant counts as, and
    # its GPU memory; None for whole GPUs.
    share: Fraction | None = None
    memory: int = 0
    # The job waits in Kueue's queue (the service says so when it binds or renews the grant);
    # else it waits for its pods to show. Either way nothing is given to it yet: its
    # holding is waiting (counted against the quota, never held).
    queued: bool = False

    @property
    def key(self) -> tuple[str, ...]:
        """Where the ledger keeps it: a later grant for the same thing replaces it."""
        if self.kind == "server":
            return ("server", self.user, self.name)
        return ("job", self.user, self.workload, self.name)

    @property
    def match(self) -> tuple[str, ...] | None:
        """What a holding of its workload looks like (:func:`_match`); None: not known yet."""
        if self.kind == "server":
            return ("server", self.user, self.name)
        return ("job", self.workload, self.uid) if self.uid else None


def holding_match(holding: Holding) -> tuple[str, ...] | None:
    """The grant a holding of the source settles, if any (:attr:`Grant.match`)."""
    if holding.kind == "server":
        return ("server", holding.user, holding.name)
    if holding.workload is not None:
        return ("job", holding.workload.kind, holding.workload.uid)
    return None


class Ledger:
    """Holdings from ``source``, grants in flight, one lock per user, one quota check."""

    def __init__(self, source: HoldingsSource) -> None:
        self.source = source
        self._locks: dict[str, asyncio.Lock] = {}
        self._grants: dict[tuple[str, ...], Grant] = {}

    def lock(self, user: str) -> asyncio.Lock:
        """The one lock around "check, then take" for ``user``'s spawns and submits."""
        return self._locks.setdefault(user, asyncio.Lock())

    def holdings(self, user: str | None = None) -> list[Holding]:
        """What ``user`` (everyone if None) holds or waits for: the source's view plus live
        grants (waiting: no pod of theirs shows yet), one holding per server or job."""
        held = self.source.holdings(user)
        now = time.time()
        seen: dict[tuple[str, ...], int] = {}
        for holding in held:
            match = holding_match(holding)
            if match is not None:
                seen[match] = seen.get(match, 0) + holding.gpus
        for key, grant in list(self._grants.items()):
            match = grant.match
            shown = seen.get(match, 0) if match is not None else 0
            if match is not None and isinstance(self.source, SeenSource):
                shown = max(shown, self.source.seen_most(match))
            missing = grant.gpus - shown
            if grant.expires < now or missing <= 0:
                del self._grants[key]  # all of it visible in the source now (or given up on)
            elif user is None or grant.user == user:
                # Replicas of a training job appear one by one: count the ones not seen yet.
                part = Fraction(missing, grant.gpus)
                held.append(
                    Holding(
                        grant.user,
                        grant.kind,
                        grant.name,
                        missing,
                        grant.gpu_type,
                        workload=Workload(grant.workload, grant.uid) if grant.workload else None,
                        share=None if grant.share is None else grant.share * part,
                        memory=int(grant.memory * part),
                        waiting="queue" if grant.queued else "node",
                    )
                )
        return per_workload(held)

    def check(
        self,
        user: str,
        limit: Fraction | int | None,
        wanted: Fraction | int,
        *,
        what: str = "server",
        replacing: tuple[HolderKind, str] | None = None,
    ) -> list[Holding]:
        """Raise :class:`QuotaExceeded` unless ``user`` may take ``wanted`` more GPUs (a
        share: its fraction, :attr:`gpuhub.core.options.LaunchOptions.gpu_amount`).

        ``replacing`` names a holding the new one replaces (a server being started again),
        which does not count. Returns what the user holds, for messages.
        """
        held = [h for h in self.holdings(user) if replacing != (h.kind, h.name)]
        if limit is not None:
            message = quota_sentence(held, limit, wanted, what)
            if message is not None:
                raise QuotaExceeded(message)
        return held

    def grant(self, grant: Grant) -> None:
        """Count ``grant`` until the source shows its workload (or it expires)."""
        self._grants[grant.key] = grant

    def release_grant(self, user: str, server: str) -> None:
        """Forget the grant of ``user``'s server ``server`` (its spawn failed or it stopped)."""
        self._grants.pop(("server", user, server), None)

    def release_job_grant(self, user: str, job: str, kind: str | None = None) -> None:
        """Forget the grant of ``user``'s job ``job`` (of ``kind``; any kind if None: job ids
        are unique across kinds)."""
        for key, grant in list(self._grants.items()):
            if (
                grant.kind == "job"
                and grant.user == user
                and grant.name == job
                and kind in (None, grant.workload)
            ):
                del self._grants[key]
