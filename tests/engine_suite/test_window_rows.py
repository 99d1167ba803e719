"""Closed windows' rows held as columns (``runtime._window_rows``), session windows that close
lazily when they alone emit to their table (``runtime._sessions._lazy``), emits written out
in the serial engine's loop, and the tables built from all of them
(``engines._window_tables``): against the windows' expansion run through the general
machinery (``native_windows=False``), rows, states and the rows each epoch streams."""

from __future__ import annotations

import os
import re

import pytest
from engine_matrix import assert_same_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.compiler.compile import compile_program
from restream_kit.engines import _window_tables
from restream_kit.io.progress import EpochFinished, Recorder
from restream_kit.planner.render import plan_text
from restream_kit.runtime import SerialRuntime
from restream_kit.runtime._native_plan import only_log_events_add, sole_writer
from restream_kit.runtime.loop import compile_loop
from restream_kit.runtime.windows import Blocks, EmitRows, WindowRows, fuse_windows

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_WINDOW_PROPERTY_EXAMPLES", "40"))
HEADER = (
    "from restream_kit import emit, on, schedule, state\n"
    "from restream_kit.windows import hopping, session, sliding, tumbling\n"
    "seen = state.Counter()\n"
)
COLUMNS = ["lsn", "ts", "kind", "k", "j", "v"]


@st.composite
def programs(draw) -> str:
    """A closing window with a table, keyed by ``k``, ``(k, j)`` or a boolean, and sometimes
    what takes its lazy path away: another emitter to its table, an ``on_close`` function,
    adds from a timer's events; sometimes a timed write, a sliding window, a second
    session."""
    kind = draw(st.sampled_from(["session", "session", "tumbling", "hopping"]))
    agg = draw(st.sampled_from(["count", "sum", "mean", "min", "max", "distinct"]))
    width = draw(st.integers(1, 6))
    args = f"{width}, {draw(st.integers(1, width))}" if kind == "hopping" else f"{width}"
    key = draw(st.sampled_from(["e.k", "(e.k, e.j)", "e.k > 0"]))
    source = HEADER + f"w = {kind}({args}, {agg!r}, table='rows')\n"
    body = [f"    w.add({key}, e.v)\n"]
    if draw(st.integers(0, 3)) == 0:  # another emitter to the window's table
        body.append(
            f"    if e.v == 4:\n        emit('rows', key={key}, start=0, end=0, value=e.v)\n"
        )
    if draw(st.integers(0, 3)) == 0:
        source += "@w.on_close\ndef closed(key, start, end, value):\n    seen['c'] += 1\n"
    if draw(st.integers(0, 3)) == 0:  # a timer whose events add to the window
        body.append("    if e.v == 0:\n        schedule('tick', at=e.ts + 2, k=e.k, v=e.v)\n")
        source += f"@on('tick')\ndef tick(e):\n    w.add({key.replace('e.j', '0')}, e.v)\n"
    if draw(st.booleans()):
        body.append(f"    seen.add(e.k, 1, at=e.ts + {draw(st.integers(1, 4))})\n")
    if draw(st.booleans()):  # a sliding window: its state is settled by the last event's time
        source += f"d = sliding({draw(st.integers(1, 3))}, 'count')\n"
        body.append("    d.add(e.j)\n")
    if draw(st.booleans()):
        source += "s = session(3, 'count', table='other')\n"
        body.append("    s.add(e.j)\n")
    if draw(st.booleans()):
        body.append("    if e.v > 2:\n        emit('hot', k=e.k, v=e.v, n=seen[e.k])\n")
    return source + "@on('a')\ndef track(e):\n" + "".join(body)


logs = st.lists(
    st.fixed_dictionaries(
        {
            "dt": st.sampled_from([0, 0, 1, 2, 3, 7]),
            "kind": st.sampled_from(["a", "a", "a", "b"]),
            "k": st.integers(0, 2),
            "j": st.integers(0, 1),
            "v": st.integers(0, 4),
        }
    ),
    min_size=1,
    max_size=30,
)


def _timed(rows: list[dict]) -> list[dict]:
    t, out = 0, []
    rows[0]["kind"] = "a"
    for row in rows:
        t += row["dt"]
        out.append({"ts": t, **{k: v for k, v in row.items() if k != "dt"}})
    return out


