"""GPUSpawner's pod manifests, without a cluster, each checked against the official schema."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from tornado import web

from gpuhub.hub.spawn_options import apply_gpuhub_options
from tests.support.manifests import make_spawner, manifest

pytestmark = pytest.mark.usefixtures("no_cluster")


def container(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["containers"][0]


def env(body: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(body)["env"]}


async def test_gpu_pod_gets_limit_selector_tolerations_and_shm():
    body = await manifest(
        make_spawner(["staff"]), {"gpus": 2, "gpu_type": "a100", "cpu": 4, "memory": "32G"}
    )
    resources = container(body)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "2"
    assert resources["requests"]["nvidia.com/gpu"] == "2"  # extended resources: request == limit
    assert resources["limits"]["cpu"] == resources["requests"]["cpu"] == 4.0
    assert resources["limits"]["memory"] == resources["requests"]["memory"] == 32 * 10**9
    assert body["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in body["spec"][
        "tolerations"
    ]
    shm = next(v for v in body["spec"]["volumes"] if v["name"] == "gpuhub-dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16G"}
    assert {"name": "gpuhub-dshm", "mountPath": "/dev/shm"} in container(body)["volumeMounts"]
    assert container(body)["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    assert env(body)["GPUHUB_GPUS"] == "2"
    # The lab names the GPUs it was given, driver or not (gpuhub_lab.metrics.assigned).
    assert env(body)["GPUHUB_GPU_TYPE_NAME"] == "NVIDIA A100 80GB"
    assert "NVIDIA_VISIBLE_DEVICES" not in env(body)


async def test_mig_slice_uses_its_own_resource():
    body = await manifest(make_spawner(["students"]), {"gpus": 1})
    limits = container(body)["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1"
    assert "nvidia.com/gpu" not in limits


async def test_cpu_only_pod_sees_no_gpu_even_on_a_gpu_node():
    body = await manifest(make_spawner(["staff"]), {"gpus": 0, "image": "cpu"})
    assert not any(
        k.startswith("nvidia.com/") for k in container(body)["resources"].get("limits", {})
    )
    assert env(body)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env(body)["CUDA_VISIBLE_DEVICES"] == ""
    assert not body["spec"].get("tolerations")
    assert all(v["name"] != "gpuhub-dshm" for v in body["spec"].get("volumes") or [])


async def test_respawning_does_not_pile_up_volumes_or_tolerations():
    spawner = make_spawner(["staff"], tolerations=[{"key": "site", "operator": "Exists"}])
    await manifest(spawner, {"gpus": 1, "gpu_type": "a100"})
    body = await manifest(spawner, {"gpus": 1, "gpu_type": "a100"})
    assert [t["key"] for t in body["spec"]["tolerations"]] == ["site", "nvidia.com/gpu"]
    assert [v["name"] for v in body["spec"]["volumes"]].count("gpuhub-dshm") == 1
    body = await manifest(spawner, {"gpus": 0})
    assert [t["key"] for t in body["spec"]["tolerations"]] == ["site"]


async def test_custom_image_and_admin_node_selector_are_kept():
    spawner = make_spawner(["staff"], node_selector={"pool": "jupyter"})
    body = await manifest(spawner, {"image": "registry.example.org/lab/model:v2", "gpus": 1})
    assert container(body)["image"] == "registry.example.org/lab/model:v2"
    assert body["spec"]["nodeSelector"] == {
        "pool": "jupyter",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    }


async def test_refusal_is_http_400_with_the_sentence():
    spawner = make_spawner(["students"])
    with pytest.raises(web.HTTPError) as info:
        await apply_gpuhub_options(spawner, {"gpus": 1, "gpu_type": "a100"})
    assert info.value.status_code == 400
    assert "may not use the GPU type NVIDIA A100" in info.value.log_message % info.value.args
    assert spawner.launch_options is None


async def test_profile_list_presets_and_kubespawner_overrides_still_work():
    profiles = [
        {"display_name": "Small", "slug": "small", "gpuhub": {"gpus": 1, "gpu_type": "a100-1g"}},
        {
            "display_name": "Big",
            "slug": "big",
            "gpuhub": {"gpus": 4, "gpu_type": "a100", "memory": "64G"},
            "kubespawner_override": {"extra_labels": {"tier": "big"}},
        },
    ]
    spawner = make_spawner(["staff"], profile_list=profiles)
    spawner.user_options = {"profile": "big"}
    await apply_gpuhub_options(spawner, spawner.user_options)
    await spawner.load_user_options()  # KubeSpawner applies kubespawner_override here
    pod = ApiClient().sanitize_for_serialization(await spawner.get_pod_manifest())
    assert pod["metadata"]["labels"]["tier"] == "big"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    presets = await spawner.profile_presets()
    assert [p.slug for p in presets] == ["small", "big"]
