"""The one reading of ``CUDA_VISIBLE_DEVICES`` (gpuhub.core.devices.visible_devices), with CUDA's
rules, and the places that read the variable through it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuhub.core.devices import visible_devices
from gpuhub.core.simulated import visible_indices
from gpuhub.hub.ledger.launches import device_set
from gpuhub.jobs.local import server_gpu_ids
from gpuhub_lab.metrics.assigned import assignment
from gpuhub_lab.metrics.nvml import Visibility


@pytest.mark.parametrize(
    ("value", "devices"),
    [
        (None, None),  # unset: every device
        ("", ()),  # empty: none
        ("0", (0,)),
        ("2,1", (2, 1)),  # CUDA's order, not sorted
        (" 1 , 3 ", (1, 3)),
        ("0,2,-1,1", (0, 2)),  # the first invalid index ends the list
        ("-1", ()),
        ("NoDevFiles", ()),
        ("void", ()),
        ("0,,1", (0,)),
        ("1gpu,2", (1, 2)),  # strtoul: the leading number
        ("+1", (1,)),
        ("0,1,0", ()),  # a device named twice: none
        ("GPU-8f2a", ("GPU-8f2a",)),
        ("GPU-abc,MIG-def", ("GPU-abc", "MIG-def")),
        ("MIG-1234,GPU-aa,NoDevFiles,3", ("MIG-1234", "GPU-aa")),
        ("GPU-a,GPU-a", ()),
    ],
)
def test_cuda_rules(value: str | None, devices: tuple[int | str, ...] | None) -> None:
    assert visible_devices(value) == devices


entry = st.one_of(
    st.integers(min_value=0, max_value=15).map(str),
    st.sampled_from(["-1", "NoDevFiles", "", " ", "GPU-a1", "GPU-b2", "MIG-c3", "x"]),
)


@given(st.lists(entry, max_size=8).map(",".join))
def test_properties(value: str) -> None:
    devices = visible_devices(value)
    assert devices is not None
    assert len(set(devices)) == len(devices)  # never a device twice
    assert all(
        (isinstance(d, int) and d >= 0) or str(d).startswith(("GPU-", "MIG-")) for d in devices
    )
    # What it keeps is a prefix of what was written (nothing after an invalid entry).
    written = [e.strip() for e in value.split(",")]
    assert [str(d) for d in devices] == written[: len(devices)]
    # Every reader agrees with it.
    assert Visibility(value).items == [str(d) for d in devices]
    assert Visibility(value).none == (devices == ())
    assert server_gpu_ids({"CUDA_VISIBLE_DEVICES": value}) == [str(d) for d in devices]
    indices = {d for d in devices if isinstance(d, int)}
    assert visible_indices(value) == indices
    assert device_set(value) == (indices if len(indices) == len(devices) else None)


def test_readers_of_the_edge_cases() -> None:
    assert Visibility(None).all and not Visibility(None).none
    assert Visibility("NoDevFiles").none
    assert Visibility("0,-1,1").allows(0, "GPU-x") and not Visibility("0,-1,1").allows(1, "GPU-y")
    assert server_gpu_ids({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == []
    assert device_set(None) is None
    assert device_set("NoDevFiles") == set()
    assert visible_indices(None) == frozenset()
    # The hub's assignment: the listed devices, else GPUHUB_GPUS of them from 0.
    assert assignment({"GPUHUB_GPUS": "2", "CUDA_VISIBLE_DEVICES": "3,1"})["devices"] == [3, 1]
    assert assignment({"GPUHUB_GPUS": "2", "CUDA_VISIBLE_DEVICES": "-1"})["devices"] == [0, 1]
