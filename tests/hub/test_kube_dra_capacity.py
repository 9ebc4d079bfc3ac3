"""Capacity per DRA device on the test cluster (admin guide, "GPUs through DRA"): the real
kube-scheduler allocates a whole A100, a MIG 1g.10gb and memory shares of two H100s from
the simulated NVIDIA driver's ResourceSlices (localk8s/dra.py), and what gpuhub's one watch
says each device has free equals what the slices and claims say, read separately from the
API; a real JupyterHub's spawn form says it per device, explains a share no device can hold,
and its holdings name the device a server's pod was allocated.

One namespace, one set of claims and one hub for the module: cluster tests share their setup.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuhub.core.policy import Policy
from gpuhub.core.quantity import human_memory, parse_quantity
from gpuhub.hub.ledger.capacity import ClusterCapacity
from harness.cluster import GPU_TOLERATION, KWOK_TOLERATION, Kube
from harness.hub.kube import hub_config
from harness.hub.process import Hub, start_hub

pytestmark = pytest.mark.e2e

RESOURCE = "resource.k8s.io/v1"
GPU = "device.attributes['gpu.nvidia.com']"
TOLERATIONS = [GPU_TOLERATION, KWOK_TOLERATION]
TYPES: dict[str, Any] = {
    "cap-a100": {
        "display_name": "A100 (DRA)",
        "dra": {
            "device_class": "gpu.nvidia.com",
            "selectors": [f"{GPU}.productName.startsWith('NVIDIA A100')"],
        },
        "tolerations": TOLERATIONS,
        "max_gpus": 4,
    },
    "cap-mig": {
        "display_name": "A100 MIG 1g.10gb (DRA)",
        "dra": {"device_class": "mig.nvidia.com", "selectors": [f"{GPU}.profile == '1g.10gb'"]},
        "tolerations": TOLERATIONS,
    },
    "cap-h100": {
        "display_name": "H100 shared (DRA)",
        "dra": {
            "device_class": "gpu.nvidia.com",
            "selectors": [f"{GPU}.productName == 'NVIDIA H100 80GB HBM3'"],
        },
        "tolerations": TOLERATIONS,
        "sharing": {"memory": "80G", "min": "4G", "max": "80G", "default": "8G"},
    },
}
CLAIMS = {  # pod -> (its template's device class, selector, memory share or None)
    "whole": ("gpu.nvidia.com", TYPES["cap-a100"]["dra"]["selectors"][0], None),
    "mig": ("mig.nvidia.com", TYPES["cap-mig"]["dra"]["selectors"][0], None),
    "share20": ("gpu.nvidia.com", TYPES["cap-h100"]["dra"]["selectors"][0], "20Gi"),
    "share30": ("gpu.nvidia.com", TYPES["cap-h100"]["dra"]["selectors"][0], "30Gi"),
    "share40": ("gpu.nvidia.com", TYPES["cap-h100"]["dra"]["selectors"][0], "40Gi"),
}
GI = 2**30


def template(name: str, device_class: str, selector: str, memory: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "selectors": [{"cel": {"expression": selector}}],
    }
    if memory:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod(name: str, **extra_meta: Any) -> dict[str, Any]:
    """A pod that claims its GPU from the template ``name``, as gpuhub's pods do."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra_meta},
        "spec": {
            "tolerations": TOLERATIONS,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook:2025-10-20",
                    "resources": {"claims": [{"name": "gpu"}]},
                    "env": extra_meta.pop("env", []),
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def claimed(module_kube: Kube) -> Kube:
    """The four claims, allocated by the scheduler and reserved for their running pods. The
    share of 20Gi is a server's of user ana (KubeSpawner's labels, gpuhub's environment)."""
    kube = module_kube
    kube.require_local("the simulated NVIDIA DRA driver")
    if not kube.list("ResourceSlice", api_version=RESOURCE, all_namespaces=True):
        pytest.skip("the cluster publishes no ResourceSlices (no DRA driver)")
    for name, (device_class, selector, memory) in CLAIMS.items():
        kube.create(template(name, device_class, selector, memory))
    server = {
        "labels": {"component": "singleuser-server", "hub.jupyter.org/username": "ana"},
        "annotations": {"hub.jupyter.org/username": "ana", "hub.jupyter.org/servername": ""},
        "env": [
            {"name": "GPUHUB_GPUS", "value": "1"},
            {"name": "GPUHUB_GPU_TYPE", "value": "cap-h100"},
            {"name": "GPUHUB_GPU_SHARE", "value": "1/4"},
            {"name": "GPUHUB_GPU_MEMORY", "value": str(20 * 2**30)},
        ],
    }
    for name in CLAIMS:
        env = server.pop("env") if name == "share20" else []
        meta = {k: v for k, v in server.items()} if name == "share20" else {}
        kube.create(pod(name, env=env, **meta))

    def all_running() -> bool:
        pods = kube.list("Pod")
        return len(pods) == len(CLAIMS) and all(p["status"].get("phase") == "Running" for p in pods)

    kube.wait_for(all_running, timeout=60)
    return kube


def said(kube: Kube) -> dict[tuple[str, str], tuple[bool, int | None, int | None]]:
    """(node, device) -> (free whole, memory free, memory in all), from the slices and the
    allocated claims as the API gives them (not gpuhub's decoders)."""
    devices: dict[tuple[str, str, str], dict[str, Any]] = {}
    for piece in kube.list("ResourceSlice", api_version=RESOURCE, all_namespaces=True):
        spec = piece["spec"]
        for device in spec.get("devices") or []:
            devices[(spec["driver"], spec["pool"]["name"], device["name"])] = {
                "node": spec.get("nodeName", ""),
                "memory": int(parse_quantity(device["capacity"]["memory"]["value"])),
                "taken": False,
                "consumed": 0,
            }
    for claim in kube.list("ResourceClaim", api_version=RESOURCE, all_namespaces=True):
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in allocation.get("devices", {}).get("results") or []:
            device = devices[(result["driver"], result["pool"], result["device"])]
            if result.get("shareID"):
                device["consumed"] += int(parse_quantity(result["consumedCapacity"]["memory"]))
            else:
                device["taken"] = True
    return {
        (d["node"], name): (
            not d["taken"] and not d["consumed"],
            0 if d["taken"] else d["memory"] - d["consumed"],
            d["memory"],
        )
        for (_, _, name), d in devices.items()
    }


def test_each_devices_figures_equal_what_slices_and_claims_say(claimed: Kube) -> None:
    from kubernetes_asyncio import client, config

    policy = Policy.from_config(gpu_types=TYPES, default_limits={"max_gpus": 4})

    async def watched() -> tuple[dict[str, Any], dict[Any, Any], Any, list[Any]]:
        api_client = await config.new_client_from_config(config_file=str(claimed.kubeconfig))
        cache = ClusterCapacity(client.CoreV1Api(api_client))
        try:
            assert await cache.wait_ready(30)
            deadline = time.monotonic() + 30
            while True:
                figures = cache.capacity(policy.gpu_types.values())
                expected = await asyncio.to_thread(said, claimed)
                # Whole GPUs by their driver's name (MIG devices: by the type's counts).
                seen = {
                    (d.node, f"gpu-{d.name.split()[1]}"): d
                    for f in figures.values()
                    for d in f.dra_devices
                    if d.name.startswith("GPU ")
                }
                if len(figures) == 3 and all(
                    (d.free, d.memory_free, d.memory_total) == expected[key]
                    for key, d in seen.items()
                ):
                    break
                assert time.monotonic() < deadline, (figures, expected)
                await asyncio.sleep(0.2)
            fit = cache.fit(policy.gpu_types["cap-h100"])
            return figures, expected, fit, cache.holdings("ana")
        finally:
            await cache.stop()
            await api_client.close()

    figures, expected, fit, held = asyncio.run(watched())
    a100, mig, h100 = figures["cap-a100"], figures["cap-mig"], figures["cap-h100"]
    # The whole claim took one of dra-a100-0's four A100s, the MIG claim one of seven
    # 1g.10gb devices (the counts also hold what other tests left); the shares (20, 30 and
    # 40Gi) two H100s wherever the scheduler put them.
    a100s = [v for k, v in expected.items() if k[0] == "dra-a100-0"]
    assert (a100.free, a100.total) == (sum(v[0] for v in a100s), 4) and a100.free <= 3
    assert mig.total == 7 and mig.free <= 6
    h100s = {k: v for k, v in expected.items() if k[0] == "dra-h100-0"}
    assert h100.memory_total == sum(v[2] for v in h100s.values())
    assert h100.memory_free is not None and h100.memory_free <= h100.memory_total - 90 * GI
    assert h100.largest_share == max(v[1] for v in h100s.values())
    assert [d.memory_free for d in h100.dra_devices] == sorted(
        (v[1] for v in h100s.values()), reverse=True
    )
    # ana's server holds its share of the device its claim was given.
    claim = next(
        c
        for c in claimed.list("ResourceClaim", api_version=RESOURCE)
        if c["metadata"]["name"].startswith("share20-")
    )
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    words = f"GPU {device.removeprefix('gpu-')}"
    (mine,) = [d for d in h100.dra_devices if d.name == words]
    assert "ana: server 'default'" in mine.holders
    assert (fit.nodes, fit.max_gpus, fit.max_device_memory) == (
        1,
        2,
        max(v[2] for v in h100s.values()),
    )
    (server,) = held
    assert (
        server.claimed == (f"{words} (H100 80GB HBM3) on dra-h100-0",) and server.memory == 20 * GI
    )


@pytest.fixture(scope="module")
def hub(claimed: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    extra = (
        f"c.GPUSpawner.gpu_types = {TYPES!r}\n"
        "c.GPUSpawner.default_limits = {'max_gpus': 4}\n"
        "from gpuhub import configure_hub\n"
        "configure_hub(c)\n"  # the holdings endpoint and the fleet page
        "c.GPUSpawner.gpu_monitor_interval = 0.5\n"
        "c.Authenticator.admin_users = {'ops'}\n"
    )
    running = start_hub(
        tmp_path_factory.mktemp("hub"),
        hub_config(claimed.namespace, extra),
        env={"KUBECONFIG": str(claimed.kubeconfig)},
    )
    try:
        yield running
    finally:
        running.stop()


def test_the_form_and_the_holdings_say_it_through_a_real_hub(hub: Hub, claimed: Kube) -> None:
    h100s = sorted(
        (
            (free, total, name)
            for (node, name), (_, free, total) in said(claimed).items()
            if node == "dra-h100-0"
        ),
        reverse=True,
    )
    session = hub.login("ana")

    def form(**query: str) -> str:
        page = session.get(f"{hub.url}/hub/spawn", params=query, timeout=30)
        page.raise_for_status()
        return page.text

    lines = [
        f"GPU {name.removeprefix('gpu-')} on node dra-h100-0: {human_memory(free)} of {human_memory(total)} free"
        for free, total, name in h100s
    ]

    def shown() -> str:
        text = form()
        return text if "; ".join(lines) in text else ""

    text = Kube.wait_for(shown, timeout=30)
    assert " of 4 free now (GPU " in text
    free, _, name = h100s[0]
    asked = form(**{"opt-gpus": "1", "opt-gpu_type": "cap-h100", "opt-gpu_memory": "60G"})
    assert (
        "No H100 shared (DRA) can hold 60 GB now; the largest free share is "
        f"{human_memory(free or 0)} on GPU {name.removeprefix('gpu-')} of dra-h100-0."
    ) in asked
    held = hub.api("GET", "/gpuhub/holdings/ana")
    assert held.status_code == 200, held.text
    (server,) = held.json()["holdings"]
    (device,) = server["device_names"]
    assert device.endswith(" (H100 80GB HBM3) on dra-h100-0")
    assert f"20 GiB of {device}" in server["text"]
    # The fleet page lists every H100 by node with its holders, escaped.
    ops = hub.login("ops")

    def fleet() -> str:
        page = ops.get(f"{hub.url}/hub/gpuhub/fleet", timeout=30)
        return page.text if page.status_code == 200 and "gpuhub-devices" in page.text else ""

    page = Kube.wait_for(fleet, timeout=30)
    assert "H100 shared (DRA): 2 devices" in page
    assert "ana: server &#39;default&#39;" in page and f"pod {claimed.namespace}/share30" in page