def _streamed(program: rk.Program, log: rk.Log, **options) -> tuple[rk.Result, list[dict]]:
    """The result and what each epoch streamed (table -> rows)."""
    recorder = Recorder()
    result = rk.replay(program, log, observer=recorder, **options)
    epochs = [
        {name: table.to_pylist() for name, table in e.outputs.items()}
        for e in recorder.of(EpochFinished)
    ]
    return result, epochs


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=programs(), rows=logs, epoch=st.sampled_from([None, 3, 7]), final=st.booleans())
def test_rows_as_columns_and_lazy_sessions_equal_the_expansion(source, rows, epoch, final):
    program = rk.Program.from_source(source, name="rows")
    log = rk.Log(_timed(rows))
    try:
        want, want_epochs = _streamed(program, log, native_windows=False, epoch=epoch, final=final)
    except rk.RestreamError as exc:  # (the same error, then)
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            _streamed(program, log, epoch=epoch, final=final)
        return
    got, got_epochs = _streamed(program, log, epoch=epoch, final=final)
    assert_same_result(got, want)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert got_epochs == want_epochs


def _fused(source: str) -> tuple[rk.Program, SerialRuntime, dict]:
    program = rk.Program.from_source(HEADER + source, name="fused")
    rt = SerialRuntime()
    loop = compile_loop(program, rt, None, columns=COLUMNS, kind_order=["a"])
    fuse_windows(loop.compiled, rt, blocks=Blocks())
    loop.handlers_replaced()
    return program, rt, loop.compiled


LAZY = "w = session(3, 'sum', table='rows')\n@on('a')\ndef track(e):\n    w.add(e.k, e.v)\n"


@pytest.mark.parametrize("late", ["1.5", "True", "2**63", "None", "(1, 2)", "e.v"])
def test_a_blocks_column_taken_a_chunk_at_a_time_is_the_expansions_whatever_its_later_values(
    late, monkeypatch
):
    """The integer columns of written-out emits (keys of integers too) and of closed
    windows' rows are checked and converted a chunk of values at a time
    (``_window_tables._ints``): a value that is not an int64 integer in a later chunk than
    the first (a float, a boolean, beyond int64, None, a tuple) makes the tables the
    expansion makes, or the same error."""
    monkeypatch.setattr(_window_tables, "_CHUNK", 4)
    source = (
        HEADER + "w = sliding(3, 'count')\nc = tumbling(2, 'sum', table='closed')\n"
        "@on('a')\ndef track(e):\n    w.add(e.k)\n"
        f"    x = {late} if e.ts == 30 else e.v\n"
        "    c.add(e.k, x)\n"
        "    emit('out', k=e.k, v=x, p=(e.k, x))\n"
    )
    program = rk.Program.from_source(source, name="chunks")
    log = rk.Log([{"ts": t, "kind": "a", "k": t % 3, "v": t % 5} for t in range(40)])
    try:
        want = rk.replay(program, log, native_windows=False)
    except rk.RestreamError as exc:
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            rk.replay(program, log)
        return
    got = rk.replay(program, log)
    assert_same_result(got, want)
    for name in ("out", "closed"):
        assert got.tables[name].equals(want.tables[name]), name
    _program, _rt, compiled = _fused(source)
    assert "emit" not in compiled.run_batch.__code__.co_names


@pytest.mark.parametrize(
    "extra, lazy",
    [
        ("", True),
        ("    emit('hot', k=e.k)\n", True),
        ("    emit('rows', key=e.k, start=0, end=0, value=0)\n", False),
        ("    t = 'rows'\n    emit(t, key=e.k)\n", False),
        ("    f = emit\n", False),
        ("    if e.v:\n        schedule('a', at=e.ts + 1, k=e.k, j=0, v=0)\n", False),
        ("    schedule('tock', at=e.ts + 1)\n", True),
    ],
)
def test_a_session_closes_lazily_only_when_alone_on_its_table_and_added_to_by_log_events(
    extra, lazy
):
    program = rk.Program.from_source(HEADER + LAZY + extra, name="lazy")
    compiled = compile_program(program, SerialRuntime(), columns=COLUMNS, kind_order=["a"])
    namespace = compiled.namespace
    said = sole_writer(program, namespace, "w") and only_log_events_add(program, namespace, "w")
    assert said is lazy
    # A lazy session window queues nothing: its rows wait in it until they are asked for.
    events = [(i, t, "a", t % 2, 0, t) for i, t in enumerate(range(0, 30, 2))]
    _program, rt, compiled = _fused(LAZY + extra)
    compiled.run_batch(events)
    queued = [entry for entry in rt.scheduled if entry[2].kind == "w:close"]
    assert (not queued) is lazy
    log = rk.Log([dict(zip(("ts", "kind", "k", "j", "v"), e[1:])) for e in events])
    got = rk.replay(program, log)
    assert_same_result(got, rk.replay(program, log, native_windows=False))
    assert got.tables["rows"].num_rows > 0


