"""The admin's policy traits are declared once (gpuhub.core.policy_traits) and both spawners and
the lab's jobs settings carry those very traits, under the class names configs already use."""

from __future__ import annotations

import inspect

from traitlets.config import Config

from gpuhub.core.policy import Policy
from gpuhub.core.policy_traits import POLICY_KEYS, HubPolicyTraits, PolicyTraits
from gpuhub.hub.gpu_spawner import GPUSpawner
from gpuhub.hub.local_gpu_spawner import LocalGPUSpawner
from gpuhub.hub.spawner_mixin import GPUSpawnerMixin
from gpuhub_lab.jobs_config import GPUHubJobs


def test_the_policy_keys_are_what_the_policy_takes() -> None:
    taken = [
        name
        for name, parameter in inspect.signature(Policy.from_config).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY or name in POLICY_KEYS
    ]
    assert set(POLICY_KEYS) <= set(taken)
    assert set(PolicyTraits.class_traits(config=True)) == set(POLICY_KEYS)


def test_spawners_and_the_lab_carry_the_same_traits() -> None:
    policy = PolicyTraits.class_traits(config=True)
    hub = HubPolicyTraits.class_traits(config=True)
    for cls in (GPUSpawnerMixin, GPUSpawner, LocalGPUSpawner, GPUHubJobs):
        traits = cls.class_traits(config=True)
        assert all(traits[name] is trait for name, trait in policy.items()), cls
    for cls in (GPUSpawnerMixin, GPUSpawner, LocalGPUSpawner):
        traits = cls.class_traits(config=True)
        assert all(traits[name] is trait for name, trait in hub.items()), cls
    # The lab has no quota or reclaim of its own: the hub enforces them.
    assert "gpu_quota" not in GPUHubJobs.class_traits(config=True)


def test_defaults_and_config_sections_are_as_before() -> None:
    defaults = {name: t.default() for name, t in GPUSpawner.class_traits(config=True).items()}
    assert {name: defaults[name] for name in [*POLICY_KEYS, "gpu_quota", "gpu_idle_reclaim"]} == {
        "images": {},
        "custom_image_pattern": "",
        "gpu_types": {},
        "cpu_range": {},
        "memory_range": {},
        "group_limits": {},
        "default_limits": {"max_gpus": 1},
        "gpu_quota": {},
        "gpu_idle_reclaim": {},  # and None allowed: nothing is reclaimed
    }
    assert GPUSpawner.class_traits()["gpu_idle_reclaim"].allow_none
    # No new section: a config names the spawner or GPUHubJobs, as it always did.
    assert "PolicyTraits" not in GPUSpawner.section_names()
    config = Config()
    config.GPUHubJobs.gpu_types = {"gpu": {"display_name": "RTX 4090"}}
    config.GPUHubJobs.default_limits = {"max_gpus": 2}
    jobs = GPUHubJobs(config=config)
    assert jobs.gpu_types == {"gpu": {"display_name": "RTX 4090"}}
    assert jobs.policy_config()["default_limits"] == {"max_gpus": 2}
