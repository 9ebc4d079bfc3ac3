"""GPUSpawner: KubeSpawner with gpuhub's form, policy and GPU-aware pod manifest."""

from __future__ import annotations

import copy
import inspect
from typing import Any

from kubespawner import KubeSpawner

from .form import Preset
from .gpu_pod import SHM_VOLUME, gpu_env, gpu_resources, is_gpu_resource, placement, shm_volume
from .options import FIELDS, LaunchOptions
from .spawner_base import GPUSpawnerMixin

__all__ = ["SHM_VOLUME", "GPUSpawner"]


class GPUSpawner(GPUSpawnerMixin, KubeSpawner):
    """Spawns single-user pods with the GPUs, node selector and tolerations of a GPU type."""

    # -- presets from profile_list --------------------------------------------------------
    async def _profile_list(self) -> list[dict[str, Any]]:
        profiles = self.profile_list
        if callable(profiles):
            profiles = profiles(self)
            if inspect.isawaitable(profiles):
                profiles = await profiles
        return self._get_initialized_profile_list(profiles or [])

    async def profile_presets(self) -> list[Preset]:
        """Each profile is a preset; its ``gpuhub`` dict holds form values, e.g. ``{"gpus": 1}``."""
        return [
            Preset(
                slug=p["slug"],
                display_name=p.get("display_name", p["slug"]),
                values={k: v for k, v in (p.get("gpuhub") or {}).items() if k in FIELDS},
            )
            for p in await self._profile_list()
        ]

    def extra_option_keys(self) -> set[str]:
        """KubeSpawner's own profile options travel in user_options; it validates them."""
        profiles = self.profile_list if isinstance(self.profile_list, list) else []
        keys = set()
        for profile in profiles:
            for name in profile.get("profile_options", {}):
                keys.update({name, f"{name}--unlisted-choice"})
        return keys - set(FIELDS)

    # -- options to pod -------------------------------------------------------------------
    _BASE_ATTRS = (
        "image",
        "node_selector",
        "tolerations",
        "volumes",
        "volume_mounts",
        "extra_resource_limits",
        "extra_resource_guarantees",
    )

    def _configured(self, attr: str) -> Any:
        """The admin's value of ``attr``, before any spawn of this spawner object changed it."""
        base = self.__dict__.setdefault("_gpuhub_configured", {})
        if attr not in base:
            base[attr] = copy.deepcopy(getattr(self, attr))
        return copy.deepcopy(base[attr])

    def apply_launch_options(self, options: LaunchOptions) -> None:
        # A spawner object is reused across stop/start: always start from the admin's values.
        for attr in self._BASE_ATTRS:
            setattr(self, attr, self._configured(attr))
        if options.image is not None:
            self.image = options.image
        # Guarantee == limit: GPU servers get the Guaranteed QoS class and are not evicted
        # first under node pressure, and memory use is predictable.
        self.cpu_guarantee = self.cpu_limit = options.cpu
        self.mem_guarantee = self.mem_limit = options.memory
        # The GPU rules shared with job pods (gpuhub.gpu_pod): limit == request, the type's
        # node selector and tolerations, a memory-backed /dev/shm.
        limits = {k: v for k, v in self.extra_resource_limits.items() if not is_gpu_resource(k)}
        guarantees = {
            k: v for k, v in self.extra_resource_guarantees.items() if not is_gpu_resource(k)
        }
        limits.update(gpu_resources(options))
        guarantees.update(gpu_resources(options))
        selector, tolerations = placement(options)
        shm = shm_volume(options)
        if shm is not None:
            self.node_selector = {**self.node_selector, **selector}
            self.tolerations = [*self._sorted_dict_values(self.tolerations), *tolerations]
            self.volumes = [*self._sorted_dict_values(self.volumes), shm[0]]
            self.volume_mounts = [*self._sorted_dict_values(self.volume_mounts), shm[1]]
        self.extra_resource_limits = limits
        self.extra_resource_guarantees = guarantees

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update(gpu_env(self.launch_options))
        return env

    async def load_user_options(self) -> None:
        # KubeSpawner calls this at the top of start(): make sure gpuhub validated first.
        await self.ensure_launch_options()
        await super().load_user_options()

