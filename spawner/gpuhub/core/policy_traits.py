"""The admin's policy settings, declared once: the traits both spawners and the lab share.

:class:`PolicyTraits` holds what :meth:`gpuhub.core.policy.Policy.from_config` validates
(:data:`POLICY_KEYS`): the spawners (``GPUSpawner``, ``LocalGPUSpawner``, through
``GPUSpawnerMixin``) and the lab's jobs settings (``GPUHubJobs``) mix it in, so each key has one
type, one default and one help text whichever class an admin sets it on.
:class:`HubPolicyTraits` adds what only the hub enforces: the GPU quota, idle reclaim and
GPU-hour budgets.

They are plain :class:`~traitlets.HasTraits`, not configurable classes of their own: a config
names the class that mixes them in (``c.GPUSpawner.gpu_types``, ``c.GPUHubJobs.gpu_types``).
"""

from __future__ import annotations

from typing import Any

from traitlets import Any as TraitAny
from traitlets import Dict, HasTraits, Unicode

from gpuhub.core.line_order import DEFAULT_HALF_LIFE, FIFO

# The policy's settings: the keyword arguments of Policy.from_config, in the order a spawner
# hands them to its server (gpuhub.jobs.policy_env) and the jobs service reads them.
POLICY_KEYS = (
    "images",
    "custom_image_pattern",
    "gpu_types",
    "cpu_range",
    "memory_range",
    "group_limits",
    "default_limits",
)


class PolicyTraits(HasTraits):
    """What a user may ask for: images, GPU types, CPU and memory ranges, limits per group."""

    images = Dict(
        config=True,
        help="""Images a user may pick: ``{key: {"display_name", "image", "description",
        "default"}}``. The one with ``"default": True``, else the one whose key sorts first, is
        the default (Helm and YAML hand maps over sorted). Empty: the spawner's own ``image``
        is used.""",
    )
    custom_image_pattern = Unicode(
        "",
        config=True,
        help="""Regex a custom image reference must match as a whole; "" allows no custom images.""",
    )
    gpu_types = Dict(
        config=True,
        help="""GPU types: ``{key: {"display_name", "resource_name", "node_selector",
        "tolerations", "max_gpus", "description", "default"}}`` (LocalGPUSpawner also
        ``devices``). The one with ``"default": True``, else the one whose key sorts first, is
        picked when a request names no type.""",
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

    def policy_config(self) -> dict[str, Any]:
        """The policy's settings as plain data, keyed as :meth:`Policy.from_config` takes
        them (also what a spawner hands the user's server and the chart the jobs service)."""
        return {key: getattr(self, key) for key in POLICY_KEYS}


class HubPolicyTraits(PolicyTraits):
    """The policy plus what the hub enforces across a user's servers and jobs."""

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
    # Checked when the hub starts (gpuhub.core.line_order.LineOrder.from_config), each
    # mistake one sentence, rather than by traitlets, whose error names no remedy.
    line_order = TraitAny(
        FIFO,
        config=True,
        help="""How a line for GPUs is ordered: "fifo", first come, first served (the default),
        or "fair": who used least recently goes first, by GPU-hours decayed with
        ``usage_half_life``; each second waited counts as a GPU-second less used, so a request
        is passed by later ones only while its user's lead in usage lasts. LocalGPUSpawner:
        gpuhub's own line; GPUSpawner: Kueue's queue, through Kueue's admission fair sharing
        where the cluster offers it (one LocalQueue per user; see the admin guide, "A fair
        line").""",
    )
    usage_half_life = TraitAny(
        DEFAULT_HALF_LIFE,
        config=True,
        help="""Seconds after which past GPU usage counts half as much in a fair line (above 0;
        the default, 604800, is a week).""",
    )
    gpu_hours = Dict(
        None,
        allow_none=True,
        config=True,
        help="""GPU-hours per period (:mod:`gpuhub.core.budgets`): ``{"default": {"hours": 20,
        "per": "week"}, "groups": {"staff": {"hours": 500, "per": "month", "shared": True}},
        "period_start": "monday 00:00", "timezone": "Europe/Berlin", "at_limit": "refuse",
        "grace": 600}``. ``per`` is day, week or month; a share of a GPU counts its fraction;
        servers and jobs of every kind count. A user's budget is their group's (the most hours
        per day when several), else ``default``; a ``shared`` group budget is one pool for its
        members. At the limit new GPU servers and jobs are refused (``"refuse"``) or start only
        while their GPUs would otherwise stay idle (``"idle_only"``); running ones are warned
        and stopped after ``grace`` seconds. None (the default): no budgets.""",
    )
