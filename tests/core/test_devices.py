"""GPU discovery for LocalGPUSpawner: NVML when there is a driver, "no GPUs" when not."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from gpuhub import LocalGPUSpawner
from gpuhub.core import devices
from gpuhub.hub.form import render_form
from harness import fake_nvml


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch):
    """Route ``import pynvml`` to the stand-in, with a fresh discovery cache."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    devices.discover.cache_clear()
    yield fake_nvml
    devices.discover.cache_clear()


def spawner(gpu_devices: object = "auto", **traits: object) -> LocalGPUSpawner:
    config = Config()
    config.LocalGPUSpawner.gpu_devices = gpu_devices
    for key, value in traits.items():
        setattr(config.LocalGPUSpawner, key, value)
    user = SimpleNamespace(name="alice", groups=[], url="/user/alice/")
    return LocalGPUSpawner(user=user, config=config)


def test_discovers_gpus_and_offers_them_as_one_type(nvml) -> None:
    nvml.install(fake_nvml.a100s(2))
    found = devices.discover()
    assert [d.index for d in found.devices] == [0, 1]
    assert found.devices[0].name == "NVIDIA A100-SXM4-80GB"
    assert found.reason is None
    policy = spawner(default_limits={"max_gpus": 2}).gpu_policy
    only = policy.gpu_types["gpu"]
    assert (only.display_name, only.max_gpus, only.devices) == ("NVIDIA A100-SXM4-80GB", 2, (0, 1))


def test_no_driver_means_no_gpus_and_the_form_says_so(nvml) -> None:
    nvml.install(fake_nvml.Scenario(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
    found = devices.discover()
    assert found.devices == ()
    assert "Driver Not Loaded" in (found.reason or "")
    s = spawner()
    assert s.device_indices() == []
    assert "no GPUs to hand out" in render_form(s.gpu_policy, [])


def test_explicit_indices_skip_nvml(nvml) -> None:
    nvml.install(fake_nvml.Scenario(init_error=fake_nvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert spawner([0, 2]).device_indices() == [0, 2]


def test_gpu_types_can_split_a_mixed_workstation(nvml) -> None:
    nvml.install(fake_nvml.a100s(4))
    s = spawner(
        gpu_types={
            "big": {"display_name": "A6000", "devices": [0, 1], "max_gpus": 2},
            "small": {"display_name": "3090", "devices": [2, 3], "max_gpus": 2},
        }
    )
    assert s._devices_of("big") == [0, 1]
    assert s._devices_of("small") == [2, 3]
