"""Shared GPUs without a hub: the admin's ``sharing``, the user's ``gpu_memory``, how a share
counts against the quota, and what a shared pod asks Kubernetes for (docs/architecture.md,
"Shared GPUs")."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from gpuhub.core.holdings import GPUQuota, Holding, QuotaExceeded, gpus_held, quota_sentence
from gpuhub.core.options import OptionsError, parse_launch_options
from gpuhub.core.policy import Policy, PolicyConfigError
from gpuhub.hub.form import QuotaView, options_from_formdata, render_form
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from gpuhub.hub.ledger.ledger import Ledger
from gpuhub.k8s.pods import container_resources, gpu_env
from tests.support.messages import problems

G = 10**9

SHARED_TYPES = {
    "t4-shared": {
        "display_name": "T4, shared",
        "default": True,
        "resource_name": "nvidia.com/gpu",
        "sharing": {
            "memory": "16G",
            "min": "1G",
            "memory_resource": "nvidia.com/gpumem",
            "cores_resource": "nvidia.com/gpucores",
        },
    },
    "a10-ts": {
        "display_name": "A10, time-sliced",
        "resource_name": "nvidia.com/gpu.shared",
        "sharing": {"replicas": 4},
        "max_gpus": 2,
    },
    "a100": {"display_name": "NVIDIA A100 80GB", "resource_name": "nvidia.com/gpu", "max_gpus": 4},
}


def shared_policy(**extra: object) -> Policy:
    return Policy.from_config(
        gpu_types=SHARED_TYPES, default_limits={"max_gpus": 4}, **extra
    ).check_platform("kubernetes")


# -- what the admin writes --------------------------------------------------------------------
def test_the_design_examples_load_for_their_platforms() -> None:
    policy = shared_policy()
    t4 = policy.gpu_types["t4-shared"].sharing
    assert t4 is not None and t4.by_memory
    assert (t4.memory, t4.min, t4.max, t4.default) == (16 * G, G, 16 * G, G)
    assert policy.gpu_types["a10-ts"].sharing.replicas == 4
    assert policy.gpu_types["a100"].sharing is None
    workstation = Policy.from_config(
        gpu_types={
            "shared": {
                "display_name": "RTX 4090, shared",
                "devices": [3],
                "sharing": {"memory": "24G", "min": "2G"},
            }
        }
    ).check_platform("workstation")
    assert workstation.gpu_types["shared"].shares_memory


@pytest.mark.parametrize(
    ("sharing", "extra", "platform", "named"),
    [
        ({"memory": "16G", "replicas": 4}, {}, "kubernetes", "sharing needs either"),
        ({}, {}, "kubernetes", "sharing needs either"),
        ({"replicas": 1}, {}, "kubernetes", "sharing.replicas must be a whole number"),
        ({"replicas": 4, "min": "1G"}, {}, "kubernetes", "no memory isolation"),
        ({"memory": "16G", "max": "32G"}, {}, "workstation", "sharing.max (32G) is more"),
        ({"memory": "16G", "min": "8G", "default": "2G"}, {}, "workstation", "min <= default"),
        ({"memory": "lots"}, {}, "workstation", "sharing.memory:"),
        ({"memory": "16G", "size": 1}, {}, "workstation", "unknown keys"),
        ({"memory": "16G"}, {}, "kubernetes", "sharing.memory_resource is needed on Kubernetes"),
        ({"replicas": 4}, {}, "workstation", "sharing.replicas is for NVIDIA's device plugin"),
        ({"memory": "16G"}, {"max_gpus": 2}, "workstation", "max_gpus must be 1"),
        (
            {"memory": "16G", "memory_resource": "nvidia.com/gpu"},
            {},
            "kubernetes",
            "not a GPU resource",
        ),
        ({"memory": "16G"}, {"resource_name": "nvidia.com/mig-1g.10gb"}, "workstation", "MIG"),
    ],
)
def test_admin_mistakes_in_sharing_name_the_setting(
    sharing: dict, extra: dict, platform: str, named: str
) -> None:
    config = {"gpu_types": {"t4": {"display_name": "T4", "sharing": sharing, **extra}}}
    with pytest.raises(PolicyConfigError) as refused:
        Policy.from_config(**config).check_platform(platform)  # type: ignore[arg-type]
    assert "gpu_types['t4']" in str(refused.value)
    assert named in str(refused.value)


# -- what the user asks -----------------------------------------------------------------------
def ask(raw: dict, policy: Policy | None = None):
    return parse_launch_options(raw, policy or shared_policy())


def test_gpu_memory_asks_for_one_device_of_a_type_shared_by_memory() -> None:
    options = ask({"gpu_type": "t4-shared", "gpu_memory": "8G"})
    assert (options.gpus, options.gpu_memory, options.share) == (1, 8 * G, Fraction(1, 2))
    assert options.as_user_options()["gpu_memory"] == "8G"
    assert ask(options.as_user_options()) == options  # what the hub stores reads back the same
    # No gpu_memory on a type shared by memory: its default share.
    assert ask({"gpu_type": "t4-shared", "gpus": 1}).gpu_memory == G
    # Time-sliced: whole replicas, each a quarter of a GPU.
    sliced = ask({"gpu_type": "a10-ts", "gpus": 2})
    assert (sliced.gpu_memory, sliced.share, sliced.gpu_amount) == (None, Fraction(1, 2), 0.5)
    assert ask({"gpu_type": "a100", "gpus": 2}).share is None


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"gpu_type": "t4-shared", "gpu_memory": "512M"}, ") must be 1G to 16G of one T4, shared"),
        (
            {"gpu_type": "t4-shared", "gpu_memory": "32G"},
            "of 32G is more than one T4, shared has (16G)",
        ),
        ({"gpu_type": "t4-shared", "gpu_memory": "8 GB"}, "did you mean 8G?"),
        ({"gpu_type": "t4-shared", "gpu_memory": 8}, "must be 1G to 16G"),
        ({"gpu_type": "a100", "gpus": 1, "gpu_memory": "8G"}, "gives whole GPUs"),
        ({"gpu_type": "a10-ts", "gpus": 1, "gpu_memory": "8G"}, "no memory isolation"),
        ({"gpu_type": "t4-shared", "gpus": 2, "gpu_memory": "8G"}, "part of one GPU"),
        ({"gpu_type": "t4-shared", "gpus": 2}, "part of one GPU"),
        ({"gpus": 0, "gpu_memory": "8G"}, "asks for no GPU"),
    ],
)
def test_a_refused_share_is_one_sentence_naming_gpu_memory(raw: dict, says: str) -> None:
    with pytest.raises(OptionsError) as refused:
        ask(raw)
    assert refused.value.field == "gpu_memory"
    assert says in refused.value.message
    assert [field for field, _ in refused.value.problems] == ["gpu_memory"]
    assert problems(refused.value.message) == []
    assert 'GPU memory ("gpu_memory")' in refused.value.message


def test_gpu_memory_is_refused_by_a_group_limit_like_any_gpu() -> None:
    policy = shared_policy(
        group_limits={"students": {"max_gpus": 1, "gpu_types": ["t4-shared"]}},
    )
    assert parse_launch_options({"gpu_memory": "4G"}, policy, ["students"]).share == Fraction(1, 4)
    with pytest.raises(OptionsError) as refused:
        parse_launch_options({"gpu_type": "a100", "gpus": 1}, policy, ["students"])
    assert refused.value.field == "gpu_type"


def test_the_form_posts_gpu_memory_only_with_a_gpu() -> None:
    with_gpu = options_from_formdata(
        {"gpus": ["1"], "gpu_type": ["t4-shared"], "gpu_memory": ["8G"]}
    )
    assert with_gpu == {"gpus": 1, "gpu_type": "t4-shared", "gpu_memory": "8G"}
    assert options_from_formdata(
        {"gpus": ["0"], "gpu_type": ["t4-shared"], "gpu_memory": ["8G"]}
    ) == {"gpus": 0}


# -- counting: a share is its fraction of a GPU -----------------------------------------------
def share(user: str, name: str, part: Fraction, memory: int = 0, devices=()) -> Holding:
    return Holding(user, "server", name, 1, "T4, shared", tuple(devices), share=part, memory=memory)


def test_shares_count_as_their_fraction_and_a_device_at_most_once() -> None:
    halves = [share("a", "x", Fraction(1, 2), 8 * G), share("a", "y", Fraction(1, 2), 8 * G)]
    assert gpus_held(halves) == 1
    thirds = [share("a", str(n), Fraction(1, 3)) for n in range(3)]
    assert gpus_held(thirds) == 1  # exactly: 1/3 + 1/3 + 1/3 is one GPU, not 0.999...
    # A user's shares of one workstation device never count above the device.
    on_one = [share("a", str(n), Fraction(2, 3), devices=[3]) for n in range(2)]
    assert gpus_held(on_one) == 1
    whole = Holding("a", "server", "big", 2)
    assert gpus_held([whole, *halves]) == 3


def test_the_quota_counts_shares_and_says_what_is_held_where() -> None:
    held = [share("a", "x", Fraction(1, 2), 8 * G)]
    assert quota_sentence(held, 1, Fraction(1, 2)) is None
    refused = quota_sentence(held, 1, Fraction(3, 4))
    assert refused == (
        "You hold 0.5 of your quota of 1 GPU (server 'x': 0.5 (8 GB)) and this server needs "
        "0.75 more; stop a server or wait for a job to end."
    )
    assert "more than your quota of 0.5 GPU" in quota_sentence([], Fraction(1, 2), 1)


def test_a_quota_may_be_a_fraction_of_a_gpu() -> None:
    quota = GPUQuota.from_config({"default": 0.5, "groups": {"staff": 2, "ta": 0.3}})
    assert quota.limit_for([]) == Fraction(1, 2)
    assert quota.limit_for(["ta"]) == Fraction(3, 10)  # as written, not the float near it
    assert quota.limit_for(["staff", "ta"]) == 2
    with pytest.raises(PolicyConfigError, match=r"gpu_quota\.default must be a GPU count"):
        GPUQuota.from_config({"default": -0.5})


class Source:
    def __init__(self, held: list[Holding]) -> None:
        self.held = held

    def holdings(self, user: str | None = None) -> list[Holding]:
        return [h for h in self.held if user is None or h.user == user]


def test_the_ledger_checks_shares_against_the_quota() -> None:
    ledger = Ledger(Source([share("bob", "", Fraction(1, 2), 8 * G)]))
    ledger.check("bob", 1, Fraction(1, 2))
    with pytest.raises(QuotaExceeded) as refused:
        ledger.check("bob", 1, Fraction(9, 16))
    assert "You hold 0.5 of your quota of 1 GPU" in refused.value.message
    # Starting the same server again replaces what it holds.
    ledger.check("bob", 1, 1, replacing=("server", ""))


def test_the_form_offers_what_the_quota_leaves_of_a_shared_type() -> None:
    policy = shared_policy()
    held = (share("bob", "x", Fraction(3, 4), 12 * G),)
    page = render_form(policy, [], quota=QuotaView(1, held))
    assert "You hold 0.75 of your 1 GPU (server &#39;x&#39;: 0.75 (12 GB))" in page
    assert "Up to 4G of one GPU per server" in page  # a quarter of a 16G GPU
    assert "Up to 1 share per server" in page  # a quarter of a GPU is one time-sliced replica
    assert "None left in your GPU quota" in page  # no whole A100 fits in 0.25


def test_the_form_says_memory_free_on_each_gpu_one_figure_per_fact() -> None:
    policy = Policy.from_config(
        gpu_types={"shared": {"display_name": "RTX 4090, shared", "sharing": {"memory": "16G"}}},
        default_limits={"max_gpus": 1},
    )
    capacity = GPUCapacity(
        free=2,
        total=2,
        devices=2,
        memory_free=25 * G,
        memory_total=32 * G,
        largest_share=16 * G,
        per_device=((3, 9 * G, 16 * G), (4, 16 * G, 16 * G)),
    )
    page = render_form(policy, [], capacity={"shared": capacity})
    assert "9 GB of 16 GB free on GPU 3; 16 GB of 16 GB free on GPU 4" in page
    assert "Shared GPU" in page
    # As served with 0 GPUs asked for, the share applies to nothing: hidden, off, empty
    # (the script fills the type's default when GPUs are asked for).
    field = re.search(r'<input [^>]*name="gpu_memory"[^>]*>', page)
    assert field is not None and "disabled" in field.group(0) and 'value=""' in field.group(0)
    # Asking for 1 GPU of it, the form as served carries the type's default share.
    asked = render_form(
        policy, [], {"gpus": 1, "gpu_type": "shared"}, capacity={"shared": capacity}
    )
    field = re.search(r'<input [^>]*name="gpu_memory"[^>]*>', asked)
    assert field is not None and "disabled" not in field.group(0)
    assert 'value="1G"' in field.group(0)  # the type's default share


# -- Kubernetes: what a shared pod asks for ---------------------------------------------------
def test_a_hami_share_asks_for_one_device_its_memory_in_mib_and_cores() -> None:
    options = ask({"gpu_type": "t4-shared", "gpu_memory": "8G"})
    resources = container_resources(options)
    assert resources["limits"] == resources["requests"]
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert resources["limits"]["nvidia.com/gpumem"] == "7630"  # 8e9 bytes, rounded up to MiB
    assert resources["limits"]["nvidia.com/gpucores"] == "50"  # the same half of its compute
    env = gpu_env(options)
    assert env["GPUHUB_GPU_SHARE"] == "1/2" and env["GPUHUB_GPU_MEMORY"] == str(8 * G)


def test_a_time_sliced_request_asks_for_whole_replicas() -> None:
    options = ask({"gpu_type": "a10-ts", "gpus": 2})
    assert container_resources(options)["limits"]["nvidia.com/gpu.shared"] == "2"
    assert "nvidia.com/gpumem" not in container_resources(options)["limits"]
    env = gpu_env(options)
    assert env["GPUHUB_GPU_SHARE"] == "1/2" and "GPUHUB_GPU_MEMORY" not in env
    assert "GPUHUB_GPU_SHARE" not in gpu_env(ask({"gpu_type": "a100", "gpus": 1}))
