"""``on_close`` functions written out in the closes of native windows
(``compiler.inline_closes``, ``runtime._close_frames``): against the windows' expansion run
through the general machinery (``native_windows=False``), rows, their order, the final state
and the first error, over generated ``on_close`` bodies (early returns, locals, loops with
``break``, emits that fail midway, dynamic tables, adds to another window, timers, timed
writes) and logs with ties, gaps and events queued between the closes of one time; and a
sliding distinct's ``add`` and ``value`` written out in the replay's loop."""

from __future__ import annotations

import ast
import os
import textwrap

import pytest
from engine_matrix import assert_same_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.compiler.compile import compile_program
from restream_kit.compiler.inline_closes import _quiet
from restream_kit.runtime import SerialRuntime
from restream_kit.runtime.windows import fuse_windows

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

COLUMNS = ["lsn", "ts", "kind", "k", "j", "v"]
EXAMPLES = int(os.environ.get("RESTREAM_WINDOW_PROPERTY_EXAMPLES", "40"))
HEADER = (
    "from restream_kit import emit, on, schedule, state\n"
    "from restream_kit.windows import hopping, session, sliding, tumbling\n"
    "seen = state.Counter()\n"
    "other = tumbling(3, 'count', table='other')\n"
)

#: Statements an ``on_close`` body is drawn from (``key, start, end, value`` its parameters).
STATEMENTS = [
    "seen[key] += 1",
    "emit('closed', key=key, start=start, end=end, value=value, n=seen[key])",
    "emit('closed', key=key, start=start, end=end, value=value, n=0)",
    "emit('alerts', key=key, value=value)",
    "x = value * 2\nemit('alerts', key=key, value=x)",
    "if value > 1:\n    return",
    "for i in range(3):\n    if i == value:\n        break\n    seen['loop'] += i",
    "try:\n    emit('alerts', key=key, value=10 // (value - 1))\nexcept ZeroDivisionError:\n"
    "    seen['zero'] += 1",
    "emit('alerts' if value > 1 else 'closed', key=key, value=value)",
    "other.add(key, ts=end)",
    "schedule('tick', at=end + 1, k=1)",
    "seen.add('late', 1, at=end + 2)",
    "emit('alerts', key=key, value=seen['late'])",
    "if value > 2:\n    emit('alerts', key=key, value=1 // 0)",
]


@st.composite
def programs(draw) -> str:
    """A closing window (by ``k`` or ``(k, j)``) with one or two ``on_close`` functions of
    drawn statements, sometimes a table of its own, a timer and a listener on the timer."""
    kind = draw(st.sampled_from(["tumbling", "hopping", "session"]))
    agg = draw(st.sampled_from(["count", "sum", "mean", "min", "max", "distinct"]))
    width = draw(st.integers(1, 6))
    args = f"{width}, {draw(st.integers(1, width))}" if kind == "hopping" else f"{width}"
    table = draw(st.sampled_from([", table='rows'", ""]))
    key = draw(st.sampled_from(["e.k", "(e.k, e.j)"]))
    source = HEADER + f"w = {kind}({args}, {agg!r}{table})\n"
    for i in range(draw(st.integers(1, 2))):
        body = draw(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=4))
        source += f"@w.on_close\ndef closed{i}(key, start, end, value):\n"
        source += textwrap.indent("\n".join(body), "    ") + "\n"
    source += "@on('tick')\ndef tick(e):\n    emit('ticked', k=e.k)\n"
    return source + f"@on('a')\ndef track(e):\n    w.add({key}, e.v)\n"


logs = st.lists(
    st.fixed_dictionaries(
        {
            "dt": st.sampled_from([0, 0, 1, 2, 3, 7]),
            "k": st.integers(0, 2),
            "j": st.integers(0, 1),
            "v": st.integers(0, 4),
        }
    ),
    min_size=1,
    max_size=25,
)


def _log(rows: list[dict]) -> rk.Log:
    t, out = 0, []
    for row in rows:
        t += row["dt"]
        out.append({"ts": t, "kind": "a", "k": row["k"], "j": row["j"], "v": row["v"]})
    return rk.Log(out)


def _replay(program: rk.Program, log: rk.Log, **options) -> rk.Result | str:
    try:
        return rk.replay(program, log, **options)
    except rk.RestreamError as exc:
        return str(exc)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=programs(), rows=logs)
def test_written_out_closes_equal_the_expansion(source, rows):
    program = rk.Program.from_source(source, name="closes")
    log = _log(rows)
    want = _replay(program, log, native_windows=False)
    got = _replay(program, log)
    if isinstance(want, str):
        assert got == want
        return
    assert not isinstance(got, str), got
    assert_same_result(got, want)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.metrics.scheduled_events == want.metrics.scheduled_events


