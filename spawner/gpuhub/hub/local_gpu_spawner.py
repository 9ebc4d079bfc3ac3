"""LocalGPUSpawner: JupyterHub servers as local processes on one shared multi-GPU workstation.

Each server gets whole GPUs through ``CUDA_VISIBLE_DEVICES`` from the process-wide
device book :data:`gpuhub.hub.ledger.device_book.ALLOCATOR`; a CPU-only server gets
``CUDA_VISIBLE_DEVICES=""`` and so sees no GPU at all. ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
makes CUDA number devices as NVML does, so index N is the same GPU to CUDA, NVML and the
sidebar (CUDA's own default numbers the fastest GPU first).

Isolation is cooperative: a user who edits their environment can make CUDA see other GPUs.
What gpuhub guarantees is the book: no GPU is handed to two servers, and GPUs that processes
of a stopped server still use stay held until those processes end. CPU and memory are held to
what the form asked for by a cgroup per server where the machine lets the hub make them
(``enforce_limits``, :mod:`gpuhub.hub.cgroups`); elsewhere the form says they are not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jupyterhub.spawner import LocalProcessSpawner
from tornado import web
from traitlets import Bool, Enum, Int, List, Unicode, Union, default

from gpuhub.core import devices as gpu_devices_mod
from gpuhub.core import words
from gpuhub.core.env import (
    JOB_ID_ENV,
    LAUNCH_ENV,
    MACHINERY_ENV,
    SERVER_ID_ENV,
    SIMULATED_GPUS_ENV,
)
from gpuhub.core.holder_env import holder_env
from gpuhub.core.holdings import QuotaExceeded
from gpuhub.core.line_order import LineOrder
from gpuhub.core.options import LaunchOptions
from gpuhub.core.quantity import human_memory
from gpuhub.hub import cgroups
from gpuhub.hub.ledger.booking_book import attach as attach_bookings
from gpuhub.hub.ledger.device_book import (
    ALLOCATOR,
    GPUAllocator,
    HeldProcess,
    Holder,
    HolderKey,
    jobs_key,
    server_key,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.launches import Launch, Process, Proof, command_line, device_set
from gpuhub.hub.ledger.launches import launch_key as derive_launch_key
from gpuhub.hub.ledger.launches import sign as sign_launch
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.ledger.line import GPULine, Ticket
from gpuhub.hub.monitor.eta import clock
from gpuhub.hub.monitor.gpu_monitor import current, holdings_changed
from gpuhub.hub.monitor.usage import HUB_SHUTDOWN
from gpuhub.hub.monitor.utilization import NVMLUtilization, SimulatedUtilization, UtilizationSource
from gpuhub.hub.spawner_mixin import GPUSpawnerMixin, log_name, refusal

# The ledger of this hub's workstation: what the device book says users hold, plus the
# spawns waiting in line for GPUs.
LINE = GPULine(ALLOCATOR)
LEDGER = Ledger(LINE)

SHARED_ACCOUNT_WARNING = (
    "All users' servers run as one OS account, so every user can read every other user's "
    "files and API tokens (and the hub's database and cookie secret)."
)


def likely_free(type_name: str) -> str:
    """ "likely free around 14:30 UTC": when one more request for a GPU of the type
    ``type_name`` likely starts, by the monitor's last estimate ("" before its first)."""
    monitor = current()
    found = monitor.eta.free_at.get(type_name) if monitor is not None else None
    if found is None:
        return ""
    return f"likely free around {clock(found.likely, time.time())}"


def line_usage(order: LineOrder) -> Callable[[str], float]:
    """A user's decayed GPU-seconds now, as a fair line orders by them: what the hub's
    monitor charged them (servers and job holds alike, a share as its fraction), decayed with
    ``usage_half_life`` and kept across restarts (:mod:`gpuhub.hub.ledger.budget_usage`)."""

    def usage_of(user: str) -> float:
        monitor = current()
        if monitor is None or not order.fair:
            return 0.0
        return monitor.budgets.decayed_seconds(user, time.time())

    return usage_of


SIMULATED_PREFIX = "simulated:"
SIMULATED_NAME = "Simulated GPU"


