"""State as typed columns (restream_kit.io._columns, _arrow_stores.store_table): every value
comes back exactly, with its type, through a Parquet file."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from restream_kit.io._arrow_stores import store_from_table, store_table
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


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
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


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(uniform)
def test_uniform_columns_come_back_exactly(tmp_path, items):
    array, spec = encode_column(items)
    table = round_trip_file(tmp_path, pa.table({"v": array}))
    assert canon(decode_column(table.column("v"), spec)) == canon(items)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(hashables, nested, max_size=12))
def test_a_store_of_any_keys_and_values_comes_back_exactly(tmp_path, store):
    table = round_trip_file(tmp_path, store_table(store))
    back = store_from_table(table)
    assert canon(back) == canon(store)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.tuples(st.text(max_size=3), st.integers(-9, 9)), nested, max_size=12))
def test_tuple_keys_are_key_columns(tmp_path, store):
    table = round_trip_file(tmp_path, store_table(store))
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
    table = round_trip_file(tmp_path, store_table(store))
    assert table.schema.field("k0").type == pa.string()
    v = table.schema.field("v").type
    assert pa.types.is_struct(v)
    assert [v.field(i).type for i in range(2)] == [pa.int64(), pa.float64()]
    back = store_from_table(table)
    assert canon(back) == canon(store)
    assert math.copysign(1.0, back["c"][1]) == -1.0

    mixed = {1: 3, 2: 3.0, 3: True, 4: [1, 2], 5: (1, 2), 6: {1, 2}, 7: frozenset({1}), 8: 2**70}
    table = round_trip_file(tmp_path, store_table(mixed))
    assert table.schema.field("k0").type == pa.int64()
    assert [type(x) for x in store_from_table(table).values()] == [
        int,
        float,
        bool,
        list,
        tuple,
        set,
        frozenset,
        int,
    ]


def test_values_arrow_cannot_type_are_json_text_and_said_so():
    table = store_table({"a": {"x": 1}, "b": {"y": (1, 2)}})
    assert table.schema.field("v").type == pa.string()
    assert b'"v": {"k": "json"}' in table.schema.metadata[b"restream.columns"]
    assert store_from_table(table) == {"a": {"x": 1}, "b": {"y": (1, 2)}}


def test_a_value_nothing_can_store_is_refused():
    with pytest.raises(ValueCodecError):
        store_table({"a": object()})


# -- a recorded run: typed Parquet files, no pickle, read when used -----------------------------

RULE = """
from restream_kit import emit, on, state

seen = state.Map(default=None)     # str -> (float, int)
pairs = state.Counter()            # (str, int) -> int
tags = state.Map(default=None)     # int -> frozenset of str, or a mixed bag

@on("event")
def keep(e):
    seen[e.k] = (e.x, e.n)
    pairs[e.k, e.n] += 1


@on("event")
def keep_tags(e):
    tags[e.n] = frozenset({e.k}) if e.n % 2 else [e.k, e.x]


@on("event")
def report(e):
    if seen[e.k] is not None and tags[e.n] is not None and seen[e.k][0] > 1:
        emit("out", k=e.k, n=e.n)
