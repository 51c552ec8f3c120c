"""The checks of a tenant's values (nesting, text no store can hold) and the codec answer
the same by their fast path (the C JSON encoder) as by walking the value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from waypost.errors import PayloadError
from waypost.model.codec import JsonCodec, _to_json
from waypost.model.definitions.format import (
    MAX_NESTING,
    Problem,
    join_path,
    nesting_problem,
    text_problem,
    unstorable_problem,
)

texts = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udc00", "\\u0000", '"\\', '\\"[', "{]"]),
)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=30,
)


def walked_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((walked_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((walked_depth(v) for v in value), default=0)
    return 0


def walked_unstorable(value: Any, path: str = "") -> Problem | None:
    if isinstance(value, str):
        said = text_problem(value)
        return Problem(path, said) if said else None
    if isinstance(value, dict):
        for key, child in value.items():
            if (said := text_problem(key)) is not None:
                return Problem(path, f"has a key that {said}")
            if (found := walked_unstorable(child, join_path(path, key))) is not None:
                return found
    if isinstance(value, list):
        for i, child in enumerate(value):
            if (found := walked_unstorable(child, join_path(path, i))) is not None:
                return found
    return None


def nest(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


@given(values)
def test_unstorable_text_is_found_whatever_the_value(value: Any) -> None:
    assert (unstorable_problem(value) is None) == (walked_unstorable(value) is None)


@given(values, st.integers(min_value=0, max_value=MAX_NESTING + 3))
def test_nesting_is_measured_whatever_the_value(value: Any, levels: int) -> None:
    deep = nest(levels, value)
    assert (nesting_problem(deep) is None) == (walked_depth(deep) <= MAX_NESTING)


def test_the_limit_exactly_and_one_past_it() -> None:
    assert nesting_problem(nest(MAX_NESTING)) is None
    found = nesting_problem(nest(MAX_NESTING + 1), "input")
    assert found is not None and found.path.startswith("input")
    assert nesting_problem([[]] * 10_000) is None  # wide, not deep


python_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
    ),
    max_leaves=20,
)


@given(python_values)
def test_the_codec_encodes_by_its_fast_path_as_by_its_walk(value: Any) -> None:
    codec = JsonCodec()
    try:
        walked: Any = _to_json(value, "value")
    except PayloadError:
        with pytest.raises(PayloadError):
            codec.encode(value)
        return
    encoded = codec.encode(value)
    assert encoded == walked
    assert json.dumps(encoded) == json.dumps(walked)  # lists, not tuples; the same keys
