"""A Kubernetes server's spawn progress in words (:mod:`gpuhub.hub.progress`): a part of
:class:`gpuhub.hub.gpu_spawner.GPUSpawner`.

The pod's events told as steps for the hub's progress bar, the line's words while Kueue
holds the pod, and the "N free now" figure kept current while it waits for GPUs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpuhub.hub.ledger.capacity import CapacityUnavailable, shared_capacity
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.progress import SpawnRequest, Step, describe, waiting_for_gpus
from gpuhub.hub.spawner_parts import KubePart


class SpawnProgress(KubePart):
    """What the hub's progress bar says while a server starts."""

    _gpuhub_last_step: Step | None = None  # the last step told, for a timeout's words

    def spawn_request(self) -> SpawnRequest:
        """What this spawn asked for, in the words of the form."""
        options = self.launch_options
        if options is None:
            return SpawnRequest(image=self.image)
        image = options.image or self.image
        images = self.gpu_policy.images
        if options.image_key and options.image_key in images:
            image = images[options.image_key].display_name
        gpu_type = options.gpu_type
        return SpawnRequest(
            image=image,
            gpus=options.gpus,
            gpu_name=gpu_type.display_name if gpu_type else "",
            gpu_resource=gpu_type.resource_name if gpu_type else "",
            cpu=options.cpu,
            memory=options.memory,
        )

    def _type_capacity(self) -> GPUCapacity | None:
        options = self.launch_options
        if options is None or options.gpu_type is None:
            return None
        try:
            figures = shared_capacity(self.api).capacity([self._as_placed(options.gpu_type)])
        except CapacityUnavailable:
            return None
        return figures.get(options.gpu_type.key)

    def _steps(self) -> list[tuple[str, Step]]:
        """This pod's events so far, told as steps: ``(event uid, step)``."""
        request = self.spawn_request()
        capacity = self._type_capacity()
        steps = []
        for event in self.events:
            step = describe(event, request, capacity)
            if step is not None:
                steps.append((event["metadata"]["uid"], step))
        return steps

    async def progress(self) -> Any:
        """Spawn progress in words for the hub's progress bar (see :mod:`gpuhub.hub.progress`)."""
        if not self.events_enabled:
            return
        await self._start_watching_events()
        shown: set[str] = set()
        last_message = ""
        request = self.spawn_request()
        while True:
            start_future = self._start_future
            done = start_future is not None and start_future.done()
            for uid, step in self._steps():
                if uid in shown:
                    continue
                shown.add(uid)
                self._gpuhub_last_step = step
                if step.message != last_message:
                    last_message = step.message
                    yield {"progress": step.progress, "message": step.message}
            if not done and self._in_kueue():
                # Held by Kueue: no scheduler events yet; the line is what there is to say.
                event = await self._kueue_event()
                if event["message"] != last_message:
                    last_message = event["message"]
                    yield event
            last = self._gpuhub_last_step
            if last is not None and last.waiting_for_gpus and not done:
                # GPUs come and go while we wait: keep the "N free now" figure current.
                message = waiting_for_gpus(request, self._type_capacity())
                if message != last_message:
                    last_message = message
                    yield {"progress": last.progress, "message": message}
            if done:
                break
            await asyncio.sleep(0.5)