"""


def recorded(tmp_path, **kw):
    import restream_kit as rk
    from restream_kit.io.catalog import Catalog

    program = rk.Program.from_source(RULE, name="cols")
    rows = [{"ts": i, "k": f"u{i % 7}", "n": i % 5, "x": i / 3} for i in range(40)]
    log = rk.Log(rows, cache=False)
    result = rk.replay(program, log, **kw)
    catalog = Catalog(tmp_path / "home", quiet=True)
    record = catalog.record(name="cols", program=program, log=log, engine="serial", result=result)
    return catalog, record, result, program, log


def test_a_run_s_state_is_typed_parquet_and_no_pickle(tmp_path):
    import json

    catalog, record, result, *_ = recorded(tmp_path)
    run_dir = Path(record.outputs)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["format"] == 2 and set(manifest["state"]) == {"seen", "pairs", "tags"}
    assert not (run_dir / "state.json").exists()
    schemas = {n: pq.read_schema(run_dir / e["file"]) for n, e in manifest["state"].items()}
    seen = schemas["seen"]
    assert seen.field("k0").type == pa.string()
    assert seen.field("v").type == pa.struct([("0", pa.float64()), ("1", pa.int64())])
    assert [schemas["pairs"].field(c).type for c in ("k0", "k1", "v")] == [
        pa.string(),
        pa.int64(),
        pa.int64(),
    ]
    tags = schemas["tags"].field("v").type  # frozensets and lists: a tag and a column each
    assert pa.types.is_struct(tags) and tags.field(0).name == "tag"
    assert manifest["state"]["tags"]["columns"]["v"]["k"] == "mixed"
    for path in run_dir.rglob("*"):
        assert path.suffix not in (".pkl", ".pickle")
        if path.is_file():
            assert path.read_bytes()[:1] != b"\x80", path  # no pickle protocol 2-5 magic
    loaded = catalog.load(record)
    assert canon({n: dict(s) for n, s in loaded.state.items()}) == canon(result.state)


def test_a_loaded_run_reads_its_state_only_when_used(tmp_path):
    from restream_kit.io._state_files import LazyStore
    from restream_kit.model.errors import StateError

    catalog, record, result, *_ = recorded(tmp_path)
    loaded = catalog.load(record)
    stores = dict(loaded.state)
    assert all(type(s) is LazyStore and not s.loaded for s in stores.values())
    # A summary says how many keys without reading them.
    assert loaded.summary()["state"] == {n: len(s) for n, s in result.state.items()}
    assert not any(s.loaded for s in stores.values())
    # Nothing was read: a file removed now is only missed when its state is used.
    stores["tags"].path.unlink()
    assert stores["seen"]["u1"] == result.state["seen"]["u1"]
    assert stores["seen"].loaded and not stores["pairs"].loaded
    with pytest.raises(StateError, match="is gone"):
        stores["tags"].get(1)


def test_a_re_replay_links_the_state_files_it_reuses(tmp_path):
    import restream_kit as rk
    from restream_kit.history.recorder import History

    catalog, record, result, program, log = recorded(tmp_path, history=True)
    edited = rk.Program.from_source(RULE.replace("[0] > 1:", "[0] > 2:"), name="v2")
    run = catalog.load(record)  # as replay(reuse="cols") loads it from the catalog
    run.history = History.read(run.path)
    # The history's reads of seen (tuples) and tags (frozensets and lists): typed columns.
    probe_types = [
        pq.read_schema(p).field("value").type
        for p in sorted(Path(record.outputs, "history", "probes").glob("*.parquet"))
    ]
    assert pa.struct([("0", pa.float64()), ("1", pa.int64())]) in probe_types
    assert any(pa.types.is_struct(t) and t.field(0).name == "tag" for t in probe_types)
    for probe in run.history.probes.values():
        assert probe.encoding.startswith("columns:") or probe.encoding in ("int64", "double")
    again = rk.replay(edited, log, reuse=run)
    assert again.reuse["rerun_stages"] == ["report"], again.reuse
    assert again.state == result.state
    record2 = catalog.record(name="v2", program=edited, log=log, engine="serial", result=again)
    one, two = Path(record.outputs), Path(record2.outputs)
    for rel in ("state/0000.parquet", "state/0001.parquet", "state/0002.parquet"):
        assert (one / rel).stat().st_ino == (two / rel).stat().st_ino, rel
    assert canon(dict(catalog.load(record2).state["seen"])) == canon(result.state["seen"])


def test_a_run_recorded_with_json_state_still_loads(tmp_path):
    """A format 1 run (state.json, before state was Parquet) reads as it did."""
    import json
    import shutil

    from restream_kit.model import values

    catalog, record, result, *_ = recorded(tmp_path)
    run_dir = Path(record.outputs)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    del manifest["state"]
    manifest["format"] = 1
    shutil.rmtree(run_dir / "state")
    (run_dir / "state.json").write_bytes(
        values.dumps({n: dict(s) for n, s in result.state.items()})
    )
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    loaded = catalog.load(record.run_id)
    assert canon(loaded.state) == canon(result.state)


def test_store_columns_for_an_engine_are_plain_or_none():
    """An engine that folds a store's columns itself takes plain ones only."""
    from restream_kit.io._arrow_stores import MIN_KEYS, store_columns

    n = MIN_KEYS
    plain = {(f"u{i}", i): i / 2 for i in range(n)}
    table, arity = store_columns(plain)
    assert arity == 2 and table.schema.types == [pa.string(), pa.int64(), pa.float64()]
    for other in ({i: 2**70 for i in range(n)}, {i: (i, i) for i in range(n)}):
        assert store_columns(other) is None
        assert store_columns(other, plain=False) is not None
