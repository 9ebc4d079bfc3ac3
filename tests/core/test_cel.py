"""The part of CEL gpuhub evaluates for DRA device selectors (gpuhub.core.cel) and a GPU
type's ``dra`` config (gpuhub.core.dra), on devices shaped as the NVIDIA driver publishes them."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhub.core.cel import SelectorError, compile_selector
from gpuhub.core.dra import DRAConfigError, DRAType
from gpuhub.core.dra_devices import Device, device_class_info, device_from_slice


def device(driver: str, pool: str, node: str, entry: dict[str, Any]) -> Device:
    found = device_from_slice(driver, pool, node, entry)
    assert found is not None
    return found


A100 = device(
    "gpu.nvidia.com",
    "a100-7",
    "a100-7",
    {
        "name": "gpu-3",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "uuid": {"string": "GPU-4b1d"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:13:00.0"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        "allowMultipleAllocations": True,
    },
)
MIG = device(
    "gpu.nvidia.com",
    "a100-7",
    "a100-7",
    {
        "name": "gpu-0-mig-1g10gb-19-0",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": "1g.10gb"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        },
        "capacity": {"memory": {"value": "10200547328"}},
    },
)
GPU = "device.attributes['gpu.nvidia.com']"
MEMORY = "device.capacity['gpu.nvidia.com'].memory"


def matches(expression: str, on: Device = A100) -> bool:
    return compile_selector(expression).matches(on)


@pytest.mark.parametrize(
    ("expression", "a100", "mig"),
    [
        # The NVIDIA driver's DeviceClasses.
        (f"device.driver == 'gpu.nvidia.com' && {GPU}.type == 'gpu'", True, False),
        (f"device.driver == 'gpu.nvidia.com' && {GPU}.type == 'mig'", False, True),
        # The admin guide's selectors.
        (f"{GPU}.productName.startsWith('NVIDIA A100')", True, True),
        (f"{GPU}.productName == 'NVIDIA H100 80GB HBM3'", False, False),
        (f"{MEMORY}.compareTo(quantity('40Gi')) >= 0", True, False),
        (f"{MEMORY}.compareTo(quantity('80Gi')) == 0", True, False),
        (f"{MEMORY}.isGreaterThan(quantity('81Gi'))", False, False),
        (f"{MEMORY}.isLessThan(quantity('20G'))", False, True),
        (f"{GPU}.profile == '1g.10gb'", False, True),  # no profile on a GPU: no match
        (f"!({GPU}.profile == '1g.10gb')", False, False),  # an error stays an error under !
        (f"{GPU}.profile == '1g.10gb' || {GPU}.type == 'gpu'", True, True),  # || absorbs it
        (f"{GPU}.profile == '3g.40gb' && false", False, False),  # && absorbs it
        (f"has({GPU}.profile)", False, True),
        (f"{GPU}['productName'].endsWith('80GB')", True, True),
        (
            f"{GPU}.productName.contains('A100') && {GPU}.productName.matches('^NVIDIA A1[0-9]+')",
            True,
            True,
        ),
        (f"{GPU}.productName in ['NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3']", True, True),
        (f"{GPU}.cudaComputeCapability.isGreaterThan(semver('7.5.0'))", True, False),
        (f"{GPU}.cudaComputeCapability.compareTo(semver('8.0.0')) == 0", True, False),
        ("device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:13')", True, False),
        ("device.attributes['other.example.com'].x == 1", False, False),  # unknown domain
        ("device.allowMultipleAllocations", True, False),
        (f"{GPU}.productName.size() > 5", True, True),
        (f"{MEMORY}.asInteger() >= 85899345920", True, False),
        (f"{GPU}.type == 1", False, False),  # no match, never an exception
        (f"{GPU}.type < 1", False, False),
    ],
)
def test_selectors_match_as_kubernetes_would(expression: str, a100: bool, mig: bool) -> None:
    assert matches(expression, A100) is a100
    assert matches(expression, MIG) is mig


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("device.name == 'gpu-0'", "device.name is not a field gpuhub reads"),
        (f"size({GPU}.productName) > 0", "'size' is not something gpuhub evaluates"),
        (f"{GPU}.productName.lowerAscii() == 'x'", "lowerAscii() is not a function"),
        (f"{GPU}.productName.startsWith('a', 'b')", "startsWith() takes 1 argument"),
        (f"{GPU}.type == 'gpu' ? true : false", "cannot read"),
        (f"{MEMORY} + 1", "cannot read"),
        ("quantity('forty')", "is not a quantity"),
        ("semver('8')", "is not a semantic version"),
        (f"{GPU}.type ==", "expected a value but found the end"),
        (f"({GPU}.type == 'gpu'", "expected ')' but found the end"),
        ("", "non-empty"),
        ("x" * 10241, "at most 10240 characters"),
    ],
)
def test_unsupported_expressions_are_refused_with_a_reason(expression: str, reason: str) -> None:
    with pytest.raises(SelectorError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        compile_selector(expression)


def test_a_dra_type_compiles_its_selectors_and_names_the_one_it_cannot() -> None:
    dra = DRAType.from_config(
        "gpu_types['a100'].dra",
        {
            "device_class": "gpu.nvidia.com",
            "selectors": [f"{MEMORY}.compareTo(quantity('40Gi')) >= 0"],
        },
    )
    assert dra is not None and dra.admits(A100) and not dra.admits(MIG)
    assert DRAType.from_config("x", None) is None
    with pytest.raises(DRAConfigError) as refused:
        DRAType.from_config(
            "gpu_types['a100'].dra",
            {"device_class": "gpu.nvidia.com", "selectors": [f"{GPU}.uuid.lowerAscii() == 'x'"]},
        )
    assert str(refused.value).startswith(
        "gpu_types['a100'].dra.selectors[0] \"device.attributes['gpu.nvidia.com'].uuid."
        "lowerAscii() == 'x'\" cannot be evaluated by gpuhub: lowerAscii() is not a function"
    )
    with pytest.raises(DRAConfigError, match="device_class must name a DeviceClass"):
        DRAType.from_config("t.dra", {"device_class": "GPU Class"})
    with pytest.raises(DRAConfigError, match="unknown keys"):
        DRAType.from_config("t.dra", {"device_class": "gpu.nvidia.com", "count": 2})


def test_a_device_class_with_an_expression_gpuhub_cannot_read_admits_nothing() -> None:
    cls = device_class_info(
        {
            "metadata": {"name": "odd"},
            "spec": {"selectors": [{"cel": {"expression": "1 + 1 == 2"}}]},
        }
    )
    assert cls.unsupported and not cls.admits(A100)
    nvidia = device_class_info(
        {
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == 'gpu.nvidia.com' && {GPU}.type == 'gpu'"
                        }
                    }
                ]
            },
        }
    )
    assert nvidia.admits(A100) and not nvidia.admits(MIG)


def test_devices_are_named_for_people() -> None:
    assert A100.words_on_node == "GPU 3 (A100-SXM4-80GB) on a100-7"
    assert MIG.words == "MIG 1g.10gb #0 of GPU 0 (A100-SXM4-80GB)"
    assert A100.memory == 80 * 2**30
