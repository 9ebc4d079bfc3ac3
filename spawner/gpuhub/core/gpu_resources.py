"""What counts as a GPU: the one rule for extended resource names.

Capacity (free GPUs per type), the ledger and the quota (what a user's pods hold), the jobs
service's own quota fallback, pod manifests (which of the admin's extra resources gpuhub
replaces) and the policy (whether a type is a MIG slice) all ask this module, so a GPU that
shows as free is a GPU that counts against the quota, and the other way round.

A GPU is what a vendor's GPU device plugin advertises, one unit per device or slice:

* ``nvidia.com/gpu``: NVIDIA's device plugin (whole GPUs, or time-sliced/MPS replicas);
  ``nvidia.com/gpu.shared`` when sharing renames the resource (``renameByDefault``);
* ``nvidia.com/mig-<profile>``: a MIG slice under the plugin's ``mixed`` strategy;
* ``amd.com/gpu``: AMD's ROCm device plugin;
* ``gpu.intel.com/i915``, ``gpu.intel.com/xe``: Intel's GPU plugin, per kernel driver.

Not GPUs, though they share a vendor's domain: Intel's resource-management shares of one
device (``gpu.intel.com/millicores``, ``memory.max``, ``tiles``, counted in thousandths,
bytes and tiles, not devices), and NVIDIA's Network Operator NICs (``nvidia.com/hostdev``,
``nvidia.com/rdma_shared_device_*``).
"""

from __future__ import annotations

GPU_RESOURCES = frozenset(
    {
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "amd.com/gpu",
        "gpu.intel.com/i915",
        "gpu.intel.com/xe",
    }
)
MIG_PREFIX = "nvidia.com/mig-"
# For sentences: what counts, as an admin would write it.
GPU_RESOURCE_NAMES = ", ".join([*sorted(GPU_RESOURCES), f"{MIG_PREFIX}<profile>"])


def is_mig_resource(name: str) -> bool:
    """Whether ``name`` is a MIG slice of an NVIDIA GPU (``nvidia.com/mig-1g.10gb``)."""
    return name.startswith(MIG_PREFIX)


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource name is a GPU or a slice of one (see the module)."""
    return name in GPU_RESOURCES or is_mig_resource(name)
