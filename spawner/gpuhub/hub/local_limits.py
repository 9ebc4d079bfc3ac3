"""A workstation server's CPU and memory held by a cgroup of its own (:mod:`gpuhub.hub.cgroups`):
a part of :class:`gpuhub.hub.local_gpu_spawner.LocalGPUSpawner`.

Where the hub makes its servers' cgroups (``enforce_limits``), what the form says is
enforced, and each launch's cgroup made and removed.
"""

from __future__ import annotations

from tornado import web

from gpuhub.hub import cgroups
from gpuhub.hub.refusals import log_name, refusal
from gpuhub.hub.spawner_parts import LocalPart


class WorkstationLimits(LocalPart):
    """A server's cgroup: where it can be made, made for a launch, removed when it ends."""

    _gpuhub_cgroup: cgroups.ServerCgroup | None = None
    _told_limits = False

    def limits_place(self) -> cgroups.Place | None:
        """Where this hub makes its servers' cgroups; None where it enforces nothing. With
        ``enforce_limits = True`` and no place, spawns are refused (503), saying why."""
        if self.enforce_limits is False:
            return None
        required = self.enforce_limits is True
        place, why = cgroups.shared_place(required)
        if place is None and required:
            raise refusal(
                f"This machine cannot hold servers to their CPU and memory ({why}), and the "
                "hub must (LocalGPUSpawner.enforce_limits = True): no server starts until an "
                "admin fixes that.",
                503,
            )
        if not WorkstationLimits._told_limits:
            WorkstationLimits._told_limits = True  # once per hub process
            # Said once, as information: "auto" on a machine without cgroups to divide is
            # a normal set-up (the form says it to users), not something to fix.
            if place is None:
                self.log.info("LocalGPUSpawner: CPU and memory are not enforced: %s", why)
            else:
                self.log.info("LocalGPUSpawner: CPU and memory enforced by %s", place)
        return place

    def resource_enforcement(self) -> str:
        if self.caps_not_enforced():
            return "unenforced"  # its cgroup is the hub account's, so the server's own too
        try:
            return "capped" if self.limits_place() is not None else "unenforced"
        except web.HTTPError:
            return "unenforced"

    def caps_not_enforced(self) -> str:
        if not self.run_as_hub_user:
            return ""
        return (
            "every server runs as the OS account of the hub itself (run_as_hub_user), so a "
            "server can rewrite its own limits and the record of GPU-hours used"
        )

    def _make_cgroup(self) -> cgroups.ServerCgroup | None:
        """This launch's cgroup, with the cores and memory it was given; the server joins it
        before it execs (make_preexec_fn)."""
        place, options = self.limits_place(), self.launch_options
        if place is None or options is None:
            return None
        cgroups.sweep()
        name = cgroups.cgroup_name(self.user.name, self.name, self._server_id)
        try:
            return place.make(name, options.cpu, options.memory)
        except cgroups.CgroupError as exc:
            if self.enforce_limits is True:
                raise refusal(f"Your server's CPU and memory cannot be held: {exc}.", 503) from None
            self.log.warning("%s starts without CPU and memory limits: %s", log_name(self), exc)
            return None

    def _remove_cgroup(self) -> None:
        """Remove the server's cgroup once it has ended; one its surviving processes (a job)
        still run in goes when they have ended (cgroups.sweep)."""
        cgroup, self._gpuhub_cgroup = self._gpuhub_cgroup, None
        if cgroup is not None and not cgroup.remove():
            cgroups.LEFTOVER.add(cgroup)
        cgroups.sweep()
