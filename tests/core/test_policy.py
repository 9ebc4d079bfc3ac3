import pytest

from gpuhub.core.policy import Policy, PolicyConfigError
from tests.support.policies import DESIGN_CONFIG, design_policy


def test_design_example_loads():
    policy = design_policy()
    assert list(policy.images) == ["pytorch", "cpu"]
    assert policy.gpu_types["a100-1g"].is_mig
    assert policy.gpu_types["a100"].tolerations[0]["key"] == "nvidia.com/gpu"
    assert policy.memory.default == 8 * 10**9


def test_offers_are_the_union_of_the_groups():
    policy = design_policy()
    both = policy.limits_for(["students", "staff"])
    assert both.max_gpus == 8
    assert [t.key for t in policy.allowed_gpu_types(both)] == ["a100", "a100-1g"]
    student = policy.limits_for(["students"])
    assert student.max_gpus == 1 and [t.key for t in policy.allowed_gpu_types(student)] == [
        "a100-1g"
    ]
    assert policy.limits_for(["nobody-configured"]).groups == (policy.default_limits,)


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


def test_the_default_gpu_type_does_not_depend_on_the_configs_order():
    """Helm's toYaml and yaml.safe_dump hand maps over sorted: whatever order the admin wrote
    the types in, the form, REST, the jobs dialog, %submit and the service pick one type."""
    import itertools

    from gpuhub.core.options import parse_launch_options

    types = {
        "sim": {"display_name": "Simulated GPU"},
        "dra": {"display_name": "DRA GPU"},
        "mig": {"display_name": "MIG slice", "resource_name": "nvidia.com/mig-1g.10gb"},
    }
    limits = {"students": {"max_gpus": 1, "gpu_types": ["sim", "mig"]}}

    def picks(marked: str | None) -> set[tuple[str, str]]:
        seen = set()
        for order in itertools.permutations(types):
            config = {k: {**types[k], **({"default": True} if k == marked else {})} for k in order}
            policy = Policy.from_config(gpu_types=config, group_limits=limits)
            for groups in ([], ["students"]):
                picked = parse_launch_options({"gpus": 1}, policy, groups).gpu_type
                offered = policy.choices_for(groups).gpu_types[0].gpu_type
                assert picked == offered  # the form's and the dialog's first is the default
                seen.add((",".join(groups), picked.key))
        return seen

    # Said: that type, for everyone whose groups allow it; else the allowed key sorted first.
    assert picks("sim") == {("", "sim"), ("students", "sim")}
    assert picks("dra") == {("", "dra"), ("students", "mig")}
    # Unsaid: the key that sorts first, never the first written.
    assert picks(None) == {("", "dra"), ("students", "mig")}
    with pytest.raises(PolicyConfigError, match=r"gpu_types marks 2 entries .* \(dra, sim\)"):
        Policy.from_config(
            gpu_types={k: {**types[k], "default": k != "mig"} for k in types},
        )


# -- the group rule: one group must allow the whole request ---------------------------------
MIXED = {
    **DESIGN_CONFIG,
    "group_limits": {
        # Many small GPUs, or one big one; never many big ones (issue: 8 x a100 leaked).
        "many-small": {"max_gpus": 8, "gpu_types": ["a100-1g"]},
        "one-big": {"max_gpus": 1, "gpu_types": ["a100"], "images": ["pytorch"]},
        "cpu-only": {"max_gpus": 0, "images": ["cpu"]},
        "custom": {"max_gpus": 1, "images": ["cpu"], "custom_images": True},
    },
}


def test_group_limits_are_not_mixed_across_groups():
    from gpuhub.core.options import OptionsError, parse_launch_options

    policy = Policy.from_config(**MIXED)
    groups = ["many-small", "one-big"]
    # Each group's request on its own is fine ...
    assert parse_launch_options({"gpu_type": "a100", "gpus": 1}, policy, groups).gpus == 1
    assert parse_launch_options({"gpu_type": "a100-1g", "gpus": 1}, policy, groups).gpus == 1
    # ... but the count of one group with the type of the other is not.
    with pytest.raises(OptionsError, match="at most 1 NVIDIA A100 80GB GPU") as refused:
        parse_launch_options({"gpu_type": "a100", "gpus": 8}, policy, groups)
    assert refused.value.field == "gpus"
    # The image of one group with the GPUs of another: refused, naming the image.
    both = ["cpu-only", "one-big"]
    with pytest.raises(OptionsError, match="None of your groups allows the image") as refused:
        parse_launch_options({"image": "cpu", "gpu_type": "a100", "gpus": 1}, policy, both)
    assert refused.value.field == "image"
    assert parse_launch_options({"image": "cpu"}, policy, both).gpus == 0
    # The form's offer: per type, the largest count one group allows for that type.
    limits = policy.limits_for(groups)
    assert policy.max_gpus_for(limits, policy.gpu_types["a100"]) == 1
    assert policy.max_gpus_for(limits, policy.gpu_types["a100-1g"]) == 1  # the type's own cap


