"""LocalGPUSpawner: JupyterHub servers as local processes on one shared multi-GPU workstation.

Each server gets whole GPUs through ``CUDA_VISIBLE_DEVICES`` from the process-wide
:data:`gpuhub.allocator.ALLOCATOR`; a CPU-only server gets ``CUDA_VISIBLE_DEVICES=""`` and
so sees no GPU at all.
"""

from __future__ import annotations

import os
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Bool, Int, List, Unicode, Union, default

from . import devices as gpu_devices_mod
from . import words
from .allocator import ALLOCATOR, NotEnoughGPUs
from .form import GPUCapacity
from .options import LaunchOptions
from .spawner_base import GPUSpawnerMixin, refusal

SIMULATED_PREFIX = "simulated:"
SIMULATED_NAME = "Simulated GPU"


class LocalGPUSpawner(GPUSpawnerMixin, LocalProcessSpawner):
    """Local processes with GPUs handed out by index (see DESIGN.md for the traits)."""

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
        the hub user, as LocalProcessSpawner does.""",
    )
    home_dir_template = Unicode(
        config=True,
        help="""Home directory of a user's server when ``run_as_hub_user``; ``{username}`` is expanded.""",
    )

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
    def _owner(self) -> str:
        return f"{self.user.name}/{self.name}"

    @property
    def allocated_gpus(self) -> list[int]:
        return ALLOCATOR.held_by(self._owner)

    async def gpu_capacity(self) -> tuple[dict[str, GPUCapacity], str]:
        capacity = {}
        for key in self.gpu_policy.gpu_types:
            candidates = self._devices_of(key)
            free = len(ALLOCATOR.free(candidates))
            capacity[key] = GPUCapacity(free=free, total=len(candidates), largest_free=None)
        return capacity, ""

    # -- options --------------------------------------------------------------------------
    async def check_launch_options(self, options: LaunchOptions) -> None:
        ALLOCATOR.release(self._owner)
        if options.gpu_type is None:
            return
        candidates = self._devices_of(options.gpu_type.key)
        try:
            ALLOCATOR.allocate(self._owner, options.gpus, candidates)
        except NotEnoughGPUs as exc:
            raise refusal(
                f"Not enough free GPUs: you asked for "
                f"{words.gpus(exc.wanted, options.gpu_type.display_name)} but {exc.free} of {exc.total} "
                "are free now; ask for fewer or try again when someone stops a server.",
                status=409,
            ) from None

    def apply_launch_options(self, options: LaunchOptions) -> None:
        # The server itself enforces nothing locally, but Jupyter reads these (CPU_LIMIT,
        # MEM_LIMIT) and jupyter-resource-usage shows them against what the kernel uses.
        self.cpu_limit = self.cpu_guarantee = options.cpu
        self.mem_limit = self.mem_guarantee = options.memory

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        gpus = self.allocated_gpus
        # An empty value hides every GPU from CUDA; a CPU-only server must not see one.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in gpus)
        env["GPUHUB_GPUS"] = str(len(gpus))
        options = self.launch_options
        gpu_type = options.gpu_type if options and gpus else None
        env["GPUHUB_GPU_TYPE"] = gpu_type.key if gpu_type else ""
        # The lab shows the assignment by name, driver or not (gpuhub_lab.metrics.assigned).
        env["GPUHUB_GPU_TYPE_NAME"] = gpu_type.display_name if gpu_type else ""
        if self.simulated_gpus:
            # The lab reads these indices through gpuhub_lab.metrics.simulated, not NVML.
            env["GPUHUB_SIMULATED_GPUS"] = str(self.simulated_gpus)
        return env

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> Any:
        await self.ensure_launch_options()
        try:
            return await super().start()
        except BaseException:
            ALLOCATOR.release(self._owner)
            raise

    async def stop(self, now: bool = False) -> None:
        try:
            await super().stop(now=now)
        finally:
            if await self.poll() is not None:
                ALLOCATOR.release(self._owner)

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.pid and self.allocated_gpus:
            state["gpus"] = self.allocated_gpus
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        if state.get("pid") and state.get("gpus"):
            ALLOCATOR.claim(self._owner, state["gpus"])

    def clear_state(self) -> None:
        super().clear_state()
        ALLOCATOR.release(self._owner)

    # -- running as the hub's own user (demo, tests) ----------------------------------------
    @property
    def home_dir(self) -> str:
        return self.home_dir_template.format(username=self.user.name)

    def make_preexec_fn(self, name: str) -> Any:
        if not self.run_as_hub_user:
            return super().make_preexec_fn(name)
        home = self.home_dir

        def preexec() -> None:
            os.makedirs(home, 0o755, exist_ok=True)
            os.chdir(home)

        return preexec

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
