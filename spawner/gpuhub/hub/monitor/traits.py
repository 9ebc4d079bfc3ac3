"""The hub monitor's settings, declared beside the monitor that reads them.

:class:`MonitorTraits` holds what :func:`gpuhub.hub.monitor.gpu_monitor.ensure_started` and the
monitor's parts read off the spawner: where GPU utilization comes from, how often it is
sampled, how shares by memory are held to their share, and the files the hub keeps GPU usage
and budgets in. The spawners mix it in (through ``GPUSpawnerMixin``), so a config
names them as it always did (``c.GPUSpawner.gpu_monitor_interval``); like
:class:`gpuhub.core.policy_traits.HubPolicyTraits` it is plain :class:`~traitlets.HasTraits`,
no configurable class of its own.
"""

from __future__ import annotations

from traitlets import Bool, Float, HasTraits, Type, Unicode

from gpuhub.hub.monitor.utilization import NVMLUtilization, UtilizationSource


class MonitorTraits(HasTraits):
    """What the hub's GPU monitor samples, keeps and enforces, as the admin sets it."""

    gpu_utilization_source = Type(
        NVMLUtilization,
        klass=UtilizationSource,
        config=True,
        help="""Class (or import string) the hub reads GPU utilization from, a
        :class:`gpuhub.hub.monitor.utilization.UtilizationSource`: NVML on this machine for
        LocalGPUSpawner, the cluster's Prometheus (dcgm-exporter) for GPUSpawner.""",
    )
    gpu_share_grace = Float(
        120.0,
        config=True,
        help="""Workstation, GPU types shared by memory without the CUDA MPS daemon: seconds a
        server may use more GPU memory than its share (warned at once) before it is stopped,
        saying why. 0 turns the check off.""",
    )
    gpu_share_end_unexplained = Bool(
        True,
        config=True,
        help="""Workstation, GPU types shared by memory (with ``gpu_share_grace``): end a process
        whose memory on such a GPU proves no holder of it (no launch grant, and no share of
        that GPU held by the user its OS account is named for) once it has lasted
        ``gpu_share_grace``, telling the fleet admins its pid and account (log, fleet page).
        False: such memory is only shown (fleet page, ``/hub/metrics``), for a machine whose
        shared GPUs other software uses too.""",
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
    gpu_budget_file = Unicode(
        "gpuhub-budgets.json",
        config=True,
        help="""Where the hub keeps what each GPU-hour budget has used this period, extra hours
        granted and the usage the fair line orders by (``gpu_hours``); relative to the hub's
        working directory. "" keeps them in memory.""",
    )