@pytest.mark.parametrize("window", ["tumbling(4", "hopping(4, 2", "session(4"])
def test_an_error_in_a_written_out_close_names_the_users_line(window):
    """The close runs the function's statements in place (no call of ``report``), and an
    error there names the user's line, the handler and the close event, as the expansion's
    does."""
    source = (
        "from restream_kit import emit, on\n"
        "from restream_kit.windows import hopping, session, tumbling\n"
        f"w = {window}, 'count')\n"
        "@w.on_close\n"
        "def report(key, start, end, value):\n"
        "    emit('closed', key=key, value=value)\n"
        "    if value > 1:\n"
        "        emit('closed', key=key, value=1 // (value - value))\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k)\n"
    )
    program = rk.Program.from_source(source, name="closes_error")
    log = rk.Log([{"ts": t, "kind": "a", "k": k} for t, k in ((0, 0), (1, 1), (1, 1), (9, 0))])
    with pytest.raises(rk.RestreamError) as want:
        rk.replay(program, log, native_windows=False)
    with pytest.raises(rk.RestreamError) as got:
        rk.replay(program, log)
    assert str(got.value) == str(want.value)
    assert ":8: handler 'w__close' raised ZeroDivisionError" in str(got.value)
    frames = []
    tb = got.value.__cause__.__traceback__ if got.value.__cause__ else None
    tb = tb or got.value.cause.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "_rsc_w_closed" in frames and "report" not in frames, frames


def test_a_close_sets_the_event_per_window_only_where_its_statements_may_read_it():
    """Statements that call only a state's ``get``/``pop``, a block's row and plain
    builtins cannot read the runtime's event or ``seq``: their frame sets them once per run
    of closes (``QUIET``); any other call (``schedule``, a timed write, a builtin the
    program rebinds, a function of the program) makes it set them before each window."""
    body = ast.parse("_rs_d_seen[k] = _rs_d_seen.get(k, 0) + 1\n_rse0_add((a, len(k)))").body
    assert _quiet(body, {"_rse0_add"}, {})
    assert not _quiet(body, set(), {})
    assert not _quiet(body, {"_rse0_add"}, {"len": len})
    for other in ("schedule('t', at=1)", "_rs_rt.write(d, 0, 'add', k, 1, 5)", "f(k)"):
        assert not _quiet(ast.parse(other).body, {"_rse0_add"}, {}), other


def test_an_on_close_function_that_cannot_be_written_out_is_called_beside_one_that_can():
    """A function that reads a local it may not have assigned stays a call (its error is
    Python's own), after the statements of the one before it, in the functions' order."""
    source = (
        "from restream_kit import emit, on, state\n"
        "from restream_kit.windows import tumbling\n"
        "seen = state.Counter()\n"
        "w = tumbling(4, 'sum', table='rows')\n"
        "@w.on_close\n"
        "def first(key, start, end, value):\n"
        "    seen[key] += value\n"
        "    emit('closed', key=key, n=seen[key])\n"
        "@w.on_close\n"
        "def second(key, start, end, value):\n"
        "    if value > 100:\n"
        "        y = 1\n"
        "    if value == 3:\n"
        "        emit('closed', key=key, n=y)\n"
        "    emit('closed', key=key, n=-value)\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k, e.v)\n"
    )
    program = rk.Program.from_source(source, name="closes_mixed")
    rows = [(0, 0, 1), (1, 1, 2), (5, 0, 150), (9, 1, 7), (13, 0, 4)]
    log = rk.Log([{"ts": t, "kind": "a", "k": k, "v": v} for t, k, v in rows])
    want, got = rk.replay(program, log, native_windows=False), rk.replay(program, log)
    assert_same_result(got, want)
    assert got.tables["closed"].column("n").to_pylist() == [1, -1, 2, -2, 151, -150, 9, -7, 155, -4]
    log = rk.Log([{"ts": t, "kind": "a", "k": k, "v": v} for t, k, v in [*rows, (17, 1, 3)]])
    want, got = _replay(program, log, native_windows=False), _replay(program, log)
    assert isinstance(want, str) and "UnboundLocalError" in want
    assert got == want


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(width=st.integers(1, 6), pairs=st.booleans(), rows=logs)
def test_a_sliding_distinct_written_out_in_the_loop_equals_the_expansion(width, pairs, rows):
    """A sliding distinct's ``add`` and ``v = w.value(...)`` written out in the loop
    (``_sliding_queues.distinct_sites``): the loop calls neither helper, and the values
    read (of the key added to, and of another, whose oldest values may have just expired),
    rows and state are the expansion's (values added again, expired, ties)."""
    key, other = ("(e.k, e.j)", "((e.k + 1) % 3, e.j)") if pairs else ("e.k", "(e.k + 1) % 3")
    source = (
        "from restream_kit import emit, on\n"
        "from restream_kit.windows import sliding\n"
        f"w = sliding({width}, 'distinct')\n"
        "@on('a')\n"
        "def track(e):\n"
        f"    w.add({key}, e.v)\n"
        f"    v = w.value({key})\n"
        f"    u = w.value({other})\n"
        "    emit('seen', v=v, u=u)\n"
    )
    program = rk.Program.from_source(source, name="distinct")
    rt = SerialRuntime()
    compiled = compile_program(program, rt, columns=COLUMNS, kind_order=["a"])
    fuse_windows(compiled, rt)
    names = compiled.run_batch.__code__.co_names
    assert "w__add" not in names and "w__value" not in names
    log = _log(rows)
    got, want = rk.replay(program, log), rk.replay(program, log, native_windows=False)
    assert_same_result(got, want)


