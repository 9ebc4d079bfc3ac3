"""What a GPU holder is told, pod or process: one builder, the same variables, every value as
the spawners have always set it."""

from __future__ import annotations

from fractions import Fraction

from gpuhub.core.holder_env import holder_env

G = 10**9


def test_a_cpu_only_container_sees_no_gpu_of_its_node() -> None:
    assert list(holder_env(0, devices=(), container=True).items()) == [
        ("NVIDIA_VISIBLE_DEVICES", "void"),
        ("CUDA_VISIBLE_DEVICES", ""),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ("GPUHUB_GPUS", "0"),
        ("GPUHUB_GPU_TYPE", ""),
        ("GPUHUB_GPU_TYPE_NAME", ""),
    ]


def test_a_gpu_container_leaves_the_devices_to_the_device_plugin() -> None:
    assert list(holder_env(2, "a100", "NVIDIA A100", container=True).items()) == [
        ("GPUHUB_GPUS", "2"),
        ("GPUHUB_GPU_TYPE", "a100"),
        ("GPUHUB_GPU_TYPE_NAME", "NVIDIA A100"),
    ]


def test_a_share_in_a_container_says_what_it_counts_as_and_its_memory() -> None:
    by_memory = holder_env(1, "t4", "T4", share=Fraction(1, 2), gpu_memory=8 * G, container=True)
    assert by_memory["GPUHUB_GPU_SHARE"] == "1/2"
    assert by_memory["GPUHUB_GPU_MEMORY"] == str(8 * G)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in by_memory  # HAMi enforces it there
    time_sliced = holder_env(2, "a10", "A10", share=Fraction(1, 2), container=True)
    assert time_sliced["GPUHUB_GPU_SHARE"] == "1/2"
    assert "GPUHUB_GPU_MEMORY" not in time_sliced


def test_a_workstation_process_is_given_its_devices_by_index() -> None:
    assert holder_env(2, "gpu", "RTX A6000", devices=[0, 3]) == {
        "CUDA_VISIBLE_DEVICES": "0,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPUHUB_GPUS": "2",
        "GPUHUB_GPU_TYPE": "gpu",
        "GPUHUB_GPU_TYPE_NAME": "RTX A6000",
    }
    none = holder_env(0, devices=[])
    assert none["CUDA_VISIBLE_DEVICES"] == "" and "NVIDIA_VISIBLE_DEVICES" not in none


def test_a_workstation_share_gets_the_mps_daemons_limit_on_its_only_device() -> None:
    env = holder_env(1, "gpu", "RTX 4090", devices=[3], share=Fraction(1, 3), gpu_memory=8 * G)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["GPUHUB_GPU_SHARE"] == "1/3"
    assert env["GPUHUB_GPU_MEMORY"] == str(8 * G)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=7630M"  # MiB, rounded up
