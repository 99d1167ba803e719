"""State as typed columns (restream_kit.io._columns, _arrow_stores.state_table): every value
comes back exactly, with its type, through a Parquet file."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from restream_kit.io._arrow_stores import state_table, store_from_table
from restream_kit.io._columns import decode_column, encode_column
from restream_kit.model.values import ValueCodecError


def canon(x):
    """``x`` as a structure equal to another's exactly when the values are the same values,
    types included (3, 3.0 and True differ; NaN equals NaN; -0.0 differs from 0.0)."""
    t = type(x)
    if t is float:
        return ("float", repr(x))
    if t in (tuple, list):
        return (t.__name__, tuple(canon(y) for y in x))
    if t in (set, frozenset):
        return (t.__name__, frozenset(canon(y) for y in x))
    if t is dict:
        return ("dict", tuple((canon(k), canon(v)) for k, v in x.items()))
    return (t.__name__, x)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.integers()  # beyond 64 bits too
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 3.0, float("nan")])
    | st.text(max_size=5)
)
hashables = st.recursive(
    scalars,
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
nested = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.tuples(inner, inner)
        | st.lists(inner, max_size=3).map(tuple)
        | st.sets(hashables, max_size=3)
        | st.frozensets(hashables, max_size=3)
        | st.dictionaries(hashables, inner, max_size=2)
    ),
    max_leaves=8,
)


def round_trip_file(tmp_path, table: pa.Table) -> pa.Table:
    path = tmp_path / "store.parquet"
    pq.write_table(table, path)
    return pq.read_table(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(nested, max_size=12))
def test_a_column_of_any_values_comes_back_exactly(tmp_path, items):
    array, spec = encode_column(items)
    table = round_trip_file(tmp_path, pa.table({"v": array}))
    assert canon(decode_column(table.column("v"), spec)) == canon(items)


# Uniform shapes as states hold them: a typed column each (and mixed ones in between).
uniform = st.one_of(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=20),
    st.lists(st.tuples(st.floats(), st.integers(-5, 5)), max_size=20),
    st.lists(st.frozensets(st.text(max_size=3), max_size=4), max_size=20),
    st.lists(st.one_of(st.integers(-3, 3), st.booleans(), st.floats(), st.none()), max_size=20),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(uniform)
def test_uniform_columns_come_back_exactly(tmp_path, items):
    array, spec = encode_column(items)
    table = round_trip_file(tmp_path, pa.table({"v": array}))
    assert canon(decode_column(table.column("v"), spec)) == canon(items)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(hashables, nested, max_size=12))
def test_a_store_of_any_keys_and_values_comes_back_exactly(tmp_path, store):
    table = round_trip_file(tmp_path, state_table(store))
    back = store_from_table(table)
    assert canon(back) == canon(store)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.tuples(st.text(max_size=3), st.integers(-9, 9)), nested, max_size=12))
def test_tuple_keys_are_key_columns(tmp_path, store):
    table = round_trip_file(tmp_path, state_table(store))
    if store:
        assert table.column_names == ["k0", "k1", "v"]
        assert table.schema.field("k0").type == pa.string()
        assert table.schema.field("k1").type == pa.int64()
    assert canon(store_from_table(table)) == canon(store)


def test_types_are_told_apart_and_columns_are_typed(tmp_path):
    store = {
        "a": (3, 2.5),
        "b": (3, float("nan")),
        "c": (-1, -0.0),
        "d": None,
    }
    table = round_trip_file(tmp_path, state_table(store))
    assert table.schema.field("k0").type == pa.string()
    v = table.schema.field("v").type
    assert pa.types.is_struct(v)
    assert [v.field(i).type for i in range(2)] == [pa.int64(), pa.float64()]
    back = store_from_table(table)
    assert canon(back) == canon(store)
    assert math.copysign(1.0, back["c"][1]) == -1.0

    mixed = {1: 3, 2: 3.0, 3: True, 4: [1, 2], 5: (1, 2), 6: {1, 2}, 7: frozenset({1}), 8: 2**70}
    table = round_trip_file(tmp_path, state_table(mixed))
    assert table.schema.field("k0").type == pa.int64()
    assert [type(x) for x in store_from_table(table).values()] == [
        int, float, bool, list, tuple, set, frozenset, int
    ]


def test_values_arrow_cannot_type_are_json_text_and_said_so():
    table = state_table({"a": {"x": 1}, "b": {"y": (1, 2)}})
    assert table.schema.field("v").type == pa.string()
    assert b'"v": {"k": "json"}' in table.schema.metadata[b"restream.columns"]
    assert store_from_table(table) == {"a": {"x": 1}, "b": {"y": (1, 2)}}


def test_a_value_nothing_can_store_is_refused():
    with pytest.raises(ValueCodecError):
        state_table({"a": object()})
