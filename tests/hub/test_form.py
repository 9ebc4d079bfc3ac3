"""The spawn form's HTML: escaping, ranges, pre-filling and reading it back."""

import html.parser
import re

import pytest

from gpuhub.core.options import OptionsError, parse_launch_options
from gpuhub.core.policy import Policy
from gpuhub.hub.form import (
    CUSTOM_IMAGE,
    Preset,
    options_from_formdata,
    options_from_querydata,
    render_form,
)
from gpuhub.hub.ledger.gpu_capacity import GPUCapacity
from tests.support.policies import DESIGN_CONFIG, design_policy

HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


class Inputs(html.parser.HTMLParser):
    """Collects form controls as a browser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[dict[str, str | None]] = []
        self.options: list[dict[str, str | None]] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        if tag == "input":
            self.inputs.append(dict(attrs))
        elif tag == "option":
            self.options.append(dict(attrs))
        elif tag == "script":
            self.scripts += 1


def parsed(text: str) -> Inputs:
    parser = Inputs()
    parser.feed(text)
    return parser


def test_hostile_admin_strings_are_escaped():
    config = {
        **DESIGN_CONFIG,
        "images": {"evil": {"display_name": HOSTILE, "image": "x/y:1", "description": HOSTILE}},
        "gpu_types": {"a100": {"display_name": HOSTILE, "description": HOSTILE, "max_gpus": 2}},
        "group_limits": {},
    }
    text = render_form(
        Policy.from_config(**config),
        [],
        {"image": '"><script>x()</script>', "memory": '"><b>'},
        presets=[Preset("p", HOSTILE, {"gpus": 1})],
        capacity_note=HOSTILE,
    )
    assert "<script>alert" not in text and "<img" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in text
    assert parsed(text).scripts == 1  # only our own progressive-enhancement script


def test_fields_carry_the_allowed_ranges():
    controls = {i["name"]: i for i in parsed(render_form(design_policy(), ["students"])).inputs}
    assert (controls["cpu"]["min"], controls["cpu"]["max"]) == ("0.5", "32")
    assert controls["gpus"]["max"] == "1"
    assert controls["gpus"]["value"] == "0"
    assert controls["memory"]["value"] == "8G"
    radios = [
        i
        for i in parsed(render_form(design_policy(), ["students"])).inputs
        if i.get("type") == "radio"
    ]
    assert [r["value"] for r in radios] == ["a100-1g"]  # students see only their type


def test_cpu_bounds_are_numbers_a_browser_understands():
    text = render_form(design_policy(), ["staff"])
    cpu = next(i for i in parsed(text).inputs if i.get("name") == "cpu")
    float(cpu["min"]), float(cpu["max"])  # type=number needs plain numbers


def test_no_gpu_user_is_told_why():
    policy = Policy.from_config(**{**DESIGN_CONFIG, "default_limits": {"max_gpus": 0}})
    text = render_form(policy, [])
    assert "Your groups may not use GPUs" in text
    assert 'name="gpu_type"' not in text


def test_previous_choices_are_prefilled():
    previous = {
        "image": "registry.example.org/a/b:1",
        "cpu": "4",
        "memory": "16G",
        "gpus": 2,
        "gpu_type": "a100-1g",
    }
    controls = parsed(render_form(design_policy(), ["staff"], previous))
    by_name = {i["name"]: i for i in controls.inputs if i.get("type") != "radio"}
    assert by_name["cpu"]["value"] == "4"
    assert by_name["memory"]["value"] == "16G"
    assert by_name["gpus"]["value"] == "2"
    assert by_name["custom_image"]["value"] == "registry.example.org/a/b:1"
    checked = [i["value"] for i in controls.inputs if i.get("type") == "radio" and "checked" in i]
    assert checked == ["a100-1g"]
    selected = [o["value"] for o in controls.options if "selected" in o]
    assert selected == [CUSTOM_IMAGE]


def test_capacity_is_drawn_and_busy_types_marked():
    text = render_form(
        design_policy(),
        ["staff"],
        capacity={
            "a100": GPUCapacity(free=0, total=8, largest_free=0),
            "a100-1g": GPUCapacity(3, 7, 2),
        },
    )
    assert "0 of 8 free now" in text and "gpuhub-busy" in text
    assert "3 of 7 free now; at most 2 together on one node" in text
    assert 'aria-label="3 of 7 free"' in text


def test_formdata_goes_through_the_same_validation():
    formdata = {
        "image": [CUSTOM_IMAGE],
        "custom_image": ["registry.example.org/a/b:1"],
        "cpu": ["4"],
        "memory": ["16G"],
        "gpus": ["1"],
        "gpu_type": ["a100"],
        "_xsrf": ["token"],
    }
    raw = options_from_formdata(formdata)
    assert raw == {
        "image": "registry.example.org/a/b:1",
        "cpu": "4",
        "memory": "16G",
        "gpus": 1,
        "gpu_type": "a100",
    }
    assert parse_launch_options(raw, design_policy(), ["staff"]).gpus == 1


def test_formdata_without_gpus_drops_the_always_posted_type():
    raw = options_from_formdata({"gpus": ["0"], "gpu_type": ["a100"], "cpu": ["1"]})
    assert "gpu_type" not in raw


def test_a_spawn_links_options_read_as_the_forms_but_keep_unknown_names():
    """/hub/spawn?opt-gpus=2&opt-gpu=1 (JupyterHub strips "opt-"): the GPU count becomes a
    number as in the form, and "gpu", no option, is kept so that the validation names it."""
    raw = options_from_querydata(
        {"gpus": ["2"], "gpu_type": ["a100"], "gpu": ["1"], "_xsrf": ["t"]}
    )
    assert raw == {"gpus": 2, "gpu_type": "a100", "gpu": "1"}
    with pytest.raises(OptionsError, match='Unknown option "gpu"'):
        parse_launch_options(raw, design_policy(), ["staff"])
    # JupyterHub 5 passes the names with their prefix: stripped here as 6 does, and as 6 does,
    # names without it are ignored once any name has it.
    assert options_from_querydata({"opt-gpus": ["1"], "gpus": ["3"]}) == {"gpus": 1}


def test_custom_image_selected_but_empty_is_refused():
    with pytest.raises(OptionsError, match="Custom image reference is empty") as refused:
        options_from_formdata({"image": [CUSTOM_IMAGE], "custom_image": [""]})
    assert refused.value.field == "custom_image"


def test_a_refused_submit_is_shown_as_typed_with_each_sentence_by_its_field():
    """The form rendered after a refusal keeps what the user typed (not the defaults) and
    puts each sentence under its field, which is marked invalid."""
    html = render_form(
        design_policy(),
        ["staff"],
        {"cpu": "99", "memory": "16 GB", "gpus": 2, "gpu_type": "a100"},
        problems=[
            ("cpu", "CPU must be between 0.5 and 32 cores (you gave 99)."),
            ("memory", 'Memory must be ... (you gave "16 GB"; did you mean 16G?).'),
        ],
    )
    assert 'value="99"' in html and 'value="16 GB"' in html and 'value="2"' in html
    assert re.search(
        r'class="form-control is-invalid" aria-invalid="true"[^>]*id="gpuhub-cpu"', html
    )
    assert (
        'id="gpuhub-memory-error" role="alert">Memory must be ... (you gave &#34;16 GB&#34;' in html
    )
    assert 'id="gpuhub-gpus-error"' not in html
    assert "pattern=" not in html  # the hub says what is wrong, not the browser


def test_form_tells_the_quota_and_caps_what_it_offers():
    from gpuhub.core.holdings import Holding
    from gpuhub.hub.form import QuotaView

    policy = design_policy()
    held = (Holding("alice", "server", "big", 3), Holding("alice", "job", "train-1", 1))
    page = render_form(policy, ["staff"], quota=QuotaView(6, held))
    assert "You hold 4 of your 6 GPUs (server &#39;big&#39;: 3, job &#39;train-1&#39;: 1)" in page
    assert "this server may have up to 2" in page
    gpus = next(i for i in parsed(page).inputs if i.get("name") == "gpus")
    assert gpus["max"] == "2"
    full = render_form(policy, ["staff"], quota=QuotaView(4, held))
    assert "stop a server or wait for a job to end" in full
    assert "gpuhub-over-quota" in full and "None left in your GPU quota" in full
    assert next(i for i in parsed(full).inputs if i.get("name") == "gpus")["max"] == "0"
