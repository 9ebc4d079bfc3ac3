"""The one validation path for user_options: every refusal names its field."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhub.core.options import (
    FIELDS,
    MAX_JSON_DEPTH,
    OptionsError,
    json_number,
    parse_launch_options,
)
from gpuhub.core.policy import Policy
from gpuhub.hub.form import options_from_formdata
from tests.support.policies import DESIGN_CONFIG, design_policy

POLICY = design_policy()


def parse(raw, groups=("staff",), **kwargs):
    return parse_launch_options(raw, POLICY, groups, **kwargs)


def test_defaults_come_from_the_admin_config():
    options = parse({})
    assert options.image == "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20"
    assert options.image_key == "pytorch"
    assert (options.cpu, options.memory, options.gpus, options.gpu_type) == (
        2.0,
        8 * 10**9,
        0,
        None,
    )
    assert options.as_user_options() == {"cpu": 2, "memory": "8G", "gpus": 0, "image": "pytorch"}


def test_form_strings_and_json_numbers_mean_the_same():
    posted = {"image": ["cpu"], "cpu": ["4"], "memory": ["16G"], "gpus": ["2"]}
    from_form = parse(options_from_formdata({**posted, "gpu_type": ["a100"]}))
    from_json = parse({"image": "cpu", "cpu": 4, "memory": "16G", "gpus": 2, "gpu_type": "a100"})
    assert from_form == from_json
    assert from_form.gpu_type is not None and from_form.gpu_type.key == "a100"


def test_gpu_type_defaults_to_the_first_allowed():
    assert parse({"gpus": 1}, groups=["students"]).gpu_type.key == "a100-1g"
    assert parse({"gpus": 1}).gpu_type.key == "a100"


def test_custom_image_must_match_the_whole_pattern():
    ok = parse({"image": "registry.example.org/team/model:v1"})
    assert ok.image == "registry.example.org/team/model:v1" and ok.image_key is None
    for bad in (
        "registry.example.org/team/model:v1; rm -rf /",
        "evil.org/registry.example.org/team/model:v1",
        "registry.example.org/team/model:v1\n",
        "registry.example.org/team/model",
    ):
        with pytest.raises(OptionsError) as info:
            parse({"image": bad})
        assert info.value.field == "image"


def test_gpus_zero_ignores_a_valid_type_but_not_an_unknown_one():
    assert parse({"gpus": 0, "gpu_type": "a100"}).gpu_type is None
    with pytest.raises(OptionsError) as info:
        parse({"gpus": 0, "gpu_type": "h100"})
    assert info.value.field == "gpu_type"


@pytest.mark.parametrize(
    ("raw", "groups", "field", "words"),
    [
        ({"cpu": 64}, ["staff"], "cpu", "CPU must be between 0.5 and 32 cores"),
        ({"cpu": "lots"}, ["staff"], "cpu", "such as 2 or 500m"),
        ({"cpu": True}, ["staff"], "cpu", "cores"),
        ({"memory": "1T"}, ["staff"], "memory", "between 1G and 256G"),
        ({"memory": "16"}, ["staff"], "memory", "did you mean 16G"),
        ({"memory": "16 GB"}, ["staff"], "memory", '(you gave "16 GB"; did you mean 16G?)'),
        ({"memory": "512 MiB"}, ["staff"], "memory", "did you mean 512Mi?"),
        ({"gpus": -1}, ["staff"], "gpus", "must be 0 or more; you gave -1"),
        ({"gpus": 1.5}, ["staff"], "gpus", "whole number"),
        (
            {"gpus": "two"},
            ["staff"],
            "gpus",
            'whole number such as 0, 1 or 2; you gave the text "two"',
        ),
        ({"gpus": 9, "gpu_type": "a100"}, ["staff"], "gpus", "at most 8"),
        ({"gpus": 2}, ["students"], "gpus", "at most 1"),
        ({"gpus": 1, "gpu_type": "a100"}, ["students"], "gpu_type", "may not use the GPU type"),
        (
            {"gpus": 1, "gpu_type": "h100"},
            ["staff"],
            "gpu_type",
            'GPU type "h100" is not one of this hub\'s',
        ),
        ({"image": "x:1; rm -rf /"}, ["staff"], "image", "not offered to you; choose"),
        ({"image": ["pytorch"]}, ["staff"], "image", "offered image"),
        ({"profile": "nope"}, ["staff"], "profile", "offered profiles"),
        ({"gpu": 1}, ["staff"], "gpu", 'Unknown option "gpu"'),
    ],
)
def test_each_refusal_is_one_sentence_naming_the_field(raw, groups, field, words):
    with pytest.raises(OptionsError) as info:
        parse(raw, groups=groups)
    assert info.value.field == field
    assert words in str(info.value)
    assert field.split("_")[0] in str(info.value).lower()
    assert str(info.value).count(". ") == 0 or str(info.value).endswith(".")


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"gpus": "2"}, "gpus", "must be a number such as 2, not text"),  # JSON text is no count
        ({"gpus": "\u00b2"}, "gpus", "whole number"),  # "²".isdigit() is true
        ({"gpus": 10**30}, "gpus", "too large"),
        ({"cpu": 1e308}, "cpu", "between"),
        ({"memory": float("inf")}, "memory", "not finite"),
        ({"image": "\ud800"}, "image", "lone surrogate"),
        ({"\udfff": 1}, "user_options", "lone surrogate"),
        ({"profile": [[[]]] * 2}, "profile", "offered profiles"),
    ],
)
def test_threat_odd_json_is_refused_naming_the_field(raw, field, words):
    with pytest.raises(OptionsError) as info:
        parse(raw)
    assert (info.value.field, words in info.value.message) == (field, True), info.value.message


def test_threat_deep_nesting_is_refused_without_recursion():
    deep: object = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(OptionsError, match=f"nested more than {MAX_JSON_DEPTH} levels"):
        parse({"image": deep})


def test_form_converts_only_ascii_digits():
    assert options_from_formdata({"gpus": ["2"]}) == {"gpus": 2}
    assert options_from_formdata({"gpus": ["\u00b2"]}) == {"gpus": "\u00b2"}  # refused later
    with pytest.raises(OptionsError, match="whole number"):
        parse(options_from_formdata({"gpus": ["\u00b2"]}))


def test_not_a_mapping():
    with pytest.raises(OptionsError) as info:
        parse_launch_options(["gpus", 1], POLICY, [])
    assert info.value.field == "user_options"


def test_group_image_limits():
    policy = Policy.from_config(
        **{**DESIGN_CONFIG, "group_limits": {"students": {"max_gpus": 1, "images": ["cpu"]}}}
    )
    assert parse_launch_options({}, policy, ["students"]).image_key == "cpu"
    with pytest.raises(OptionsError, match="not available to your groups"):
        parse_launch_options({"image": "pytorch"}, policy, ["students"])


def test_presets_fill_in_under_explicit_values():
    presets = {"small": {"gpus": 1, "gpu_type": "a100-1g", "memory": "16G"}}
    options = parse({"profile": "small", "memory": "32G"}, presets=presets)
    assert (options.gpus, options.gpu_type.key, options.memory, options.profile) == (
        1,
        "a100-1g",
        32 * 10**9,
        "small",
    )


def test_ignored_keys_are_left_to_another_layer():
    assert parse({"notebook": "a.ipynb", "gpus": 0}, ignore={"notebook"}).gpus == 0


def test_no_gpu_policy():
    policy = Policy.from_config(cpu_range={"min": 1, "max": 2, "default": 1})
    with pytest.raises(OptionsError, match="no GPUs to hand out"):
        parse_launch_options({"gpus": 1}, policy, [])


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        ["pytorch", "cpu", "a100", "a100-1g", "16G", "500m", "2", "0", "8", "1e3", "4Gi"]
    ),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
raw_options = st.dictionaries(st.sampled_from([*FIELDS, "other"]), values, max_size=7)


@settings(max_examples=400, deadline=None)
@given(raw=raw_options, groups=st.lists(st.sampled_from(["staff", "students", "x"]), max_size=2))
def test_any_input_validates_in_range_or_raises_options_error(raw, groups):
    try:
        options = parse_launch_options(raw, POLICY, groups)
    except OptionsError as exc:
        assert exc.field and str(exc)
        return
    limits = POLICY.limits_for(groups)
    assert POLICY.cpu.min <= options.cpu <= POLICY.cpu.max
    assert POLICY.memory.min <= options.memory <= POLICY.memory.max
    assert 0 <= options.gpus <= limits.max_gpus
    assert (options.gpu_type is None) == (options.gpus == 0)
    if options.gpu_type is not None:
        assert limits.allows_gpu_type(options.gpu_type.key)
        assert options.gpus <= options.gpu_type.max_gpus
    assert options.image in {i.image for i in POLICY.images.values()} or (
        POLICY.custom_image_pattern.fullmatch(options.image)
    )
    # The canonical form validates to the same thing (what the form pre-fills is valid).
    assert parse_launch_options(options.as_user_options(), POLICY, groups) == options


def test_every_problem_at_once_in_the_forms_order():
    """A request with three fields wrong hears all three (the form and the jobs dialog show
    each by its field); its one sentence is the first, in the form's order."""
    with pytest.raises(OptionsError) as info:
        parse({"gpus": "1", "memory": "16 GB", "cpu": 99}, groups=["staff"])
    assert [field for field, _ in info.value.problems] == ["cpu", "memory", "gpus"]
    assert (info.value.field, info.value.message) == info.value.problems[0]


