"""Big state stores and an epoch's rows in checkpoints as Arrow tables: read back equal,
Python types included.

A store of plain keys and values (``str``, ``int``, ``float``, ``bool``, ``None``; tuple keys
of those) goes to an Arrow file of its columns; anything else stays in the JSON document.
Either way ``load_value`` must give back a dict equal to the one saved, with every key and
value of the same type (``1``, ``1.0`` and ``True`` are equal in Python, so equality alone
would not catch an int read back as a float).
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from restream_kit.io import checkpoint
from restream_kit.io._arrow_stores import (
    MIN_KEYS,
    rows_columns,
    rows_from_table,
    store_columns,
    store_from_table,
)

SCALARS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    st.none(),
)


def typed(value):
    """``value`` with the type of every part, so that 1, 1.0 and True differ."""
    if type(value) is tuple:
        return ("tuple", tuple(typed(v) for v in value))
    if type(value) is float and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def typed_store(store):
    return [(typed(k), typed(v)) for k, v in store.items()]


def round_trip(tmp_path, stores):
    state = {"stores": stores, "order": 0}
    tmp_path.mkdir(exist_ok=True)
    for old in tmp_path.iterdir():
        old.unlink()
    checkpoint.save_value(tmp_path, "state", state, "the state")
    return checkpoint.load_value(tmp_path, "state")["stores"]


def column_store(keys, values, n=MIN_KEYS):
    """A store of ``n`` keys built from the drawn ones, big enough for an Arrow file."""
    out = {}
    for i in range(n):
        key = keys(i)
        out[key] = values[i % len(values)]
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["int", "str", "float", "bool_int_tuple", "str_int_tuple"]),
    values=st.lists(SCALARS, min_size=1, max_size=5),
    odd=st.one_of(st.none(), st.tuples(st.integers(0, MIN_KEYS - 1), SCALARS)),
)
def test_stores_read_back_with_the_same_types(tmp_path, kind, values, odd):
    keys = {
        "int": lambda i: i - 7,
        "str": lambda i: f"k{i}",
        "float": lambda i: i / 4,
        "bool_int_tuple": lambda i: (i % 2 == 0, i),
        "str_int_tuple": lambda i: (f"u{i % 13}", i),
    }[kind]
    store = column_store(keys, values)
    if odd is not None:  # one value of another type: the store may have to stay JSON
        store[keys(odd[0])] = odd[1]
    back = round_trip(tmp_path, {"s": store, "small": {("a", 1): 2.5, "b": None}})
    assert typed_store(back["s"]) == typed_store(store)
    assert typed_store(back["small"]) == typed_store({("a", 1): 2.5, "b": None})


def test_every_big_store_goes_to_a_typed_parquet_file_and_small_ones_stay_json(tmp_path):
    n = MIN_KEYS
    plain = {(f"u{i}", i): i % 3 == 0 for i in range(n)}
    mixed = {i: (1 if i % 2 else 1.0) for i in range(n)}  # ints and floats: a column each
    huge = {i: 2**70 for i in range(n)}  # beyond int64: a JSON column
    ragged = {(i,) * (1 + i % 2): i for i in range(n)}
    nested = {i: [i] for i in range(n)}
    small = {"a": 1}
    stores = {
        "plain": plain,
        "mixed": mixed,
        "huge": huge,
        "ragged": ragged,
        "nested": nested,
        "small": small,
    }
    back = round_trip(tmp_path, stores)
    for name, store in stores.items():
        assert typed_store(back[name]) == typed_store(store), name
    files = sorted(p.name for p in tmp_path.glob("state-*"))
    assert files == [f"state-{i}.parquet" for i in range(5)]
    assert not list(tmp_path.glob("*.pickle"))
    types = {
        name: pq.read_schema(tmp_path / f"state-{i}.parquet").field("v").type
        for i, name in enumerate(["plain", "mixed", "huge", "ragged", "nested"])
    }
    assert types["plain"] == pa.bool_() and types["huge"] == pa.string()
    assert pa.types.is_struct(types["mixed"]) and pa.types.is_large_list(types["nested"])
    document = json.loads((tmp_path / "state.json").read_text())
    assert document[:2] == ["d", "stores"] and ["store", ["state-0.parquet", 2]] in document[2]


def test_store_columns_keep_nulls_nan_and_signed_zero():
    store = {i: v for i, v in enumerate([None, float("nan"), -0.0, 1.5] * (MIN_KEYS // 4))}
    table, arity = store_columns(store)
    assert arity is None and table.schema.field("v").type == pa.float64()
    back = store_from_table(table, arity)
    assert typed_store(back) == typed_store(store)
    assert math.copysign(1, back[2]) == -1


def test_a_table_that_is_not_what_its_tag_says_is_refused_in_one_line(tmp_path):
    """Someone else's table under the name of a store's, timed writes' or rows' file."""
    n = MIN_KEYS
    for stem, value in [
        ("state", {"stores": {"s": dict.fromkeys(range(n), 1)}}),
        ("state", {"stores": {}, "future": [(i, i, "s", "add", f"k{i}", 1) for i in range(n)]}),
        ("rows", {"out": [(i, i, "h", 0, {"a": i}) for i in range(n)]}),
    ]:
        for old in tmp_path.iterdir():
            old.unlink()
        checkpoint.save_value(tmp_path, stem, value, stem)
        (name,) = [p.name for p in tmp_path.glob(f"{stem}-0.*")]
        table = pa.table({"x": [[1]]})  # a list column: none of theirs
        if name.endswith(".parquet"):
            pq.write_table(table, tmp_path / name)
        else:
            with pa.OSFile(str(tmp_path / name), "wb") as sink:
                with pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
        with pytest.raises(checkpoint.CheckpointError, match=name):
            checkpoint.load_value(tmp_path, stem)


def test_many_timed_writes_go_to_an_arrow_file_and_read_back_the_same(tmp_path):
    """Timed writes waiting (``(at, n, state, op, key, arg)``) of plain keys and arguments,
    tuple keys and deletes included; a merge function keeps them JSON."""
    n = MIN_KEYS
    future = [
        (1000 + i // 3, i, "s", "del" if i % 5 == 0 else "add", (f"u{i % 7}", i), None if i % 5 == 0 else -1)
        for i in range(n)
    ]  # fmt: skip
    state = {"stores": {}, "future": future, "order": n}
    checkpoint.save_value(tmp_path, "state", state, "the state")
    assert sorted(p.name for p in tmp_path.glob("state-*.arrow")) == ["state-0.arrow"]
    back = checkpoint.load_value(tmp_path, "state")["future"]
    assert [tuple(map(typed, w)) for w in back] == [tuple(map(typed, w)) for w in future]
    mixed = [(1, i, "s", "add", i, 1 if i % 2 else 1.5) for i in range(n)]  # ints and floats
    for old in tmp_path.iterdir():
        old.unlink()
    checkpoint.save_value(tmp_path, "state", {"future": mixed}, "the state")
    assert not list(tmp_path.glob("state-*.arrow"))
    back = checkpoint.load_value(tmp_path, "state")["future"]
    assert [tuple(map(typed, w)) for w in back] == [tuple(map(typed, w)) for w in mixed]


def typed_rows(rows):
    return [(*map(typed, r[:4]), [(k, typed(v)) for k, v in r[4].items()]) for r in rows]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(SCALARS, min_size=1, max_size=5), odd=st.one_of(st.none(), SCALARS))
def test_an_epochs_rows_read_back_with_the_same_types(tmp_path, values, odd):
    """Rows of one table with the same fields: an Arrow file when every column holds one
    type; read back equal either way, types and field order included."""
    rows = [
        (i, 1000 + i, "h0" if i % 3 else "h1", i % 2, {"who": f"u{i % 7}", "x": values[i % len(values)]})
        for i in range(MIN_KEYS)
    ]  # fmt: skip
    if odd is not None:  # one value of another type: the table may have to stay JSON
        rows[5] = (*rows[5][:4], {"who": "u5", "x": odd})
    few = [(1, 2, "h", 0, {"a": 1.5})]
    epoch = {"out": rows, "few": few, "none": []}
    tmp_path.mkdir(exist_ok=True)
    for old in tmp_path.iterdir():
        old.unlink()
    checkpoint.save_value(tmp_path, "rows", epoch, "the output rows")
    back = checkpoint.load_value(tmp_path, "rows")
    assert list(back) == list(epoch)
    for name in epoch:
        assert typed_rows(back[name]) == typed_rows(epoch[name]), name


def test_rows_of_one_shape_go_to_an_arrow_file_and_others_stay_json(tmp_path):
    n = MIN_KEYS
    plain = [(i, i, "h", 0, {"a": i, "b": None, "c": -0.0}) for i in range(n)]
    ragged = [(i, i, "h", 0, {"a": i} if i % 2 else {"b": i}) for i in range(n)]
    mixed = [(i, i, "h", 0, {"a": 1 if i % 2 else 1.0}) for i in range(n)]
    epoch = {"plain": plain, "ragged": ragged, "mixed": mixed}
    checkpoint.save_value(tmp_path, "rows", epoch, "the output rows")
    assert sorted(p.name for p in tmp_path.glob("rows-*.arrow")) == ["rows-0.arrow"]
    back = checkpoint.load_value(tmp_path, "rows")
    for name, rows in epoch.items():
        assert typed_rows(back[name]) == typed_rows(rows), name
    assert math.copysign(1, back["plain"][0][4]["c"]) == -1
    assert rows_from_table(rows_columns(plain)) == plain


def test_a_checkpoint_written_with_arrow_store_files_still_resumes(tmp_path):
    """Before stores were Parquet they were Arrow IPC files: such a commit still reads."""
    store = {(f"u{i}", i): i * 0.5 for i in range(MIN_KEYS)}
    checkpoint.save_value(tmp_path, "state", {"stores": {"s": store}}, "the state")
    table = pq.read_table(tmp_path / "state-0.parquet")
    table = table.replace_schema_metadata(None)  # the old files had no column specs
    with pa.OSFile(str(tmp_path / "state-0.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    (tmp_path / "state-0.parquet").unlink()
    document = (tmp_path / "state.json").read_text().replace("state-0.parquet", "state-0.arrow")
    (tmp_path / "state.json").write_text(document)
    back = checkpoint.load_value(tmp_path, "state")["stores"]["s"]
    assert typed_store(back) == typed_store(store)
