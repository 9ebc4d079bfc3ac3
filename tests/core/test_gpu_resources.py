"""The one rule for which extended resources are GPUs (gpuhub.core.gpu_resources)."""

from __future__ import annotations

import pytest

from gpuhub.core.gpu_resources import is_gpu_resource, is_mig_resource
from gpuhub.core.policy import GPUType
from gpuhub.k8s.inventory import node_info, pod_gpus


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "amd.com/gpu",
        "gpu.intel.com/i915",
        "gpu.intel.com/xe",
    ],
)
def test_device_plugin_gpus_count(name: str) -> None:
    assert is_gpu_resource(name)


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        # Intel's shares of one GPU: thousandths, bytes and tiles, not devices.
        "gpu.intel.com/millicores",
        "gpu.intel.com/memory.max",
        "gpu.intel.com/tiles",
        # NVIDIA Network Operator NICs.
        "nvidia.com/hostdev",
        "nvidia.com/rdma_shared_device_a",
        "example.com/gpu",
        "nvidia.com/gpus",
    ],
)
def test_other_resources_do_not(name: str) -> None:
    assert not is_gpu_resource(name)


def test_mig_is_a_gpu_and_the_policy_says_so() -> None:
    assert is_mig_resource("nvidia.com/mig-1g.10gb")
    assert not is_mig_resource("nvidia.com/gpu")
    assert GPUType("slice", "MIG 1g", resource_name="nvidia.com/mig-1g.10gb").is_mig
    assert not GPUType("a100", "A100", resource_name="nvidia.com/gpu").is_mig


def test_free_figures_and_holdings_count_the_same_resources() -> None:
    resources = {
        "nvidia.com/gpu": "4",
        "amd.com/gpu": "2",
        "gpu.intel.com/millicores": "1000",
        "nvidia.com/hostdev": "1",
    }
    node = node_info({"metadata": {"name": "n"}, "status": {"allocatable": resources}})
    pod = {"spec": {"containers": [{"resources": {"limits": resources}}]}}
    assert (
        set(node.gpus) == {name for name, _ in pod_gpus(pod)} == {"nvidia.com/gpu", "amd.com/gpu"}
    )