def test_closing_windows_leave_their_rows_as_columns_and_share_a_table_with_emits():
    """A tumbling window's closes put one ``WindowRows`` per start in its table; a handler
    emitting to the same table puts its rows between them (as ``EmitRows``, the rows it
    made one after the other), and the table is the expansion's, row for row."""
    source = (
        "w = tumbling(4, 'distinct', table='rows')\n@on('a')\ndef track(e):\n"
        "    w.add((e.k, e.j), e.v)\n"
        "    if e.v == 3:\n        emit('rows', key=(e.k, e.j), start=-1, end=-1, value=e.v)\n"
    )
    _program, rt, compiled = _fused(source)
    events = [(i, t, "a", t % 3, t % 2, t % 4) for i, t in enumerate(range(0, 40, 3))]
    compiled.run_batch(events)
    kinds = {type(r) for r in rt.rows["rows"]}
    assert kinds == {WindowRows, EmitRows}
    program = rk.Program.from_source(HEADER + source, name="shared")
    log = rk.Log([{"ts": t, "kind": k, "k": a, "j": b, "v": c} for _i, t, k, a, b, c in events])
    got = rk.replay(program, log)
    want = rk.replay(program, log, native_windows=False)
    assert_same_result(got, want)
    assert got.tables["rows"].equals(want.tables["rows"])


def test_an_inlined_handlers_emit_is_written_out_and_closes_need_no_named_events():
    program, rt, compiled = _fused(
        "w = hopping(4, 2, 'count', table='rows')\n@on('a')\ndef track(e):\n"
        "    w.add(e.k)\n    emit('seen', k=e.k, n=seen[e.k])\n"
    )
    assert "emit" not in compiled.run_batch.__code__.co_names
    # The windows' close handler takes events of its close kind, which no log event has.
    assert not compiled.needs_named_events
    log = rk.Log([{"ts": t, "kind": "a", "k": t % 3, "j": 0, "v": 0} for t in range(25)])
    assert_same_result(rk.replay(program, log), rk.replay(program, log, native_windows=False))


def test_a_lazy_sessions_flush_moves_the_clock_a_sliding_window_is_settled_by():
    """After the log, the flush closes the lazy session at time 1: the sliding window's
    decrement due then has landed when the replay ends, as after the expansion's close."""
    source = (
        "w1 = session(1, 'count', table='w1_rows')\nw2 = sliding(1, 'count')\n"
        "@on('a')\ndef track(e):\n    w2.add(e.k, e.v)\n    w1.add(e.k, e.v)\n"
    )
    program = rk.Program.from_source(HEADER + source, name="clock")
    log = rk.Log([{"ts": 0, "kind": "a", "k": 0, "j": 0, "v": 0}])
    got = rk.replay(program, log)
    assert_same_result(got, rk.replay(program, log, native_windows=False))
    assert got.state["w2__n"] == {0: 0}


