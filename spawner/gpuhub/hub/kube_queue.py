"""A Kubernetes GPU server waiting in Kueue's line (``kueue_queue_name``, :mod:`gpuhub.k8s.kueue`):
a part of :class:`gpuhub.hub.gpu_spawner.GPUSpawner`.

Whether a spawn queues, which LocalQueue it waits in (the user's own with a fair line), its
place in line and the spawn page's words while it waits.
"""

from __future__ import annotations

from typing import Any

from gpuhub.core import words
from gpuhub.core.options import LaunchOptions
from gpuhub.hub.ledger.booking_book import BOOKINGS
from gpuhub.hub.monitor.booking_queues import queue_for
from gpuhub.hub.spawner_parts import KubePart
from gpuhub.k8s.kueue import Pending, gated, shared_kueue, waiting_words


class KueueLine(KubePart):
    """A GPU server's wait in Kueue's line: its queue, its place, what the page says."""

    def _queued(self, options: LaunchOptions | None) -> bool:
        """Whether this spawn's pod waits in Kueue's queue: a GPU server, with a queue set."""
        return bool(
            self.kueue_queue_name
            and options is not None
            and options.gpu_type is not None
            and options.gpus > 0
        )

    async def _expect_kueue(self) -> None:
        """Say once in the log when servers are meant to queue but the cluster runs no Kueue:
        they start as they would without a queue, and the admin should know why."""
        if self.__class__._gpuhub_kueue_checked:
            return
        self.__class__._gpuhub_kueue_checked = True
        if await shared_kueue(self.api.api_client).version() is None:
            self.log.warning(
                "GPUSpawner.kueue_queue_name is %r, but the cluster serves no Kueue "
                "(kueue.x-k8s.io): GPU servers start without waiting in a queue.",
                self.kueue_queue_name,
            )

    _gpuhub_kueue_checked = False

    # -- a fair queue: one LocalQueue per user (line_order = "fair", gpuhub.k8s.kueue) -------
    _gpuhub_user_queue = ""  # this spawn's own LocalQueue ("": the admin's queue)

    _gpuhub_booked_queue = ""  # the LocalQueue of a booking for this user in force now

    async def _choose_queue(self, options: LaunchOptions | None = None) -> None:
        """The LocalQueue of a booking for this user and GPU type in force now, where there
        is one (its ClusterQueue holds the booked GPUs: :mod:`gpuhub.hub.monitor.booking_queues`).
        Else, with ``line_order = "fair"`` where Kueue offers admission fair sharing, this
        user's own LocalQueue (made on first use): Kueue orders LocalQueues by past usage.
        Elsewhere the admin's queue, first come, first served; the hub says why once."""
        self._gpuhub_user_queue = ""
        self._gpuhub_booked_queue = await self._booked_queue(options or self.launch_options)
        if self._gpuhub_booked_queue:
            return
        if self.gpu_line_order().fair:
            self._gpuhub_user_queue = await shared_kueue(self.api.api_client).own_queue(
                self.namespace, self.kueue_queue_name, self.user.name, "GPU servers", self.log
            )

    async def _booked_queue(self, options: LaunchOptions | None) -> str:
        """The LocalQueue of a booking in force now for this user (or a group of theirs) and
        the GPU type of ``options``, once the hub has made it; "" where there is none."""
        if options is None or options.gpu_type is None or not BOOKINGS.bookings:
            return ""
        groups = [g.name for g in getattr(self.user, "groups", ())]
        try:
            return await queue_for(
                self.api.api_client,
                self.namespace,
                list(BOOKINGS.bookings.values()),
                lambda booking, user: BOOKINGS.is_for(booking, user, groups),
                self.user.name,
                options.gpu_type.key,
            )
        except Exception as exc:  # an apiserver hiccup: the admin's queue, and why
            self.log.warning(
                "Cannot tell whether %s has a booking's queue: %s", self.user.name, exc
            )
            return ""

    def _waits_in(self) -> str:
        """The LocalQueue this spawn's pod waits in: a booking's, the user's own, or the
        admin's."""
        return self._gpuhub_booked_queue or self._gpuhub_user_queue or self.kueue_queue_name

    # -- waiting in Kueue's line (kueue_queue_name) ------------------------------------------
    _gpuhub_asked_at = 0.0  # when this spawn started: the line's deadline counts from it
    _gpuhub_joined_at = 0  # the place at which the spawn was first seen in line

    def _pod(self) -> dict[str, Any] | None:
        """This spawn's pod as KubeSpawner's pod watch last saw it (JSON), or None."""
        return self.pod_reflector.pods.get(f"{self.namespace}/{self.pod_name}")

    def _in_kueue(self) -> bool:
        """Whether Kueue still holds this spawn's pod back (its admission gate is on)."""
        return self._queued(self.launch_options) and gated(self._pod())

    def _kueue_deadline(self) -> float:
        return self._gpuhub_asked_at + self.gpu_queue_timeout

    async def _kueue_place(self) -> tuple[int | None, list[Pending] | None]:
        """(place in line, 1 = next; the line) of this spawn's pod in Kueue's LocalQueue: the
        place is None until Kueue lists its Workload, the line None where it cannot be read."""
        uid = ((self._pod() or {}).get("metadata") or {}).get("uid")
        try:
            line = await shared_kueue(self.api.api_client).line(self.namespace, self._waits_in())
        except Exception as exc:  # an apiserver hiccup: the page says so, the wait goes on
            self.log.info("Reading Kueue's line %s failed: %s", self._waits_in(), exc)
            line = None
        for pending in line or []:
            if uid and any(owner[2] == uid for owner in pending.owners):
                if self._gpuhub_user_queue:  # alone in its queue: the ClusterQueue's place
                    return pending.in_cluster_queue, line
                return pending.position, line
        return None, line

    async def _kueue_event(self) -> dict[str, Any]:
        """The spawn page's progress event while the pod waits in Kueue's line, in the words
        queued jobs use too (:func:`gpuhub.k8s.kueue.waiting_words`): what of the queue's GPUs
        is in use and by how many, and the place in line and what is in front; the bar moves
        from 10 % (where it joined) to 25 % (next); ``gpuhub_line`` is for the page's "Leave
        the line" button and clock (``templates/hub/spawn_pending.html``)."""
        place, line = await self._kueue_place()
        request = self.spawn_request()
        deadline = self._kueue_deadline()
        until = (
            f" gpuhub waits until {words.moment_utc(deadline)}, "
            f"{words.duration(self.gpu_queue_timeout)} after you asked."
        )
        try:
            use = await shared_kueue(self.api.api_client).usage(self.namespace, self._waits_in())
        except Exception as exc:  # an apiserver hiccup: the page goes on without the figures
            self.log.info("Reading Kueue's queue %s failed: %s", self.kueue_queue_name, exc)
            use = None
        said = waiting_words(
            self.kueue_queue_name,
            gpus=request.gpus,
            gpu_name=request.gpu_name,
            resource=request.gpu_resource,
            use=use,
            place=place,
            line=line,
            fair=bool(self._gpuhub_user_queue),
        )
        if place is None:
            return {
                "progress": 10,
                "message": f"{said}{until}",
                "gpuhub_line": {"place": None, "deadline": round(deadline)},
            }
        self._gpuhub_joined_at = max(self._gpuhub_joined_at, place)
        joined = self._gpuhub_joined_at
        return {
            "progress": round(10 + 15 * (joined - place + 1) / joined),
            "message": f"{said}{until}",
            "gpuhub_line": {"place": place, "deadline": round(deadline)},
        }

    def _kueue_timeout_message(self) -> str:
        request = self.spawn_request()
        return (
            f"Your server waited {words.duration(self.gpu_queue_timeout)} in the queue "
            f'"{self.kueue_queue_name}" for {words.gpus(request.gpus, request.gpu_name)} and '
            "Kueue did not admit it; try again later, or ask for fewer GPUs or another type."
        )