def test_a_sliding_distinct_read_right_after_its_add_counts_only_what_is_in_the_window():
    """A read of the key just added to, at the add's time, is the key's count of values (its
    expired ones went as the add ran); a read of that key at another time, or of another
    key, counts what is in the window then: with ties, values added again, and gaps longer
    than the window, the expansion's values, row for row."""
    source = (
        "from restream_kit import emit, on\n"
        "from restream_kit.windows import sliding\n"
        "w = sliding(3, 'distinct')\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k, e.v)\n"
        "    v = w.value(e.k)\n"
        "    w.add(e.k, e.v + 1)\n"
        "    later = w.value(e.k, ts=e.ts + 3)\n"
        "    w.add(e.k, e.v + 2)\n"
        "    other = w.value(1 - e.k)\n"
        "    w.add(e.k, e.v)\n"
        "    if w.value(e.k) > 3:\n"
        "        emit('many', k=e.k)\n"
        "    emit('seen', v=v, later=later, other=other)\n"
    )
    program = rk.Program.from_source(source, name="distinct_reads")
    rows = [(0, 0, 1), (0, 0, 1), (1, 1, 5), (2, 0, 2), (3, 0, 7), (9, 1, 5), (9, 0, 1), (10, 0, 1)]
    log = rk.Log([{"ts": t, "kind": "a", "k": k, "v": v} for t, k, v in rows])
    got, want = rk.replay(program, log), rk.replay(program, log, native_windows=False)
    assert_same_result(got, want)
    seen = got.tables["seen"]
    assert seen.column("later").to_pylist() == [0] * len(rows)  # (all expired by then)
    assert seen.column("v").to_pylist() == [1, 3, 1, 3, 4, 1, 1, 3]
    assert seen.column("other").to_pylist() == [0, 0, 3, 3, 3, 0, 3, 3]
    assert got.tables["many"].column("k").to_pylist() == [0, 0]


def test_a_table_that_closes_of_two_windows_and_the_loop_emit_to_is_the_expansions():
    """Rows of one table from two windows' written-out ``on_close`` emits (blocks with a
    ``seq`` per row) and from an emit written out in the loop (one ``seq`` per block),
    interleaved: the same table, row for row."""
    source = (
        "from restream_kit import emit, on\n"
        "from restream_kit.windows import session, tumbling\n"
        "w = tumbling(3, 'count')\n"
        "s = session(2, 'sum')\n"
        "@w.on_close\n"
        "def a(key, start, end, value):\n"
        "    emit('t', key=key, value=value)\n"
        "@s.on_close\n"
        "def b(key, start, end, value):\n"
        "    emit('t', key=key, value=value * 10)\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k)\n"
        "    s.add(e.k, e.v)\n"
        "    if e.v == 2:\n"
        "        emit('t', key=e.k, value=-1)\n"
    )
    program = rk.Program.from_source(source, name="mixed")
    t, rows = 0, []
    for i in range(200):
        t += (0, 1, 2, 5)[i * 7 % 4]
        rows.append({"ts": t, "kind": "a", "k": i * 5 % 4, "v": i * 3 % 4})
    log = rk.Log(rows)
    got, want = rk.replay(program, log), rk.replay(program, log, native_windows=False)
    assert_same_result(got, want)
    assert got.tables["t"].equals(want.tables["t"])
    assert set(got.tables["t"].column("seq").to_pylist()) == {0, 1, 2}
