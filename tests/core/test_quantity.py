import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuhub.core.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    human_memory,
    parse_cpu,
    parse_memory,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16G", 16 * 10**9),
        ("512Mi", 512 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("1e3", 1000),
        ("1E3", 1000),
        ("128974848", 128974848),
        ("129M", 129 * 10**6),
        ("123Mi", 123 * 2**20),
        (2**33, 2**33),
        ("  8G ", 8 * 10**9),
    ],
)
def test_memory_follows_kubernetes(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("500m", 0.5), ("2", 2.0), (1.5, 1.5), ("0.25", 0.25), (4, 4.0)]
)
def test_cpu(text, expected):
    assert parse_cpu(text) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "G",
        "16 G",
        "16g",
        "-1G",
        "1..5G",
        "16GB",
        "x:1; rm -rf /",
        True,
        None,
        [],
        {},
        float("nan"),
        float("inf"),
        "9" * 40,
    ],
)
def test_rejects_what_kubernetes_rejects(bad):
    with pytest.raises(QuantityError):
        parse_memory(bad)


def test_formatting_round_trips():
    for value in (8 * 2**30, 16 * 10**9, 512 * 2**20, 1000, 1):
        assert parse_memory(format_memory(value)) == value
    assert format_memory(8 * 2**30) == "8Gi"
    assert format_memory(16 * 10**9) == "16G"
    assert format_cpu(0.5) == "500m"
    assert format_cpu(2.0) == "2"
    assert human_memory(8 * 2**30) == "8 GiB"
    assert human_memory(16 * 10**9) == "16 GB"


@given(st.one_of(st.text(max_size=40), st.integers(), st.floats(), st.booleans(), st.none()))
def test_parse_never_raises_anything_else(value):
    try:
        result = parse_memory(value)
    except QuantityError:
        return
    assert isinstance(result, int) and result >= 0