class LocalGPUSpawner(GPUSpawnerMixin, LocalProcessSpawner):
    """Local processes with GPUs handed out by index (see docs/architecture.md for the traits)."""

    gpu_platform = "workstation"

    gpu_devices = Union(
        [Unicode(), List(Int())],
        default_value="auto",
        config=True,
        help="""GPU indices this hub may hand out, "auto" to ask NVML (no driver: none), or
        "simulated:N" for N simulated GPUs (demos and tests: the lab shows its CPU activity and
        memory as the GPUs' figures, labelled "simulated" everywhere).""",
    )
    run_as_hub_user = Bool(
        False,
        config=True,
        help="""Run every server as the hub's own OS user, each in its own directory under
        ``home_dir_template`` (demo and tests). False: servers run as the system user named like
        the hub user, as LocalProcessSpawner does. """
        + SHARED_ACCOUNT_WARNING
        + """ On an address other than loopback the hub refuses to start servers unless
        ``run_as_hub_user_acknowledge_shared_account`` is also set.""",
    )
    run_as_hub_user_acknowledge_shared_account = Bool(
        False,
        config=True,
        help="""True: the admin knows that with ``run_as_hub_user`` every user can read every
        other user's files and tokens, and still wants the hub reachable beyond loopback.""",
    )
    home_dir_template = Unicode(
        config=True,
        help="""Home directory of a user's server when ``run_as_hub_user``; ``{username}`` is expanded.""",
    )

    enforce_limits = Union(
        [Bool(), Enum(["auto"])],
        default_value="auto",
        config=True,
        help="""Hold each server to the CPU cores and memory its user asked for, with a cgroup
        of its own (a CPU quota and a memory limit, as systemd's CPUQuota= and MemoryMax=):
        "auto" where the machine lets the hub (cgroup v2 delegated to the hub, e.g. systemd's
        Delegate=yes, or the hierarchy's root; cgroup v1's cpu and memory hierarchies), True
        to refuse to start servers where it cannot (HTTP 503, saying why), False never. Where
        nothing is enforced the form says so.""",
    )
    ledger_file = Unicode(
        "gpuhub-ledger.json",
        config=True,
        help="""Where the hub keeps GPUs held by processes that outlived their server (local
        jobs), so a hub restart keeps them held; relative to the hub's working directory, like
        its database.""",
    )

    @default("gpu_utilization_source")
    def _utilization_default(self) -> type[UtilizationSource]:
        # Simulated GPUs are as busy as their processes: reclaim and the fleet page see them.
        return SimulatedUtilization if self.simulated_gpus else NVMLUtilization

    @default("home_dir_template")
    def _home_dir_template_default(self) -> str:
        return os.path.join(os.getcwd(), "gpuhub-users", "{username}")

    _told_no_gpus = False

    # -- devices and policy ---------------------------------------------------------------
    @property
    def simulated_gpus(self) -> int:
        """N of ``gpu_devices = "simulated:N"``, else 0."""
        value = self.gpu_devices
        if isinstance(value, str) and value.startswith(SIMULATED_PREFIX):
            count = value.removeprefix(SIMULATED_PREFIX)
            if count.isdigit():
                return int(count)
        return 0

    def device_indices(self) -> list[int]:
        if isinstance(self.gpu_devices, list):
            return list(self.gpu_devices)
        if self.simulated_gpus:
            return list(range(self.simulated_gpus))
        if self.gpu_devices != "auto":
            raise ValueError(
                'gpu_devices must be "auto", "simulated:N" or a list of indices, '
                f"not {self.gpu_devices!r}"
            )
        found = gpu_devices_mod.discover()
        if found.reason and not LocalGPUSpawner._told_no_gpus:
            LocalGPUSpawner._told_no_gpus = True  # once per hub process, not per form view
            self.log.warning("LocalGPUSpawner: no GPUs to hand out: %s", found.reason)
        return [d.index for d in found.devices]

    def policy_config(self) -> dict[str, Any]:
        """With no ``gpu_types`` configured, offer the machine's GPUs as one type."""
        config = super().policy_config()
        indices = self.device_indices()
        if not config["gpu_types"] and indices:
            if self.simulated_gpus:
                names = {SIMULATED_NAME}
            else:
                names = {d.name for d in gpu_devices_mod.discover().devices if d.index in indices}
            config["gpu_types"] = {
                "gpu": {
                    "display_name": names.pop() if len(names) == 1 else "NVIDIA GPU",
                    "max_gpus": len(indices),
                    "devices": indices,
                }
            }
        return config

    def _devices_of(self, gpu_type_key: str) -> list[int]:
        gpu_type = self.gpu_policy.gpu_types[gpu_type_key]
        indices = self.device_indices()
        if gpu_type.devices is None:
            return indices
        return [d for d in gpu_type.devices if d in indices]

    @property
    def _book(self) -> GPUAllocator:
        """The hub's device book, with the job holds a previous hub process left (and those
        of live processes its file does not list: :mod:`gpuhub.hub.ledger.launches`)."""
        ALLOCATOR.open(self.ledger_file, self._launch_proof())
        return ALLOCATOR

    def _launch_key(self) -> bytes | None:
        """The key of the grants in servers' environments, from the hub's cookie secret."""
        secret = self.user.settings.get("cookie_secret") if self.user is not None else None
        return derive_launch_key(secret) if secret else None

    def _launch_proof(self) -> Proof | None:
        """What makes a process one of a launch's: its grant, and the OS account servers run
        as here (:class:`gpuhub.hub.ledger.launches.Proof`)."""
        key = self._launch_key()
        return Proof(key, shared_account=self.run_as_hub_user) if key is not None else None

    def gpu_utilization_settings(self) -> dict[str, Any]:
        # Whose processes use a shared GPU's memory: proven, never read from what they say.
        return {"proof": self._launch_proof()}

    @property
    def _holder_key(self) -> HolderKey:
        """This server, as the device book keys it."""
        return server_key(self.user.name, self.name)

    @property
    def allocated_gpus(self) -> list[int]:
        return self._book.held_by(self._holder_key)

    async def gpu_capacity(self) -> tuple[dict[str, GPUCapacity], str]:
        capacity = {}
        for key, gpu_type in self.gpu_policy.gpu_types.items():
            candidates = self._devices_of(key)
            sharing = gpu_type.sharing
            if sharing is not None and sharing.memory is not None:
                capacity[key] = self._shared_capacity(key, candidates, sharing.memory, sharing.min)
                continue
            free = len(self._book.free(candidates))
            capacity[key] = GPUCapacity(
                free=free,
                total=len(candidates),
                largest_free=None,
                waiting=LINE.waiting(key),
                likely_free=likely_free(gpu_type.display_name) if free == 0 else "",
            )
        return capacity, ""

    def _shared_capacity(
        self, key: str, candidates: list[int], device_memory: int, smallest: int
    ) -> GPUCapacity:
        """Memory left on each GPU of a type shared by memory: a device "is free" while the
        smallest share still fits on it."""
        room = self._book.room(candidates, device_memory)
        per_device = tuple((d, room[d], device_memory) for d in candidates)
        return GPUCapacity(
            free=sum(1 for d in candidates if room[d] >= smallest),
            total=len(candidates),
            waiting=LINE.waiting(key),
            devices=len(candidates),
            memory_free=sum(room.values()),
            memory_total=device_memory * len(candidates),
            largest_share=max(room.values(), default=0),
            per_device=per_device,
        )

    async def gpu_ledger(self, wait: float | None = None) -> Ledger:
        """The ledger of this workstation (the hub's grants endpoint asks for it)."""
        self._book  # noqa: B018 - opens the book's file of job holds
        return LEDGER

    # -- options --------------------------------------------------------------------------
    async def reserve_launch(self, options: LaunchOptions) -> None:
        """Take the GPUs from the device book now, or a place in its type's line; refuse what
        could never run here, would go over the quota, or finds too few free with no line.

        No await from here on: quota check and allocation are one step on the event loop, so
        concurrent spawns of one user (named servers) cannot both squeeze under the quota."""
        self.limits_place()  # enforce_limits = True where no cgroup can be made: refused
        key = self._holder_key
        self._book.release(key)
        if options.gpu_type is None:
            return
        gpu_type = options.gpu_type
        candidates = self._devices_of(gpu_type.key)
        if options.gpus > len(candidates):
            raise refusal(
                f"This machine has {words.gpus(len(candidates), gpu_type.display_name)}, so a "
                f"server with {options.gpus} could never start; ask for fewer."
            )
        try:
            LEDGER.check(
                self.user.name,
                self.gpu_quota_limit(),
                options.gpu_amount,
                replacing=("server", self.name),
            )
        except QuotaExceeded as exc:
            raise refusal(exc.message, status=exc.status) from None
        sharing = gpu_type.sharing
        holder = Holder(
            self.user.name,
            "server",
            self.name,
            gpu_type.display_name,
            launch=self._server_id,
            gpu_memory=options.gpu_memory or 0,
            device_memory=sharing.memory if sharing is not None and sharing.memory else 0,
        )
        # The admin's order, and where a fair line reads usage (the monitor's usage file).
        LINE.configure(self.gpu_line_order(), line_usage(self.gpu_line_order()))
        groups = frozenset(self.user_groups())  # a booking for one of them lets it pass
        attach_bookings(self)
        # The line comes before the book: served at once only if nobody of this type waits.
        if LINE.take_now(key, options.gpus, gpu_type.key, candidates, holder, groups) is not None:
            return
        if self.gpu_queue_timeout <= 0:
            waiting = LINE.waiting(gpu_type.key)
            ahead = (
                f" and {words.plural(waiting, 'person', 'people')} waiting for them"
                if waiting
                else ""
            )
            if holder.shared:
                room = self._book.room(candidates, holder.device_memory)
                raise refusal(
                    f"Not enough free GPU memory: you asked for "
                    f"{human_memory(holder.gpu_memory)} of one {gpu_type.display_name}, but "
                    f"the most free on one GPU is {human_memory(max(room.values(), default=0))}"
                    f" now{ahead}; ask for less or try again when someone stops a server.",
                    status=409,
                )
            free = len(self._book.free(candidates))
            raise refusal(
                f"Not enough free GPUs: you asked for "
                f"{words.gpus(options.gpus, gpu_type.display_name)} but {free} of "
                f"{len(candidates)} are free now{ahead}; ask for fewer or try again when "
                "someone stops a server.",
                status=409,
            )
        # Accepted: start() waits in line, and JupyterHub waits for start() that long too.
        self._gpuhub_ticket = Ticket(
            key,
            holder,
            gpu_type.key,
            gpu_type.display_name,
            options.gpus,
            candidates,
            groups=groups,
        )
        LINE.join(self._gpuhub_ticket)
        # Where it joined: the spawn page's progress moves from there to the head.
        self._gpuhub_joined_at = LINE.position(self._gpuhub_ticket)
        self.extend_start_timeout()

    def apply_launch_options(self, options: LaunchOptions) -> None:
        # The server's cgroup holds it to these where it can (start()); Jupyter reads them
        # too (CPU_LIMIT, MEM_LIMIT), and jupyter-resource-usage shows them.
        self.cpu_limit = self.cpu_guarantee = options.cpu
        self.mem_limit = self.mem_guarantee = options.memory

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        gpus = self.allocated_gpus
        options = self.launch_options
        gpu_type = options.gpu_type if options and gpus else None
        holder = self._book.holder(self._holder_key)
        share, memory = None, None
        if holder is not None and holder.shared and gpus:
            share, memory = Fraction(holder.gpu_memory, holder.device_memory), holder.gpu_memory
        # Which GPUs, by index (a CPU-only server gets none and sees none), their type, and a
        # share's part of one GPU with the MPS daemon's limit: as a pod is told (gpuhub.k8s.pods).
        env.update(
            holder_env(
                len(gpus),
                gpu_type.key if gpu_type else "",
                gpu_type.display_name if gpu_type else "",
                devices=gpus,
                share=share,
                gpu_memory=memory,
            )
        )
        # Marks every process this server starts (kernels, jobs, terminals), so the hub can
        # tell which of them outlive it on its GPUs.
        env[SERVER_ID_ENV] = self._server_id
        key = self._launch_key()
        if gpus and key is not None:
            # What the hub gave this launch, signed: the book is rebuilt from it if its file
            # is ever lost (gpuhub.hub.ledger.launches).
            grant = Launch(
                self.user.name,
                self.name,
                self._server_id,
                tuple(gpus),
                gpu_type.display_name if gpu_type else "",
                holder.gpu_memory if holder is not None and holder.shared else 0,
                holder.device_memory if holder is not None and holder.shared else 0,
            )
            env[LAUNCH_ENV] = sign_launch(key, grant)
        if self.simulated_gpus:
            # The lab reads these indices through gpuhub_lab.metrics.simulated, not NVML.
            env[SIMULATED_GPUS_ENV] = str(self.simulated_gpus)
            # The server itself does no GPU work: its kernels and jobs are the GPUs' users.
            env[MACHINERY_ENV] = "1"
        return env

    # -- lifecycle ------------------------------------------------------------------------
    _gpuhub_ticket: Ticket | None = None

    async def start(self) -> Any:
        await self.ensure_launch_options()
        try:
            await self._wait_in_line()
            self._gpuhub_cgroup = self._make_cgroup()
            started = await super().start()
        except BaseException:
            self._book.release(self._holder_key)
            self._remove_cgroup()
            raise
        if self._gpuhub_cgroup is not None and not self._gpuhub_cgroup.holds(self.pid):
            self.log.warning(
                "%s runs without its CPU and memory limits: it could not join %s",
                log_name(self),
                self._gpuhub_cgroup.dirs[0],
            )
        holdings_changed()  # the fleet page shows the new holder now, not a tick later
        return started

    # -- CPU and memory (gpuhub.hub.cgroups) ------------------------------------------------
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
        if not LocalGPUSpawner._told_limits:
            LocalGPUSpawner._told_limits = True  # once per hub process
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

    async def _wait_in_line(self) -> None:
        """Wait for GPUs if the spawn was accepted while too few were free."""
        ticket = self._gpuhub_ticket
        if ticket is None:
            return
        ticket.awaited = True
        try:
            await asyncio.wait_for(asyncio.shield(ticket.granted), self.gpu_queue_timeout)
        except TimeoutError:
            waited = words.duration(self.gpu_queue_timeout)
            message = (
                f"Waited {waited} in line for {words.gpus(ticket.gpus, ticket.type_name)} and "
                "none came free; try again later or ask for fewer GPUs."
            )
            self.log.warning("Spawn of %s: %s", log_name(self), message)
            raise refusal(message, 503) from None
        finally:
            LINE.leave(ticket)  # out of the line, whatever happened (served, stopped, timed out)
            self._gpuhub_ticket = None
            self.restore_start_timeout()

    _gpuhub_joined_at = 1

    async def progress(self) -> Any:
        """Where a waiting spawn stands, in words, then which GPUs it got.

        While in line, the bar moves with the place (from where the spawn joined to the head
        of the line: 10 % to 40 %), and the message says how long gpuhub waits; the event's
        ``gpuhub_line`` (place, deadline) is for the spawn page's "Leave the line" button
        (``templates/hub/spawn_pending.html``)."""
        last = ""
        while (ticket := self._gpuhub_ticket) is not None and not ticket.granted.done():
            message = self._line_message(ticket)
            if message != last:
                last = message
                yield {
                    "progress": self._line_progress(ticket),
                    "message": message,
                    # For the spawn page's "Leave the line" and its clock (spawn_pending.html).
                    "gpuhub_line": {
                        "place": LINE.position(ticket),
                        "deadline": round(self._line_deadline(ticket)),
                    },
                }
            await asyncio.sleep(0.5)
        yield {"progress": 50, "message": self.starting_message()}

    def _line_progress(self, ticket: Ticket) -> int:
        """10 % on joining at the back, 40 % at the head of the line (50 %: GPUs given). In a
        fair line people who came later may pass: the bar then starts again from the farthest
        place back, never below 10 %."""
        place = LINE.position(ticket) or 1
        self._gpuhub_joined_at = joined = max(self._gpuhub_joined_at, place, 1)
        return round(10 + 30 * (joined - place + 1) / joined)

    def _line_deadline(self, ticket: Ticket) -> float:
        return ticket.since + self.gpu_queue_timeout

    def _line_message(self, ticket: Ticket) -> str:
        if ticket.holder.shared:
            return self._share_line_message(ticket)
        position = LINE.position(ticket)
        held = [h for h in LINE.book.holdings() if set(h.devices) & set(ticket.candidates)]
        busy = len({d for h in held for d in h.devices if d in ticket.candidates})
        users = len({h.user for h in held})
        free = len(ticket.candidates) - busy
        # Enough may be free for this one while an earlier, bigger request waits: say why.
        first = self._line_rule(ticket) if position > 1 and free >= ticket.gpus else ""
        deadline = words.moment_utc(self._line_deadline(ticket))
        return (
            f"Waiting for {words.gpus(ticket.gpus, ticket.type_name)}: you are "
            f"{words.ordinal(position)} in line; {busy} of {len(ticket.candidates)} are held "
            f"(servers and jobs of {users} user{'s' if users != 1 else ''}){first}"
            f"{LINE.booked_words(ticket)}. "
            f"{self._line_passed(ticket)}{self._line_estimate(ticket)}"
            f"gpuhub waits until {deadline}, "
            f"{words.duration(self.gpu_queue_timeout)} after you joined."
        )

    @staticmethod
    def _line_rule(ticket: Ticket) -> str:
        """Why those ahead go first although enough is free for this one: the line's rule."""
        if LINE.order.fair:
            return "; the line favours who used least"
        return "; the line is first come, first served"

    def _line_passed(self, ticket: Ticket) -> str:
        """ "The line favours who used least: ... goes first. ", or "" when nobody who came
        later goes first; names and figures of others only for an admin."""
        said = LINE.why_passed(ticket, names=bool(getattr(self.user, "admin", False)))
        return f"{said} " if said else ""

    @staticmethod
    def _line_estimate(ticket: Ticket) -> str:
        """ "Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC. ": the monitor's
        estimate of this wait (gpuhub.hub.monitor.eta), "" before its first."""
        monitor = current()
        if monitor is None:
            return ""
        said = monitor.eta.sentence((ticket.holder.user, "server", ticket.holder.name))
        return f"{said} " if said else ""

    def _share_line_message(self, ticket: Ticket) -> str:
        """Waiting for a share: the memory left on each GPU of the type, as the form says it."""
        position = LINE.position(ticket)
        holder = ticket.holder
        room = LINE.book.room(ticket.candidates, holder.device_memory)
        most = max(room.values(), default=0)
        first = self._line_rule(ticket) if position > 1 and most >= holder.gpu_memory else ""
        deadline = words.moment_utc(self._line_deadline(ticket))
        return (
            f"Waiting for {human_memory(holder.gpu_memory)} of one {ticket.type_name}: you are "
            f"{words.ordinal(position)} in line; the most free on one GPU is "
            f"{human_memory(most)} of {human_memory(holder.device_memory)}{first}. "
            f"{self._line_passed(ticket)}{self._line_estimate(ticket)}"
            f"gpuhub waits until {deadline}, "
            f"{words.duration(self.gpu_queue_timeout)} after you joined."
        )

    async def poll(self) -> int | None:
        """A spawn waiting in line is alive (None), so the hub's shutdown stops it: JupyterHub
        calls ``stop()`` only for what ``poll()`` says runs."""
        if self._gpuhub_ticket is not None:
            return None
        status: int | None = await super().poll()
        return status

    def _tell_the_line_ended(self, ticket: Ticket) -> None:
        """Leave the user a notice when the hub itself ends a wait in line.

        JupyterHub cancels a spawn it interrupts for a user or an admin before it calls
        ``stop()``, and that cancellation already took the ticket back (``_wait_in_line``). A
        ticket still here that ``start()`` waits for means the hub stops a waiting spawn of
        its own accord: its shutdown (``cleanup_servers``). One that ``start()`` never
        reached is a spawn that failed before it (a ``pre_spawn_hook``, say): JupyterHub
        shows that failure itself, and the ticket just leaves the line. The line lives in
        this process and cannot outlive it, so the spawn ends, and the user's next visit to
        the hub says so (``hub_api.notice_text``).
        With ``cleanup_servers = False`` the hub cancels the wait without stopping it, and
        the spawn ends without a notice.
        """
        from gpuhub.hub.monitor.usage import Notice

        monitor = current()
        if monitor is None:
            return
        reason = (
            f"{words.ordinal(LINE.position(ticket) or 1)} in line for "
            f"{words.gpus(ticket.gpus, ticket.type_name)}"
        )
        notice = Notice(
            self.name, time.time(), reason, ticket.gpus, ticket.type_name, by=HUB_SHUTDOWN
        )
        monitor.store.notify(self.user.name, notice)

    _gpuhub_stopping = False
    _gpuhub_server_id = ""  # this launch's id; "" until the first use after a launch ends
    _gpuhub_pending: list[int] | None = None  # the devices a gone server left to settle
    # Where a gone server's work may still run, for the look for survivors: its sessions
    # (the server's own, its kernels'), and its cgroup.
    _gpuhub_sessions: frozenset[int] = frozenset()
    _gpuhub_left_cgroup: cgroups.ServerCgroup | None = None

    @property
    def _server_id(self) -> str:
        """A random id per server launch (kept in the hub's state across restarts)."""
        if not self._gpuhub_server_id:
            self._gpuhub_server_id = secrets.token_hex(12)
        return self._gpuhub_server_id

    async def stop(self, now: bool = False) -> None:
        if (ticket := self._gpuhub_ticket) is not None:  # stopped while waiting in line
            if ticket.awaited:
                self._tell_the_line_ended(ticket)
            LINE.leave(ticket)
            self._gpuhub_ticket = None
        descendants: list[Process] = []
        if self.pid and self.allocated_gpus:
            descendants = await asyncio.to_thread(_server_processes, self.pid)
            # While they run: a kernel leads a session of its own, which outlives it.
            sessions = await asyncio.to_thread(_sessions_of, descendants)
            self._gpuhub_sessions = self._gpuhub_sessions | sessions
        self._gpuhub_stopping = True
        try:
            await super().stop(now=now)
        finally:
            self._gpuhub_stopping = False
            if await self.poll() is not None:
                await self._settle_gpus(descendants)
                self._remove_cgroup()
                holdings_changed()

    def _server_gone(self) -> None:
        """The server process has ended: its GPUs wait, held, for the look for survivors."""
        held = self._book.hand_to_jobs(self._holder_key)
        if held:
            self._gpuhub_pending = held
            if not self._gpuhub_stopping:  # died by itself: stop() will not settle it
                try:
                    asyncio.get_running_loop()
                except RuntimeError:  # no event loop (a script using the spawner): settle now
                    asyncio.run(self._settle_gpus([]))
                else:
                    self._gpuhub_settling = asyncio.ensure_future(self._settle_gpus([]))

    async def _settle_gpus(self, descendants: list[Process]) -> None:
        """Give the server's GPUs back, except those its surviving processes still use."""
        held, self._gpuhub_pending = self._gpuhub_pending, None
        sessions, self._gpuhub_sessions = self._gpuhub_sessions, frozenset()
        cgroup, self._gpuhub_left_cgroup = self._gpuhub_left_cgroup, None
        if not held:
            return
        survivors = await asyncio.to_thread(
            _survivors,
            descendants,
            self._launch_proof(),
            self._server_id,
            held,
            sessions | _sessions_of(descendants),
            cgroup,
        )
        self._gpuhub_server_id = ""  # the next launch gets a new one
        kept = self._book.settle(jobs_key(self.user.name, self.name), held, survivors)
        if kept:
            self.log.info(
                "GPUs %s of %s stay held: processes %s outlived the server",
                kept,
                log_name(self),
                [process.pid for process, _ in survivors],
            )

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.pid and self._gpuhub_cgroup is not None:
            state["cgroup"] = [str(d) for d in self._gpuhub_cgroup.dirs]
        if self.pid and self.allocated_gpus:
            state["gpus"] = self.allocated_gpus
            state["server_id"] = self._server_id
            options = self.launch_options
            if options is not None and options.gpu_type is not None:
                state["gpu_type"] = options.gpu_type.display_name
            holder = self._book.holder(self._holder_key)
            if holder is not None and holder.shared:
                state["gpu_memory"] = holder.gpu_memory
                state["device_memory"] = holder.device_memory
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        if state.get("server_id"):
            self._gpuhub_server_id = str(state["server_id"])
        if state.get("pid") and isinstance(state.get("cgroup"), list):
            self._gpuhub_cgroup = cgroups.ServerCgroup(tuple(Path(d) for d in state["cgroup"]))
        if state.get("pid") and state.get("gpus"):
            holder = Holder(
                self.user.name,
                "server",
                self.name,
                state.get("gpu_type", ""),
                launch=str(state.get("server_id") or ""),
                gpu_memory=int(state.get("gpu_memory") or 0),
                device_memory=int(state.get("device_memory") or 0),
            )
            self._book.claim(self._holder_key, state["gpus"], holder)

    def clear_state(self) -> None:
        if self.pid:  # the server's session (JupyterHub starts it in one of its own)
            self._gpuhub_sessions = self._gpuhub_sessions | {self.pid}
        if self._gpuhub_cgroup is not None:
            self._gpuhub_left_cgroup = self._gpuhub_cgroup
        super().clear_state()
        # Called once the server process is gone (poll, stop): its own hold ends, and what
        # its surviving processes may still use is held for them; its cgroup goes with it.
        self._server_gone()
        self._remove_cgroup()

    # -- running as the hub's own user (demo, tests) ----------------------------------------
    @property
    def home_dir(self) -> str:
        return self.home_dir_template.format(username=self.user.name)

    def make_preexec_fn(self, name: str) -> Any:
        """Join the server's cgroup (before anything drops privileges: the user's account
        may not write cgroups), then become the user or go home as LocalProcessSpawner's or
        :meth:`_shared_account_preexec` says."""
        then = self._shared_account_preexec(name)
        cgroup, strict = self._gpuhub_cgroup, self.enforce_limits is True
        if cgroup is None:
            return then

        def preexec() -> None:
            try:
                cgroup.join(os.getpid())
            except OSError:
                if strict:
                    raise
            if then is not None:
                then()

        return preexec

    def _shared_account_preexec(self, name: str) -> Any:
        if not self.run_as_hub_user:
            return super().make_preexec_fn(name)
        self.check_shared_account_exposure()  # in the hub, before anything is started
        home = self.home_dir

        def preexec() -> None:
            # 0700: other OS accounts on the machine stay out (the hub's users share one).
            os.makedirs(home, 0o700, exist_ok=True)
            os.chmod(home, 0o700)
            os.chdir(home)

        return preexec

    def check_shared_account_exposure(self) -> None:
        """Refuse to start a shared-account server on a hub reachable beyond loopback, unless
        the admin has acknowledged what that means (``SHARED_ACCOUNT_WARNING``)."""
        if self.run_as_hub_user_acknowledge_shared_account:
            return
        host = public_host(self.config)
        if is_loopback(host):
            return
        where = host or "every address"
        self.log.error(
            "Refusing to start %s: run_as_hub_user on a hub listening on %s. %s",
            log_name(self),
            where,
            SHARED_ACCOUNT_WARNING,
        )
        raise refusal(
            f"This hub runs every server as one shared OS account and listens on {where}, so "
            "it will not start servers until the admin sets "
            "LocalGPUSpawner.run_as_hub_user_acknowledge_shared_account = True or binds "
            "JupyterHub.ip to 127.0.0.1.",
            403,
        )

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        if not self.run_as_hub_user:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        env["SHELL"] = "/bin/bash"
        return env

    def get_args(self) -> list[str]:
        args = super().get_args()
        if self.run_as_hub_user and os.geteuid() == 0:
            # A hub run as root (containers, CI) runs servers as root too in this mode;
            # jupyter_server refuses that unless told it is deliberate.
            args.append("--ServerApp.allow_root=True")
        return args

    async def move_certs(self, paths: dict[str, str]) -> dict[str, str]:
        if self.run_as_hub_user:
            return paths
        return await super().move_certs(paths)


