"""The one column evaluator of lowered code (``restream_kit.compiler.columns``) against Python.

Each operator is written in a handler, lowered, evaluated as columns over a small log of edge
values (None, NaN, -0.0, infinities, empty strings, integers past 32 bits from a 32-bit
column), and compared value by value, type included, with what the serial engine emits for
the same handler. The prefix path, which evaluates its epochs with it, must then agree with
the serial engine on that log too.
"""

from __future__ import annotations

import math
import time

import polars as pl
import pyarrow as pa
import pytest

import restream_kit as rk
from restream_kit.compiler.columns import ColumnEvaluator, read_column, type_class
from restream_kit.compiler.lower import Cmp, Col, Lit, ReadOf, lower
from restream_kit.engines.spark.prefix._driver import prefix_plan, run_prefix
from restream_kit.engines.spark.prefix._jobs import local_map_epochs

INF, NAN = math.inf, math.nan

LOG = pa.table(
    {
        "ts": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
        "kind": ["e"] * 6,
        "i": pa.array([0, -3, 7, 2**30, -(2**30), 1], pa.int64()),
        "j": pa.array([2**31 - 1, 1 - 2**31, 0, 5, -1, 46341], pa.int32()),
        "f": pa.array([NAN, -0.0, 1.5, INF, -INF, 0.0], pa.float64()),
        "g": pa.array([1.0, NAN, -2.5, INF, 3.0, 0.0], pa.float32()),
        "s": ["", "a", "é", "b", "ab", "B"],
        "b": pa.array([True, None, False, True, None, False], pa.bool_()),
        "c": pa.array([True, False, False, True, True, False], pa.bool_()),
        "n": pa.array([None, 1, None, 3, 4, None], pa.int64()),
    }
)

#: (field, Python expression over the event ``e``): every operator and truth rule.
CASES = [
    # event fields and constants as Python holds them
    ("col_int32", "e.j"),
    ("col_float32", "e.g"),
    ("col_none", "e.n"),
    ("col_bool_none", "e.b"),
    ("lit_bool", "True"),
    ("lit_str", "'x'"),
    # arithmetic
    ("add", "e.i + 3"),
    ("add_int32", "e.j + e.j"),
    ("mul_int32", "e.j * e.j"),
    ("sub_int_float", "e.i - e.f"),
    ("mul", "e.i * e.i"),
    ("mul_float", "e.f * 2"),
    ("sub_float", "e.f - e.f"),
    ("add_float32", "e.g + e.f"),
    ("neg_int", "-e.i"),
    ("neg_float", "-e.f"),
    ("lits", "2 * 3 - 1"),
    # comparisons, NaN included
    ("eq", "e.i == 7"),
    ("ne", "e.i != 7"),
    ("lt_int_float", "e.i < e.f"),
    ("le", "e.f <= 1.5"),
    ("gt", "e.f > 0"),
    ("ge_float32", "e.g >= e.f"),
    ("eq_nan", "e.f == e.f"),
    ("ne_nan", "e.f != e.f"),
    ("ne_nans", "e.g != e.f"),
    ("lt_str", "e.s < 'b'"),
    ("eq_str", "e.s == ''"),
    ("eq_bool", "e.c == True"),
    ("ne_bool", "e.c != False"),
    ("chain", "0 <= e.i < 10"),
    ("lit_cmp", "1 < 2"),
    # truth: not, and, or
    ("not_int", "not e.i"),
    ("not_float", "not e.f"),
    ("not_str", "not e.s"),
    ("not_bool_none", "not e.b"),
    ("not_cmp", "not e.i > 0"),
    ("not_and", "not (e.i and e.s)"),
    ("not_or", "not (e.f or e.b)"),
    ("or_nan", "not (e.f > 0 or e.g < 0)"),
]

FIELDS = ", ".join(f"{name}={source}" for name, source in CASES)
PROGRAM = f"from restream_kit import emit, on\n\n@on('e')\ndef h(e):\n    emit('out', {FIELDS})\n"


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


