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

import os
from fractions import Fraction
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Bool, Enum, Int, List, Unicode, Union, default

from gpuhub.core import devices as gpu_devices_mod
from gpuhub.core import words
from gpuhub.core.env import (
    LAUNCH_ENV,
    MACHINERY_ENV,
    SERVER_ID_ENV,
    SIMULATED_GPUS_ENV,
)
from gpuhub.core.holder_env import holder_env
from gpuhub.core.holdings import QuotaExceeded
from gpuhub.core.options import LaunchOptions
from gpuhub.core.quantity import human_memory
from gpuhub.hub.ledger.booking_book import attach as attach_bookings
from gpuhub.hub.ledger.device_book import (
    ALLOCATOR,
    GPUAllocator,
    Holder,
    HolderKey,
    server_key,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.launches import Launch, Proof
from gpuhub.hub.ledger.launches import launch_key as derive_launch_key
from gpuhub.hub.ledger.launches import sign as sign_launch
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.hub.ledger.line import Ticket
from gpuhub.hub.local_account import SHARED_ACCOUNT_WARNING, SharedAccount
from gpuhub.hub.local_limits import WorkstationLimits
from gpuhub.hub.local_line import LEDGER, LINE, WorkstationLine, likely_free, line_usage
from gpuhub.hub.local_processes import ServerProcesses
from gpuhub.hub.monitor.gpu_monitor import holdings_changed
from gpuhub.hub.monitor.utilization import NVMLUtilization, SimulatedUtilization, UtilizationSource
from gpuhub.hub.refusals import log_name, refusal
from gpuhub.hub.spawner_mixin import GPUSpawnerMixin

SIMULATED_PREFIX = "simulated:"
SIMULATED_NAME = "Simulated GPU"


class LocalGPUSpawner(
    WorkstationLine,
    ServerProcesses,
    WorkstationLimits,
    SharedAccount,
    GPUSpawnerMixin,
    LocalProcessSpawner,
):
    """Local processes with GPUs handed out by index (see docs/architecture.md for the traits).

    Its parts, mixed in before GPUSpawnerMixin so every override and ``super()`` resolves as
    one class: the wait in line (:mod:`gpuhub.hub.local_line`), the server's processes and
    state (:mod:`gpuhub.hub.local_processes`), its cgroup (:mod:`gpuhub.hub.local_limits`) and
    servers run as the hub's own account (:mod:`gpuhub.hub.local_account`)."""

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
        until = self._gone_by()  # free booked GPUs are lent only to work gone in time
        # The line comes before the book: served at once only if nobody of this type waits.
        got = LINE.take_now(key, options.gpus, gpu_type.key, candidates, holder, groups, until)
        if got is not None:
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
            until=until,
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
