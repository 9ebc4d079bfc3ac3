"""What GPUSpawner and LocalGPUSpawner share: the admin traits, the form, one validation path.

JupyterHub calls, in order: ``options_form`` (render), ``options_from_form`` (reshape the
posted fields), then ``apply_user_options`` (validate and apply, JupyterHub >= 5.3). The REST
API skips the first two and lands in the same ``apply_user_options``, so the form and the API
cannot disagree. Refusals are ``HTTPError(400)`` carrying one sentence for the user.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tornado import web
from traitlets import Dict, Float, Type, Unicode, default
from traitlets.config import Configurable

from .form import GPUCapacity, Preset, options_from_formdata, render_form
from .jobs.policy_env import policy_env
from .ledger import GPUQuota
from .monitor import ensure_started
from .options import LaunchOptions, OptionsError, parse_launch_options
from .policy import Policy
from .reclaim import ReclaimRule
from .utilization import NVMLUtilization, UtilizationSource

_POLICY_CACHE: dict[str, Policy] = {}
_QUOTA_CACHE: dict[str, GPUQuota] = {}
_RECLAIM_CACHE: dict[str, ReclaimRule | None] = {}


def refusal(message: str, status: int = 400) -> web.HTTPError:
    """An HTTPError whose one sentence reaches the user in the form and the REST API alike."""
    error = web.HTTPError(status, "%s", message)
    error.jupyterhub_message = message  # type: ignore[attr-defined]  # read by JupyterHub's pages
    return error


async def apply_gpuhub_options(spawner: GPUSpawnerMixin, user_options: Mapping[str, Any]) -> None:
    """Default ``Spawner.apply_user_options``: validate against the policy, then apply."""
    try:
        options = parse_launch_options(
            user_options,
            spawner.gpu_policy,
            spawner.user_groups(),
            presets={p.slug: p.values for p in await spawner.profile_presets()},
            ignore=spawner.extra_option_keys(),
        )
    except OptionsError as exc:
        spawner.log.info("Refused options for %s: %s", spawner._log_name, exc.message)
        raise refusal(exc.message) from None
    await spawner.check_launch_options(options)
    spawner.launch_options = options
    spawner.apply_launch_options(options)


class GPUSpawnerMixin(Configurable):
    """Traits and behaviour common to both gpuhub spawners (mixed in before the Spawner)."""

    images = Dict(
        config=True,
        help="""Images a user may pick: ``{key: {"display_name", "image", "description",
        "default"}}``. The one with ``"default": True``, else the first, is the default. Empty:
        the spawner's own ``image`` is used.""",
    )
    custom_image_pattern = Unicode(
        "",
        config=True,
        help="""Regex a custom image reference must match as a whole; "" allows no custom images.""",
    )
    gpu_types = Dict(
        config=True,
        help="""GPU types: ``{key: {"display_name", "resource_name", "node_selector",
        "tolerations", "max_gpus", "description"}}`` (LocalGPUSpawner also ``devices``).""",
    )
    cpu_range = Dict(config=True, help="""CPU cores: ``{"min", "max", "default"}``.""")
    memory_range = Dict(
        config=True,
        help="""Memory as Kubernetes quantities: ``{"min": "1G", "max": "256G", "default": "8G"}``.""",
    )
    group_limits = Dict(
        config=True,
        help="""Per JupyterHub group: ``{"max_gpus", "gpu_types", "images", "custom_images"}``.
        A request is allowed when one of the user's groups allows all of it together; a group
        with an ``images`` list allows custom images only with ``"custom_images": True``.""",
    )
    default_limits = Dict(
        {"max_gpus": 1},
        config=True,
        help="""Limits for users in none of ``group_limits``' groups.""",
    )

    gpu_quota = Dict(
        config=True,
        help="""The most GPUs one user holds at once, servers (named too) and jobs together:
        ``{"default": 2, "groups": {"staff": 8}}``. A user's quota is the largest among their
        groups, else ``default``; None (the default) means no quota beyond ``group_limits``.""",
    )

    gpu_idle_reclaim = Dict(
        None,
        allow_none=True,
        config=True,
        help="""Stop servers whose GPUs stay idle: ``{"after": 7200, "utilization_below": 0.05,
        "warn": 900, "exempt_groups": ["staff"], "max_postpones": 3}``. After ``after`` seconds
        with every GPU below ``utilization_below`` (0..1) the user is warned; ``warn`` seconds
        later the server is stopped through the hub unless its GPUs got busy or the user kept
        them (at most ``max_postpones`` times). Exempt groups, CPU-only servers and jobs are
        never reclaimed. None (the default): nothing is reclaimed.""",
    )
    gpu_utilization_source = Type(
        NVMLUtilization,
        klass=UtilizationSource,
        config=True,
        help="""Class (or import string) the hub reads GPU utilization from, a
        :class:`gpuhub.utilization.UtilizationSource`: NVML on this machine for
        LocalGPUSpawner, the cluster's Prometheus (dcgm-exporter) for GPUSpawner.""",
    )
    gpu_monitor_interval = Float(
        30.0,
        config=True,
        help="""Seconds between the hub's samples of held GPUs (reclaim, metrics, GPU-hours).""",
    )
    gpu_usage_file = Unicode(
        "gpuhub-usage.json",
        config=True,
        help="""Where the hub keeps GPU-seconds per user and reclaim notices across restarts;
        relative to the hub's working directory, like its database. "" keeps them in memory.""",
    )

    launch_options: LaunchOptions | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Only a spawner of a running hub (whose users carry the hub's settings) starts the
        # hub's GPU monitor; spawners built in tools and unit tests do not.
        settings = getattr(getattr(self, "user", None), "settings", None)
        if isinstance(settings, Mapping) and settings.get("users") is not None:
            ensure_started(self)

    if TYPE_CHECKING:  # provided by jupyterhub.spawner.Spawner, which this is mixed into
        log: Any
        user: Any
        user_options: dict[str, Any]
        _log_name: str

    @default("options_form")
    def _gpuhub_options_form(self) -> Any:
        return _render_options_form

    @default("options_from_form")
    def _gpuhub_options_from_form(self) -> Any:
        return _options_from_form

    @default("apply_user_options")
    def _gpuhub_apply_user_options(self) -> Any:
        return apply_gpuhub_options

    def clear_state(self) -> None:
        super().clear_state()  # type: ignore[misc]  # Spawner.clear_state
        self.launch_options = None

    # -- policy --------------------------------------------------------------------------
    def policy_config(self) -> dict[str, Any]:
        """The admin's policy settings as plain data (also what the hub service is given)."""
        return {
            "images": self.images,
            "custom_image_pattern": self.custom_image_pattern,
            "gpu_types": self.gpu_types,
            "cpu_range": self.cpu_range,
            "memory_range": self.memory_range,
            "group_limits": self.group_limits,
            "default_limits": self.default_limits,
        }

    @property
    def gpu_policy(self) -> Policy:
        """The validated policy, built once per distinct configuration and shared."""
        config = self.policy_config()
        key = json.dumps(config, sort_keys=True, default=str)
        policy = _POLICY_CACHE.get(key)
        if policy is None:
            policy = _POLICY_CACHE[key] = Policy.from_config(**config)
        return policy

    def gpu_quota_limit(self) -> int | None:
        """This user's GPU quota (None: none). The admin's dict is checked once and shared."""
        key = json.dumps(self.gpu_quota, sort_keys=True, default=str)
        quota = _QUOTA_CACHE.get(key)
        if quota is None:
            quota = _QUOTA_CACHE[key] = GPUQuota.from_config(self.gpu_quota)
        return quota.limit_for(self.user_groups())

    def gpu_idle_reclaim_rule(self) -> ReclaimRule | None:
        """The validated reclaim rule (None: off), checked once per distinct setting."""
        key = json.dumps(self.gpu_idle_reclaim, sort_keys=True, default=str)
        if key not in _RECLAIM_CACHE:
            _RECLAIM_CACHE[key] = ReclaimRule.from_config(self.gpu_idle_reclaim)
        return _RECLAIM_CACHE[key]

    def gpu_utilization_settings(self) -> dict[str, Any]:
        """Keyword arguments for the utilization source (the Kubernetes one's Prometheus)."""
        return {}

    def user_groups(self) -> list[str]:
        return [group.name for group in self.user.groups]

    def get_env(self) -> dict[str, str]:
        """Hand the policy and the user's groups to the server, for its jobs API and magics."""
        env: dict[str, str] = super().get_env()  # type: ignore[misc]  # Spawner.get_env
        env.update(policy_env(self.policy_config(), self.user_groups()))
        return env

    # -- hooks for the concrete spawners -------------------------------------------------
    async def profile_presets(self) -> list[Preset]:
        """Named presets over the form's fields (KubeSpawner's ``profile_list``)."""
        return []

    def extra_option_keys(self) -> set[str]:
        """``user_options`` keys another layer validates (KubeSpawner profile options)."""
        return set()

    async def gpu_capacity(self) -> tuple[dict[str, GPUCapacity], str]:
        """Free/total GPUs per type for the form, and a note when figures are unavailable."""
        return {}, ""

    async def check_launch_options(self, options: LaunchOptions) -> None:
        """Refuse (raise :func:`refusal`) what is valid but cannot run here now."""

    def apply_launch_options(self, options: LaunchOptions) -> None:
        """Turn validated options into spawner attributes."""
        raise NotImplementedError

    async def ensure_launch_options(self) -> LaunchOptions:
        """Validate in ``start()`` too, in case an admin replaced ``apply_user_options``."""
        if self.launch_options is None:
            await apply_gpuhub_options(self, self.user_options)
        assert self.launch_options is not None
        return self.launch_options


async def _render_options_form(spawner: GPUSpawnerMixin) -> str:
    capacity, note = await spawner.gpu_capacity()
    return render_form(
        spawner.gpu_policy,
        spawner.user_groups(),
        spawner.user_options,  # the last options, kept by JupyterHub
        presets=await spawner.profile_presets(),
        capacity=capacity,
        capacity_note=note,
    )


def _options_from_form(formdata: Mapping[str, list[str]]) -> dict[str, Any]:
    try:
        return options_from_formdata(formdata)
    except OptionsError as exc:
        raise refusal(exc.message) from None