def test_custom_images_obey_image_limits():
    from gpuhub.core.options import OptionsError, parse_launch_options

    policy = Policy.from_config(**MIXED)
    pytorch_ref = policy.images["pytorch"].image
    # A group that lists images gets no custom images unless it says so ...
    with pytest.raises(OptionsError, match="not offered to you"):
        parse_launch_options({"image": "registry.example.org/me/x:1"}, policy, ["cpu-only"])
    assert (
        parse_launch_options({"image": "registry.example.org/me/x:1"}, policy, ["custom"]).image
        == "registry.example.org/me/x:1"
    )
    # ... and a configured image's full reference is that image, with its limits.
    with pytest.raises(OptionsError, match="not available to your groups"):
        parse_launch_options({"image": pytorch_ref}, policy, ["custom"])
    options = parse_launch_options({"image": pytorch_ref}, policy, ["one-big"])
    assert options.image_key == "pytorch"


_TYPES = ["a100", "a100-1g"]
_IMAGES = ["pytorch", "cpu", "registry.example.org/me/x:1"]


def _one_group_allows(policy: Policy, groups: list[str], image: str, gpu_type: str, gpus: int):
    """The rule, written out plainly from the admin's dicts: the oracle for hypothesis."""
    configured = [g for g in groups if g in policy.group_limits]
    entries = [MIXED_GROUPS[g] for g in configured] or [{"max_gpus": 1}]
    for entry in entries:
        images = entry.get("images")
        if image in policy.images:
            image_ok = images is None or image in images
        else:
            image_ok = entry.get("custom_images", images is None)
        types = entry.get("gpu_types")
        type_cap = policy.gpu_types[gpu_type].max_gpus
        gpus_ok = gpus == 0 or (
            (types is None or gpu_type in types) and gpus <= min(entry.get("max_gpus", 0), type_cap)
        )
        if image_ok and gpus_ok:
            return True
    return False


MIXED_GROUPS = {
    "many-small": {"max_gpus": 8, "gpu_types": ["a100-1g"]},
    "one-big": {"max_gpus": 2, "gpu_types": ["a100"], "images": ["pytorch"]},
    "cpu-only": {"max_gpus": 0, "images": ["cpu"]},
    "custom": {"max_gpus": 1, "images": ["cpu"], "custom_images": True},
    "staff": {"max_gpus": 4},
}


def test_group_rule_property():
    """hypothesis: a request is allowed exactly when one of the user's groups allows it."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gpuhub.core.options import OptionsError, parse_launch_options

    policy = Policy.from_config(**{**DESIGN_CONFIG, "group_limits": MIXED_GROUPS})

    @settings(max_examples=300, deadline=None)
    @given(
        groups=st.lists(st.sampled_from([*MIXED_GROUPS, "unknown"]), max_size=3),
        image=st.sampled_from(_IMAGES),
        gpu_type=st.sampled_from(_TYPES),
        gpus=st.integers(0, 9),
    )
    def check(groups, image, gpu_type, gpus):
        raw = {"image": image, "gpus": gpus, "gpu_type": gpu_type}
        try:
            parse_launch_options(raw, policy, groups)
            allowed = True
        except OptionsError:
            allowed = False
        assert allowed == _one_group_allows(policy, groups, image, gpu_type, gpus), raw

    check()


def test_choices_for_a_user_are_what_the_form_and_the_jobs_dialog_offer():
    policy = design_policy()
    both = policy.choices_for(["students", "staff"])
    assert [(c.gpu_type.key, c.max_gpus) for c in both.gpu_types] == [
        (t.key, policy.max_gpus_for(policy.limits_for(["students", "staff"]), t))
        for t in policy.allowed_gpu_types(policy.limits_for(["students", "staff"]))
    ]
    assert both.max_gpus == 8
    student = policy.choices_for(["students"])
    assert [c.gpu_type.key for c in student.gpu_types] == ["a100-1g"] and student.max_gpus == 1
    assert [i.key for i in student.images] == [
        i.key for i in policy.allowed_images(policy.limits_for(["students"]))
    ]
    assert student.cpu == policy.cpu and student.memory == policy.memory
    assert student.custom_images == (policy.custom_image_pattern is not None)


def test_a_gpu_type_must_ask_for_a_resource_gpuhub_counts_as_gpus():
    """A type asking for what the one GPU rule does not count would show 0 free and escape
    the quota; the admin learns it when the hub starts."""
    config = {**DESIGN_CONFIG, "gpu_types": {"a100": {"resource_name": "nvidia.com/hostdev"}}}
    with pytest.raises(PolicyConfigError) as refused:
        Policy.from_config(**config)
    assert str(refused.value) == (
        "gpu_types['a100'].resource_name 'nvidia.com/hostdev' is not a GPU resource gpuhub "
        "counts (amd.com/gpu, gpu.intel.com/i915, gpu.intel.com/xe, nvidia.com/gpu, "
        "nvidia.com/gpu.shared, nvidia.com/mig-<profile>); tell GPU models apart with "
        "node_selector"
    )


def test_a_custom_image_is_offered_only_where_a_group_allows_one():
    """The form and the jobs dialog offer the custom-image field only when a submit with it
    could succeed: the admin set a pattern and one of the user's groups allows custom images."""
    policy = Policy.from_config(**MIXED)
    assert policy.custom_image_pattern is not None
    assert not policy.choices_for(["cpu-only"]).custom_images  # lists images, no custom_images
    assert not policy.choices_for(["one-big", "cpu-only"]).custom_images
    assert policy.choices_for(["custom"]).custom_images  # lists images, custom_images: true
    assert policy.choices_for(["many-small"]).custom_images  # lists no images: every image
    assert policy.choices_for(["cpu-only", "custom"]).custom_images