def _server_processes(pid: int) -> list[Process]:
    """The server's descendants (kernels, jobs, terminals' children), taken before it stops:
    the processes that may outlive it on its GPUs."""
    import psutil

    try:
        return [(p.pid, p.create_time()) for p in psutil.Process(pid).children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _survivors(
    descendants: list[Process],
    proof: Proof | None,
    server_id: str,
    devices: Sequence[int] = (),
    sessions: Iterable[int] = (),
    cgroup: cgroups.ServerCgroup | None = None,
) -> list[tuple[HeldProcess, frozenset[int] | None]]:
    """Processes of a just-stopped server that still run, with the GPUs each keeps held.

    Found by the hub itself, so that no work escapes charging by leaving the server's process
    tree: the server's descendants taken before the stop; every process still in the
    server's ``cgroup`` (a double fork or a new session stays in it); every process in one of
    the server's ``sessions`` or process groups (its own and its kernels': where there is no
    cgroup, a double fork stays in its session, and Linux gives no new process a pid still in
    use as a session's or a group's id); and processes that prove this launch's grant
    (``proof``: the grant signed for this ``GPUHUB_SERVER_ID``, and the server's OS account),
    such as a job that detached from its parent. What a process merely says
    (``GPUHUB_SERVER_ID`` alone) never makes it the server's: another user's process could
    say it and have this user's GPUs kept for it.

    The GPUs a survivor keeps: those of ``devices`` its ``CUDA_VISIBLE_DEVICES`` lists where
    it names some of them and nothing else (a local job given part of the server's GPUs);
    ``None``, all of them, where it names none of them, others, or cannot be read: a process
    can set it to "" or another GPU and use any it can open, so what it says can narrow its
    charge but never drop it.
    """
    import psutil

    from gpuhub.hub.ledger.device_book import alive

    found: dict[int, Process] = {p[0]: p for p in descendants if alive(p)}
    members = cgroup.members() if cgroup is not None else set()
    sessions = frozenset(sessions) - {os.getsid(0)}  # never the hub's own session
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "create_time", "uids", "environ"]):
        info = proc.info
        pid = info["pid"]
        if pid == me or pid in found:
            continue
        if pid in members or (sessions and _in_sessions(pid, sessions)):
            found[pid] = (pid, info["create_time"])
            continue
        env = info.get("environ") or {}
        if proof is None or env.get(SERVER_ID_ENV) != server_id:
            continue  # cheap first: most processes are no server's
        uids = info.get("uids")
        launch = proof.launch(env.get(LAUNCH_ENV), uids.real if uids is not None else None)
        if launch is not None and launch.launch == server_id:
            found[pid] = (pid, info["create_time"])
    survivors = []
    own = frozenset(devices)
    for pid, started in found.values():
        command, job = "", ""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            environ = proc.environ()
            visible = device_set(environ.get("CUDA_VISIBLE_DEVICES"))
            job = environ.get(JOB_ID_ENV, "")  # a local job's runner and kernel: its id
            command = command_line(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            visible = None
        if visible is not None and (not visible or not visible <= own):
            visible = None  # says none of the server's GPUs, or others: keeps them all
        held = HeldProcess(pid, started, command, server_id, job)
        survivors.append((held, visible))
    return survivors


def _in_sessions(pid: int, sessions: frozenset[int]) -> bool:
    """Whether process ``pid`` is in one of ``sessions`` (as a session or process group)."""
    try:
        return os.getsid(pid) in sessions or os.getpgid(pid) in sessions
    except OSError:
        return False


def _sessions_of(processes: Iterable[Process]) -> frozenset[int]:
    """The sessions ``processes`` (the server's descendants) run in: a kernel has its own."""
    found = set()
    for pid, _ in processes:
        try:
            found.add(os.getsid(pid))
        except OSError:
            continue
    return frozenset(found)


def public_host(config: Any) -> str:
    """The host JupyterHub's public proxy binds (``JupyterHub.bind_url``, else ``.ip``;
    JupyterHub's default, "", is every address)."""
    hub = config.get("JupyterHub", {}) if config is not None else {}
    if "bind_url" in hub:
        return urlparse(str(hub["bind_url"])).hostname or ""
    return str(hub.get("ip", "") or "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