def test_words_a_person_uses():
    """Display names, not keys alone; no "(none)" lists; what to do instead."""
    no_images = Policy.from_config(gpu_types={"gpu": {"display_name": "Simulated GPU"}})
    with pytest.raises(OptionsError) as info:
        parse_launch_options({"image": "pytorch"}, no_images)
    assert str(info.value) == (
        'This hub offers no choice of image, so leave the image out (you gave "pytorch").'
    )
    with pytest.raises(OptionsError) as info:
        parse_launch_options({"gpus": 1, "gpu_type": "a100"}, no_images)
    assert str(info.value) == (
        'GPU type "a100" is not one of this hub\'s; choose Simulated GPU ("gpu").'
    )
    assert "(none)" not in str(info.value)


HUGE = 10**400  # a valid JSON number that no float holds


@pytest.mark.parametrize("field", ["cpu", "memory", "gpus", "gpu_memory"])
def test_a_400_digit_number_is_refused_with_a_sentence_naming_its_field(field):
    with pytest.raises(OptionsError) as refused:
        parse({"gpus": 1, "gpu_type": "a100", field: HUGE})
    assert refused.value.field == field and "too large" in refused.value.message


@pytest.mark.parametrize("value", [HUGE, -HUGE, float("inf"), float("nan"), True, "5", None])
def test_json_number_takes_only_numbers_a_float_holds(value):
    assert json_number(value) is None


def test_json_number_keeps_ordinary_numbers():
    assert (json_number(5), json_number(0.5), json_number(2**63)) == (5.0, 0.5, float(2**63))
