import pytest

from gpuhub.policy import Policy, PolicyConfigError

from .policies import DESIGN_CONFIG, design_policy


def test_design_example_loads():
    policy = design_policy()
    assert list(policy.images) == ["pytorch", "cpu"]
    assert policy.gpu_types["a100-1g"].is_mig
    assert policy.gpu_types["a100"].tolerations[0]["key"] == "nvidia.com/gpu"
    assert policy.memory.default == 8 * 10**9


def test_most_permissive_group_wins():
    policy = design_policy()
    both = policy.limits_for(["students", "staff"])
    assert both.max_gpus == 8
    assert both.gpu_types is None  # staff has no type restriction
    student = policy.limits_for(["students"])
    assert student.max_gpus == 1 and student.gpu_types == frozenset({"a100-1g"})
    assert policy.limits_for(["nobody-configured"]) == policy.default_limits


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"gpu_types": {"a100": {"max_gpus": 0}}}, "gpu_types['a100'].max_gpus"),
        ({"gpu_types": {"a100": {"resource_name": "nvidia.com/gpu; rm"}}}, "resource_name"),
        ({"gpu_types": {"a100": {"max_gpu": 2}}}, "unknown keys"),
        ({"cpu_range": {"min": 4, "max": 2}}, "cpu_range"),
        ({"memory_range": {"min": "lots"}}, "memory_range"),
        (
            {"group_limits": {"students": {"gpu_types": ["v100"]}}},
            "group_limits['students'].gpu_types",
        ),
        ({"custom_image_pattern": "("}, "custom_image_pattern"),
        ({"images": {"bad key!": "x"}}, "images"),
    ],
)
def test_admin_mistakes_name_the_setting(override, named):
    config = {**DESIGN_CONFIG, **override}
    with pytest.raises(PolicyConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
        Policy.from_config(**config)


def test_explicit_default_beats_order():
    """Helm hands maps over sorted by key, so order alone cannot choose the default."""
    config = {
        **DESIGN_CONFIG,
        "images": {
            "a-cpu": {"image": "scipy:1"},
            "b-pytorch": {"image": "pytorch:1", "default": True},
        },
        "gpu_types": {
            **DESIGN_CONFIG["gpu_types"],
            "a100-1g": {"resource_name": "nvidia.com/mig-1g.10gb", "default": True},
        },
    }
    policy = Policy.from_config(**config)
    limits = policy.limits_for(["staff"])
    assert [i.key for i in policy.allowed_images(limits)] == ["b-pytorch", "a-cpu"]
    assert policy.default_image.key == "b-pytorch"
    assert [t.key for t in policy.allowed_gpu_types(limits)] == ["a100-1g", "a100"]
    with pytest.raises(PolicyConfigError, match=r"images\['a-cpu'\].default must be true or false"):
        Policy.from_config(images={"a-cpu": {"image": "x", "default": "yes"}})