def _evaluator(table: pa.Table) -> ColumnEvaluator:
    frame = pl.from_arrow(table)
    return ColumnEvaluator({c: type_class(t) for c, t in frame.schema.items()}, {})


@pytest.fixture(scope="module")
def serial_and_lowered():
    program = rk.Program.from_source(PROGRAM)
    log = rk.Log(LOG)
    return rk.replay(program, log)["out"], lower(program, log.table)


@pytest.mark.parametrize("name, source", CASES, ids=[n for n, _s in CASES])
def test_each_operator_is_what_python_computes(serial_and_lowered, name, source):
    serial, low = serial_and_lowered
    x = dict(low.emits[0].fields)[name]
    got = pl.from_arrow(LOG).select(_evaluator(LOG).value(x).alias(name)).get_column(name)
    if got.len() == 1:
        got = got.extend_constant(got[0], LOG.num_rows - 1)  # a constant
    want = serial.get_column(name).to_list()
    assert all(map(_same, got.to_list(), want)), (source, got.to_list(), want)


def test_truth_is_python_bool_and_no_condition_is_true():
    frame = pl.from_arrow(LOG)
    ev = _evaluator(LOG)
    for field in ("i", "j", "f", "g", "s", "b"):
        got = frame.select(ev.truth(Col(field))).to_series().to_list()
        assert got == [bool(v) for v in LOG.column(field).to_pylist()], field
    assert frame.with_columns(t=ev.truth(None)).get_column("t").to_list() == [True] * 6


def test_reads_come_from_their_columns_with_their_types():
    frame = pl.DataFrame({"k": [1, 2, 3], read_column(4): [2.0, NAN, 0.0]})
    ev = ColumnEvaluator({"k": "int"}, {4: "float"})
    assert ev.type_of(ReadOf(4)) == "float"
    less = frame.select(ev.value(Cmp("<", Col("k"), ReadOf(4)))).to_series().to_list()
    assert less == [1 < 2.0, 2 < NAN, 3 < 0.0]
    assert frame.select(ev.truth(ReadOf(4))).to_series().to_list() == [True, True, False]
    assert ev.type_of(Lit(True)) == "bool" and ev.type_of(Lit(1)) == "int"


def _prefix_run(low, program, log, epoch):
    """The prefix path's result, its epochs mapped in this process."""
    return run_prefix(
        low,
        program,
        log,
        epoch=epoch,
        map_epochs=local_map_epochs,
        notify=lambda _e: None,
        check_cancel=lambda: None,
        started=time.perf_counter(),
    )


def test_the_prefix_path_agrees_with_serial_on_the_edge_values():
    program = rk.Program.from_source(PROGRAM)
    log = rk.Log(LOG)
    low, why = prefix_plan(program, log)
    assert low is not None, why
    for epoch in (None, 2):
        got = _prefix_run(low, program, log, epoch)
        want = rk.replay(program, log).tables["out"]
        assert got.tables["out"].schema == want.schema
        for column in want.column_names:
            rows = zip(got.tables["out"].column(column).to_pylist(), want[column].to_pylist())
            assert all(_same(g, w) for g, w in rows), (epoch, column)  # NaN is NaN


def test_the_prefix_path_reads_a_constant_key_at_every_event():
    """Keys, values and conditions all constant: every event still gets its own read."""
    program = rk.Program.from_source(
        "from restream_kit import state, on, emit\n"
        "seen = state.Counter()\n"
        "last = state.Map(default=-1)\n\n"
        "@on('e')\ndef first(e):\n"
        "    emit('out', before=seen[0], last=last[1])\n    seen[0] += 1\n    last[1] = 5\n\n"
        "@on('e')\ndef second(e):\n"
        "    emit('out', before=seen[0])\n    seen[0] += 10\n"
    )
    log = rk.Log(LOG)
    low, why = prefix_plan(program, log)
    assert low is not None, why
    want = rk.replay(program, log)
    for epoch in (None, 2):
        got = _prefix_run(low, program, log, epoch)
        assert got.tables["out"].to_pylist() == want.tables["out"].to_pylist()
        assert got.state == want.state