@pytest.mark.parametrize(
    "fields",
    [
        "k=e.k, v=e.v, n=w.value(e.k)",  # (int columns from blocks)
        "k=e.k, hot=e.v > 2",  # (booleans: build_table decides)
        "k=e.k, lsn=e.v",  # (a row column's name: the same error)
        "k=(e.k, e.j), v=1.5 if e.v == 3 else e.v",  # (ints and floats in one column)
        "k=(e.k,) if e.v == 3 else (e.k, e.j), v=e.v * 2**62",  # (int64 overflows)
        "k=(e.k, e.j * 2**63), v=e.v",  # (a key's integer beyond int64)
        "k=(e.k, e.j == 1), v=-e.v",  # (booleans in keys)
        "k=(), v=e.ts, w=() if e.v == 2 else (e.v,)",  # (empty keys)
    ],
)
def test_written_out_emits_leave_blocks_that_make_the_expansions_tables(fields):
    """Emits written out in the serial loop put their rows in blocks (``EmitRows``), one per
    run of rows an emit makes one after the other (and per epoch a view streams): a table
    of one emit's blocks is built from their columns; two emits to one table (and a
    window's closes there) alternate blocks. The tables, the rows each epoch streams and
    the errors are the expansion's."""
    source = (
        HEADER + "w = sliding(3, 'count')\nc = tumbling(4, 'count', table='hot')\n"
        "@on('a')\ndef track(e):\n    w.add(e.k)\n    c.add(e.k)\n"
        f"    if e.v != 1:\n        emit('out', {fields})\n        emit('hot', {fields})\n"
        "    if e.v == 2:\n        emit('hot', other=e.j)\n"
    )
    program = rk.Program.from_source(source, name="blocks")
    log = rk.Log(
        [{"ts": t // 2, "kind": "a", "k": t % 3, "j": t % 2, "v": t % 5} for t in range(40)]
    )
    try:
        want, want_epochs = _streamed(program, log, native_windows=False, epoch=7, final=True)
    except rk.RestreamError as exc:
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            _streamed(program, log, epoch=7, final=True)
        return
    got, got_epochs = _streamed(program, log, epoch=7, final=True)
    assert_same_result(got, want)
    for name in ("out", "hot"):
        assert got.tables[name].equals(want.tables[name]), name
    assert got_epochs == want_epochs
    _program, rt, compiled = _fused(source)
    assert "emit" not in compiled.run_batch.__code__.co_names


@pytest.mark.parametrize(
    "extra, lazy",
    [
        ("", True),
        ("@w.on_close\ndef closed(key, start, end, value):\n    seen['c'] += 1\n", False),
        ("@on('b')\ndef other(e):\n    emit('rows', key=e.k)\n", False),
    ],
)
def test_the_path_and_the_plan_say_whether_a_session_closes_lazily(extra, lazy):
    """``metrics.path`` and the plan say what runs: a lazy session window (no ``on_close``,
    alone on its table, added to by log events) queues nothing and makes its rows in close
    order; another one keeps one queue of open sessions; a replay that keeps every
    expansion says why."""
    program = rk.Program.from_source(HEADER + LAZY + extra, name="said")
    kinds = ["a", "a", "b"]
    log = rk.Log(
        [{"ts": t, "kind": kinds[t % 3], "k": t % 2, "j": 0, "v": t % 3} for t in range(12)]
    )
    how = rk.replay(program, log).metrics.path["window w"]
    if lazy:
        assert how.startswith("fused, lazy: a session closes at the next add past its close")
        assert "nothing queued" in how and "close order" in how
    else:
        assert how == "fused: one queue of open sessions, one queued close at a time"
    assert f"  w: {how}" in plan_text(rk.plan(program))
    kept = rk.replay(program, log, native_windows=False).metrics.path["window w"]
    assert kept == "off: native_windows=False"


def test_a_sliding_count_read_right_after_its_add_takes_the_count_the_add_made():
    """``v = w.value(k)`` right after ``w.add(k)`` (same key, read from the event) is the
    count the add wrote, and applies no decrement again; another key, another window's add
    or a statement between read as ever: the rows and state are the expansion's."""
    source = (
        HEADER + "w = sliding(3, 'count')\nu = sliding(2, 'count')\n"
        "@on('a')\ndef track(e):\n"
        "    w.add((e.k, e.j))\n    v = w.value((e.k, e.j))\n"
        "    u.add(e.k)\n    x = w.value(e.j)\n    y = u.value(e.k)\n"
        "    w.add(e.j)\n    seen['n'] += 1\n    z = w.value(e.j)\n"
        "    emit('hot', v=v, x=x, y=y, z=z)\n"
    )
    _program, _rt, compiled = _fused(source)
    code = compiled.run_batch.__code__
    program = rk.Program.from_source(source, name="fresh")
    log = rk.Log([{"ts": t // 3, "kind": "a", "k": t % 3, "j": t % 2, "v": 0} for t in range(60)])
    got, want = rk.replay(program, log), rk.replay(program, log, native_windows=False)
    assert_same_result(got, want)
    assert got.tables["hot"].equals(want.tables["hot"])
    # Written out: the first read takes the add's count (its local), the others look up.
    assert "emit" not in code.co_names and "w__value" not in code.co_names
    assert sum(name.endswith("_c") for name in code.co_varnames) >= 1


_INTS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**70), 2**70))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.lists(st.tuples(_INTS, _INTS), max_size=8),
        st.lists(st.lists(_INTS, max_size=3).map(tuple), max_size=8),
        st.lists(st.one_of(st.tuples(_INTS), st.tuples(st.booleans()), st.tuples()), max_size=6),
        st.lists(st.one_of(_INTS, st.tuples(_INTS)), max_size=6),
    )
)
def test_a_column_of_keys_is_the_one_arrow_makes_of_the_values(values):
    """A window's key column (an integer, or a tuple of them: a key of several fields) is
    made at C speed where it can be, and is then the array ``pa.array`` makes of the same
    values, type and all; where ``pa.array`` refuses the values, so does it."""
    import pyarrow as pa

    try:
        want = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            _window_tables._array(values)
        return
    got = _window_tables._array(values)
    assert got.type == want.type and got.equals(want), (got, want)
