"""A workstation hub with two simulated GPUs and bookings (a staff rule, admins booking for
groups, a 60 s warning), fast monitor ticks and a long line wait: the configuration the
bookings tests of the hub and of the lab share."""

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.LocalGPUSpawner.run_as_hub_user = True
c.LocalGPUSpawner.gpu_devices = "simulated:2"
c.LocalGPUSpawner.gpu_types = {"sim": {"display_name": "Simulated GPU", "devices": [0, 1], "max_gpus": 2}}
c.LocalGPUSpawner.default_limits = {"max_gpus": 2}
c.LocalGPUSpawner.gpu_quota = {"default": 2}
c.LocalGPUSpawner.gpu_queue_timeout = 300
c.LocalGPUSpawner.gpu_monitor_interval = 0.5
c.LocalGPUSpawner.bookings = {
    "groups": {"staff": {"max_gpus": 1, "max_hours": 2, "days_ahead": 1}},
    "admins_book_for_groups": True,
    "warn_before": 60,
}
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 1}
c.LocalGPUSpawner.cpu_range = {"min": 0.5, "max": 2, "default": 0.5}
c.LocalGPUSpawner.memory_range = {"min": "512Mi", "max": "4G", "default": "1G"}
from gpuhub.hub.web.api import configure_hub

configure_hub(c)
"""
