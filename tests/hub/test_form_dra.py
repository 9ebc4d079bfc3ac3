"""What the spawn form says of GPU types claimed through DRA: each device and what it has
free, and a share no device can hold now explained with the largest that could. The figures
come from objects recorded on the local cluster after its scheduler allocated a whole A100,
a MIG 1g.10gb and shares of 20Gi and 30Gi of one H100 (tests/k8s/data/dra/)."""

from __future__ import annotations

import html
import re
from typing import Any

from gpuhub.core.policy import Policy
from gpuhub.hub.form import render_form
from gpuhub.hub.ledger.dra_capacity import figures
from gpuhub.k8s.dra_inventory import Allocated, ClaimInfo
from tests.support.dra import everywhere, state

GPU = "device.attributes['gpu.nvidia.com']"
CONFIG: dict[str, Any] = {
    "images": {"base": {"display_name": "Base", "image": "x/base:1"}},
    "gpu_types": {
        "a100": {
            "display_name": "A100",
            "max_gpus": 4,
            "dra": {
                "device_class": "gpu.nvidia.com",
                "selectors": [f"{GPU}.productName.startsWith('NVIDIA A100')"],
            },
        },
        "mig-1g": {
            "display_name": "A100 MIG 1g.10gb",
            "dra": {"device_class": "mig.nvidia.com", "selectors": [f"{GPU}.profile == '1g.10gb'"]},
        },
        "h100-shared": {
            "display_name": "H100, shared",
            "dra": {
                "device_class": "gpu.nvidia.com",
                "selectors": [f"{GPU}.productName == 'NVIDIA H100 80GB HBM3'"],
            },
            "sharing": {"memory": "80G", "min": "4G", "max": "80G", "default": "8G"},
        },
    },
    "default_limits": {"max_gpus": 4},
}


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def render(gpu_memory: str = "", *, second_h100_taken: bool = False) -> str:
    policy = Policy.from_config(**CONFIG)
    devices = state()
    if second_h100_taken:
        whole = ClaimInfo(
            "lab", "whole-h100", (Allocated("gpu.nvidia.com", "dra-h100-0", "gpu-1"),), ("p",)
        )
        devices.set_claim(whole.key, whole)
    capacity = {
        key: figures(devices.devices_for(t.dra, everywhere, 0, t.sharing), t.sharing)
        for key, t in policy.gpu_types.items()
        if t.dra is not None
    }
    options = {
        "gpu_type": "h100-shared",
        "gpus": 1,
        **({"gpu_memory": gpu_memory} if gpu_memory else {}),
    }
    return text_of(render_form(policy, [], options, capacity=capacity))


def test_each_dra_device_says_what_it_has_free() -> None:
    text = render()
    assert "3 of 4 free now (GPU 1, GPU 2, GPU 3 on node dra-a100-0)" in text
    assert (
        "6 of 7 free now (" in text
        and "(MIG 1g.10gb #1 of GPU 0, MIG 1g.10gb #2 of GPU 0, " in text
    )
    # The H100 with two shares (20Gi and 30Gi of 81559 MiB), then the untouched one, most
    # free first.
    assert (
        "GPU 1 on node dra-h100-0: 79.6 GiB of 79.6 GiB free; "
        "GPU 0 on node dra-h100-0: 29.6 GiB of 79.6 GiB free"
    ) in text
    assert "can hold" not in text  # the default share (8G) fits


def test_a_share_no_device_can_hold_now_is_explained_with_the_largest() -> None:
    text = render("40G", second_h100_taken=True)
    assert (
        "No H100, shared can hold 40 GB now; the largest free share is 29.6 GiB on GPU 0 of dra-h100-0."
        in text
    )
    assert "GPU 1 on node dra-h100-0: all 79.6 GiB in use" in text
    assert "can hold" not in render("20G", second_h100_taken=True)
