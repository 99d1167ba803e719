"""Windows run natively by the serial engine (``restream_kit.runtime.windows``) against their
expansion run through the general machinery (``native_windows=False``), and the Spark engine
(which runs the expansion) against the native serial engine: random windowed programs over
random logs with ties, gaps longer than a window and kinds the program has no handler for."""

from __future__ import annotations

import os
import re

import pytest
from engine_matrix import assert_same_commits, assert_same_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.compiler.compile import compile_program
from restream_kit.engines import engines
from restream_kit.planner.render import plan_text
from restream_kit.runtime import SerialRuntime
from restream_kit.runtime.windows import fuse_windows

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_WINDOW_PROPERTY_EXAMPLES", "40"))
SPARK_EXAMPLES = int(os.environ.get("RESTREAM_WINDOW_SPARK_EXAMPLES", "5"))

HEADER = (
    "from restream_kit import emit, on, schedule, state\n"
    "from restream_kit.windows import hopping, session, sliding, tumbling\n"
    "seen = state.Counter()\n"
)


@st.composite
def window_decls(draw, name: str, other_keys: bool = False) -> tuple[str, str, bool]:
    """(declaration, on_close block, closing?) of one window named ``name``."""
    kind = draw(st.sampled_from(["tumbling", "hopping", "session", "sliding"]))
    agg = draw(st.sampled_from(["count", "sum", "mean", "min", "max", "distinct"]))
    width = draw(st.integers(1, 8))
    if kind == "sliding":
        return f"{name} = sliding({width}, {agg!r})\n", "", False
    table = draw(st.sampled_from([f"table={name + '_rows'!r}", "table=None"]))
    callback = table == "table=None" or draw(st.booleans())
    args = {
        "tumbling": f"{width}",
        "hopping": f"{width}, {draw(st.integers(1, width))}",
        "session": f"{width}",
    }[kind]
    decl = f"{name} = {kind}({args}, {agg!r}, {table})\n"
    block = ""
    if callback:
        # Counting in ``seen`` (other state) keeps a window's closes in a close pass of their
        # own, running its expansion; not counting, a window keyed otherwise runs narrow on
        # Spark (``passes._narrow``), one keyed like its stage fused.
        counts = not other_keys or draw(st.booleans())
        block = (
            f"@{name}.on_close\ndef {name}_closed(key, start, end, value):\n"
            + ("    seen[key] += 1\n" if counts else "")
            + f"    emit('closed', w={name!r}, key=key, start=start, end=end, value=float(value), "
            + ("n=seen[key])\n" if counts else "n=0)\n")
        )
    return decl, block, True


@st.composite
def windowed_programs(draw, late: bool = True, other_keys: bool = False) -> str:
    """Two windows added to by kind ``a`` (both keyed by ``k`` or by ``(k, j)``), sliding
    ones read after each add, closing ones emitting to their table or from ``on_close``
    functions; some adds a step before their event's time (out of time order); sometimes a
    user handler on a close kind, a timed write the ``on_close`` functions read, or a timer
    that lands on the same times as the closes.
    ``late=False``: every add at its event's time (the Spark properties).
    ``other_keys``: each window keyed by ``k`` or ``j``, and a counter by ``k`` in the
    adding handler, so that windows keyed otherwise than their stage come up (fused, narrow
    or run as their expansion in a close pass of their own, side by side)."""
    source = HEADER
    adds = []
    key = draw(st.sampled_from(["e.k", "(e.k, e.j)"]))
    if other_keys:
        adds.append("    seen[e.k] += 1\n")
    for name in ("w1", "w2"):
        if other_keys:
            key = draw(st.sampled_from(["e.k", "e.j"]))  # (one type: rows share tables)
        decl, block, closing = draw(window_decls(name, other_keys))
        source += decl + block
        # Sometimes at a time other than the event's: adds then come out of time order.
        earlier = ", ts=e.ts - 1" if late and draw(st.integers(0, 3)) == 0 else ""
        adds.append(f"    {name}.add({key}, e.v{earlier})\n")
        if not closing:
            adds.append(
                f"    if ({name}.value({key}) or 0) > 2:\n        emit('hot', w={name!r})\n"
            )
        elif draw(st.integers(0, 4)) == 0:
            source += (
                f"@on({name + ':close'!r})\ndef {name}_listener(e):\n"
                "    emit('listened', key=e.key)\n"
            )
    if draw(st.booleans()):
        # A timed write the on_close functions read: due between closes, it must land first.
        step = draw(st.integers(1, 4))
        adds.append(f"    seen.add(e.k, 100, at=e.ts + {step})\n")
    if draw(st.booleans()):
        adds.append("    schedule('tick', at=e.ts + 2, k=e.k)\n")
        source += "@on('tick')\ndef tick(e):\n    seen[e.k] += 10\n    emit('ticked', k=e.k)\n"
    return source + "@on('a')\ndef track(e):\n" + "".join(adds)


logs = st.lists(
    st.fixed_dictionaries(
        {
            # Small steps make ties and edges; large ones gaps longer than any window.
            "dt": st.sampled_from([0, 0, 1, 2, 3, 5, 20]),
            "kind": st.sampled_from(["a", "a", "a", "b"]),
            "k": st.integers(0, 2),
            "j": st.integers(0, 1),
            "v": st.integers(0, 4),
        }
    ),
    min_size=1,
    max_size=30,
).map(lambda rows: _with_times(rows))


def _with_times(rows: list[dict]) -> list[dict]:
    """Times from the steps; the first event is of kind ``a``, so the log has the kind."""
    t = 0
    out = []
    rows[0]["kind"] = "a"
    for row in rows:
        t += row.pop("dt")
        out.append({"ts": t, **row})
    return out


def _assert_same(got: rk.Result, want: rk.Result) -> None:
    assert_same_result(got, want)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.metrics.scheduled_events == want.metrics.scheduled_events


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=windowed_programs(), log=logs)
def test_native_windows_equal_their_expansion(source, log):
    program = rk.Program.from_source(source, name="native")
    the_log = rk.Log(log)
    want = rk.replay(program, the_log, native_windows=False)
    got = rk.replay(program, the_log)
    _assert_same(got, want)


@settings(max_examples=SPARK_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=windowed_programs(late=False), log=logs)
def test_spark_equals_the_native_serial_engine(source, log, spark_session):
    program = rk.Program.from_source(source, name="native")
    the_log = rk.Log(log)
    want = rk.replay(program, the_log)
    got = rk.replay(program, the_log, engine="spark", partitions=2)
    assert_same_result(got, want)


@settings(max_examples=SPARK_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(source=windowed_programs(late=False, other_keys=True), log=logs)
def test_spark_equals_the_serial_engine_with_windows_keyed_otherwise(source, log, spark_session):
    """Windows keyed otherwise than their adding stage (closing ones fed narrow rows where
    they may be: ``passes._narrow``), on Spark's passes, against the serial engine."""
    program = rk.Program.from_source(source, name="other_keys")
    the_log = rk.Log(log)
    want = rk.replay(program, the_log)
    got = rk.replay(program, the_log, engine="spark", path="passes", partitions=2)
    _assert_same(got, want)


def test_a_window_with_a_listener_on_its_closes_keeps_its_expansion():
    source = (
        HEADER + "w = tumbling(10, 'count', table='w')\n"
        "@on('w:close')\ndef listen(e):\n    emit('heard', key=e.key, start=e.start)\n"
        "@on('a')\ndef track(e):\n    w.add(e.k)\n"
    )
    program = rk.Program.from_source(source, name="listened")
    log = rk.Log([{"ts": t, "kind": "a", "k": t % 2, "j": 0, "v": 0} for t in (1, 2, 3, 12)])
    got = rk.replay(program, log)
    # Every add's close runs the listener: four, though only three windows emit rows.
    assert got.tables["heard"].num_rows == 4
    assert got.tables["w"].num_rows == 3
    _assert_same(got, rk.replay(program, log, native_windows=False))


def test_spark_closes_a_window_that_ends_at_its_adding_event(spark_session):
    # The close is scheduled for the adding event's own time: it runs after that event (whose
    # write of the count it reads), before the next, in the stage of the closes too.
    source = HEADER + "w = tumbling(3, 'count', table='w')\n@on('a')\ndef track(e):\n"
    program = rk.Program.from_source(source + "    w.add(e.k, ts=e.ts - 1)\n", name="ends_now")
    # Two events at one time: the first's close runs between them, so the window closes
    # twice (the second add reopens it); the third's close runs after the log.
    log = rk.Log([{"ts": t, "kind": "a", "k": 0, "j": 0, "v": 0} for t in (0, 0, 4)])
    want = rk.replay(program, log)
    assert want.tables["w"].column("value").to_pylist() == [1, 1, 1]
    assert_same_result(rk.replay(program, log, engine="spark", partitions=2), want)


def test_spark_commits_a_close_at_its_adding_events_time_as_waiting(spark_session, tmp_path):
    # A checkpoint after the adding event holds its close still waiting, as the serial
    # engine's does: it runs after the epoch's end, before the next event.
    source = HEADER + "w = tumbling(3, 'count', table='w')\n@on('a')\ndef track(e):\n"
    program = rk.Program.from_source(source + "    w.add(e.k, ts=e.ts - 1)\n", name="ends_now")
    log = rk.Log([{"ts": t, "kind": "a", "k": 0, "j": 0, "v": 0} for t in (0, 0, 4)])
    want = rk.replay(program, log, epoch=1, checkpoint=tmp_path / "serial")
    got = rk.replay(
        program, log, engine="spark", path="passes", partitions=2, epoch=1,
        checkpoint=tmp_path / "spark",
    )  # fmt: skip
    assert_same_result(got, want)
    assert_same_commits(tmp_path / "serial", tmp_path / "spark", range(3))


TWO_CALLBACKS = (
    HEADER + "w1 = tumbling(1, 'count', table=None)\n"
    "@w1.on_close\ndef one(key, start, end, value):\n    seen[key] += 1\n"
    "    emit('closed', w='w1', key=key, n=seen[key])\n"
    "w2 = tumbling(1, 'count', table=None)\n"
    "@w2.on_close\ndef two(key, start, end, value):\n    seen[key] += 1\n"
    "    emit('closed', w='w2', key=key, n=seen[key])\n"
    "@on('a')\ndef track(e):\n    w1.add(e.k)\n    w2.add(e.k)\n"
)


def test_spark_runs_on_close_functions_of_two_windows(spark_session):
    # The closes' stage is partitioned by ``e.key``, an element of the windows' keys
    # ``(key, start)``: the counts written upstream must reach the partition of that element.
    program = rk.Program.from_source(TWO_CALLBACKS, name="two_callbacks")
    log = rk.Log([{"ts": t, "kind": "a", "k": k, "j": 0, "v": 0} for t in (0, 3) for k in range(4)])
    want = rk.replay(program, log)
    assert want.tables["closed"].num_rows == 16
    assert_same_result(rk.replay(program, log, engine="spark", partitions=2), want)


def test_spark_runs_an_on_close_function_beside_a_close_listener(spark_session):
    source = (
        HEADER + "w = tumbling(2, 'sum', table=None)\n"
        "@w.on_close\ndef closed(key, start, end, value):\n    seen[key] += 1\n"
        "    emit('closed', key=key, start=start, n=seen[key], value=value)\n"
        "@on('w:close')\ndef listen(e):\n    emit('heard', key=e.key, start=e.start)\n"
        "@on('a')\ndef track(e):\n    w.add(e.k, e.v)\n"
    )
    program = rk.Program.from_source(source, name="listened_callback")
    log = rk.Log(
        [{"ts": t, "kind": "a", "k": k, "j": 0, "v": t + k} for t in (0, 1, 3) for k in range(3)]
    )
    want = rk.replay(program, log)
    assert want.tables["closed"].num_rows == 6 and want.tables["heard"].num_rows == 9
    got = rk.replay(program, log, engine="spark", partitions=2)
    assert_same_result(got, want)
    assert got.tables["closed"].equals(want.tables["closed"])


FUSION = (
    HEADER + "w = tumbling(10, 'count', table='w')\n"
    "s = session(5, 'distinct', table='s')\n"
    "d = sliding(5, 'distinct')\n"
    "@on('w:close')\ndef listen(e):\n    emit('heard', key=e.key)\n"
    "@on('a')\ndef track(e):\n    w.add(e.k)\n    s.add(e.k, e.v)\n    d.add(e.k, e.v, ts=e.ts - 1)\n"
)


def test_the_path_and_the_plan_say_which_windows_run_fused_and_why_not():
    program = rk.Program.from_source(FUSION, name="fusion")
    log = rk.Log([{"ts": t, "kind": "a", "k": t % 2, "j": 0, "v": t % 3} for t in range(20)])
    path = rk.replay(program, log).metrics.path
    assert path["window s"].startswith("fused, lazy: a session closes at the next add past")
    assert path["window w"].startswith("off: a handler listens on the close kind 'w:close'")
    assert "(listen)" in path["window w"]
    assert path["window d"] == "off: added at times other than its events' (ts=...)"
    # The plan says the same before any replay, in its text.
    text = plan_text(rk.plan(program))
    for name, how in path.items():
        assert f"  {name.removeprefix('window ')}: {how}" in text
    # A replay that keeps every expansion says why.
    off = rk.replay(program, log, native_windows=False).metrics.path
    assert set(off) == set(path)
    assert all(how == "off: native_windows=False" for how in off.values())
    # On Spark the session, keyed like the stage that adds to it, runs in its pass with its
    # closes; the tumbling window (whose closes a stage of its own listens to) and the sliding
    # one added at other times as their expansion; the path says so where each window's state
    # is (one pass may run several stages).
    said = engines()["spark"].layout(program, log, {"partitions": 2, "path": "passes"})
    for name, how in (("w", "not"), ("s", "fused: its adds and closes"), ("d", "not")):
        (where,) = {
            what for what in said.values() if re.search(rf"windows? [\w, ]*\b{name}\b", what)
        }
        assert f"window {name} {how}" in where


OPEN_AT_THE_END = (
    HEADER + "t = tumbling(10, 'sum', table='t')\n"
    "s = session(4, 'distinct', table='s')\n"
    "c = sliding(6, 'mean')\n"
    "@s.on_close\ndef closed(key, start, end, value):\n    seen[key] += value\n"
    "@on('a')\ndef track(e):\n    t.add(e.k, e.v)\n    s.add((e.k, e.j), e.v)\n    c.add(e.k, e.v)\n"
    "    emit('mean', k=e.k, m=c.value(e.k))\n"
)


@pytest.mark.parametrize("final", [True, False])
def test_windows_left_open_hold_the_expansions_state(final):
    # Without the flush (final=False) sessions, windows and sliding values are still open
    # when the replay ends: the states the native structures write then are the expansion's.
    program = rk.Program.from_source(OPEN_AT_THE_END, name="open_at_the_end")
    rows = [
        {"ts": t, "kind": "a", "k": t % 3, "j": t % 2, "v": (t * 7) % 5}
        for t in (0, 1, 1, 2, 5, 6, 9, 13, 14, 14, 15, 21, 22, 30, 31, 31)
    ]
    log = rk.Log(rows)
    got = rk.replay(program, log, final=final)
    want = rk.replay(program, log, native_windows=False, final=final)
    _assert_same(got, want)
    open_sessions = want.state["s__first"]
    assert bool(open_sessions) is not final


def test_sessions_closing_in_one_run_see_the_timed_writes_due_before_each():
    """Sessions due by the loop's clock close one after another in one run of the window's
    entry: a timed write due between two of those closes lands before the later one, as it
    does before the expansion's close event at that time."""
    source = (
        "from restream_kit import emit, on, state\n"
        "from restream_kit.windows import session\n"
        "seen = state.Counter()\n"
        "w = session(2, 'count')\n"
        "@w.on_close\n"
        "def closed(key, start, end, value):\n"
        "    emit('closed', key=key, end=end, n=seen['all'])\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k)\n"
        "    seen.add('all', 1, at=e.ts + 2)\n"
    )
    program = rk.Program.from_source(source, name="sessions_in_one_run")
    log = rk.Log([{"ts": t, "kind": "a", "k": k} for t, k in ((0, 0), (1, 1), (20, 0))])
    want = rk.replay(program, log, native_windows=False)
    got = rk.replay(program, log)
    _assert_same(got, want)
    assert got.tables["closed"].column("n").to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("window", ["tumbling(4)", "hopping(4, 2)", "session(4)", "sliding(4)"])
def test_a_fused_windows_add_is_written_out_in_the_loop(window):
    """An add in a handler whose body the loop writes out is written out there too: the loop
    no longer calls the window's ``add`` helper (nor a sliding window's ``value``)."""
    closing = not window.startswith("sliding")
    source = (
        "from restream_kit import emit, on\n"
        "from restream_kit.windows import hopping, session, sliding, tumbling\n"
        f"w = {window[:-1]}, 'sum'{', table=' + repr('rows') if closing else ''})\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k, e.v)\n"
        + ("" if closing else "    v = w.value(e.k)\n    emit('seen', v=v)\n")
    )
    program = rk.Program.from_source(source, name="written_out")
    rt = SerialRuntime()
    compiled = compile_program(
        program, rt, columns=["lsn", "ts", "kind", "k", "v"], kind_order=["a"]
    )
    assert "w__add" in compiled.run_batch.__code__.co_names
    fused = fuse_windows(compiled, rt)
    assert fused.names == ["w"]
    names = compiled.run_batch.__code__.co_names
    assert "w__add" not in names and "w__value" not in names
    log = rk.Log([{"ts": t, "kind": "a", "k": t % 3, "v": t} for t in range(0, 40, 3)])
    _assert_same(rk.replay(program, log), rk.replay(program, log, native_windows=False))


@pytest.mark.parametrize(
    ("test", "written"),
    [
        ("if w.value(e.k) > 6:", True),  # (as the bench's windowed rules read theirs)
        ("if not w.value(e.k) - 6 <= 0 and e.v % 2:", True),
        ("if e.v % 2 and w.value(e.k) > 6:", False),  # (evaluated only when e.v is odd)
        ("if e.v < 0:\n        pass\n    elif w.value(e.k) > 6:", True),
    ],
)
def test_a_sliding_value_read_first_by_an_if_is_written_out(test, written):
    """``if w.value(k) > n:`` is written out as ``x = w.value(k)`` and ``if x > n:`` when the
    call is what the test evaluates first: the same result, and no call of the ``value``
    helper left in the loop; a call the test may skip stays a call."""
    source = (
        "from restream_kit import emit, on\n"
        "from restream_kit.windows import sliding\n"
        "w = sliding(20, 'count')\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k)\n"
        f"    {test}\n"
        "        emit('busy', k=e.k, v=e.v)\n"
    )
    program = rk.Program.from_source(source, name="value_in_if")
    rt = SerialRuntime()
    compiled = compile_program(
        program, rt, columns=["lsn", "ts", "kind", "k", "v"], kind_order=["a"]
    )
    fuse_windows(compiled, rt)
    assert ("w__value" not in compiled.run_batch.__code__.co_names) is written
    log = rk.Log([{"ts": t, "kind": "a", "k": t % 2, "v": t} for t in range(0, 60, 1)])
    got, want = rk.replay(program, log), rk.replay(program, log, native_windows=False)
    _assert_same(got, want)
    assert got.tables["busy"].num_rows > 0


def test_an_event_between_two_closes_of_a_batch_adds_to_closed_and_open_windows():
    """A timer due at a tumbling window's end, queued between the closes of two of its
    windows, runs between them: its add to the window already closed opens it again (a
    close of its own, after the others), its add to the window still open counts there."""
    source = (
        "from restream_kit import on, schedule\n"
        "from restream_kit.windows import tumbling\n"
        "w = tumbling(4, 'count', table='rows')\n"
        "@on('a')\n"
        "def track(e):\n"
        "    w.add(e.k)\n"
        "    if e.k == 0:\n"
        "        schedule('tick', at=e.ts + 4, k=e.k)\n"
        "@on('tick')\n"
        "def tick(e):\n"
        "    w.add(e.k, ts=e.ts - 1)\n"
        "    w.add(e.k + 1, ts=e.ts - 1)\n"
    )
    program = rk.Program.from_source(source, name="between_closes")
    log = rk.Log([{"ts": t, "kind": "a", "k": k} for t, k in ((0, 0), (1, 1), (9, 0))])
    want = rk.replay(program, log, native_windows=False)
    got = rk.replay(program, log)
    _assert_same(got, want)
    rows = got.tables["rows"].select(["key", "start", "value"]).to_pylist()
    assert rows[:3] == [
        {"key": 0, "start": 0, "value": 1},
        {"key": 1, "start": 0, "value": 2},
        {"key": 0, "start": 0, "value": 1},
    ]


def _two_closing_windows(counts_in_w1: bool, listened: bool, w1_key: str) -> str:
    """w1 and w2 both emitting to ``closed``; w1 kept out of its adding stage's pass (its
    on_close counts in ``seen``, or a handler listens on ``w1:close``), w2 fused."""
    return (
        HEADER + "w1 = tumbling(8, 'count', table=None)\n"
        "@w1.on_close\ndef w1_closed(key, start, end, value):\n"
        + ("    seen[key] += 1\n" if counts_in_w1 else "")
        + "    emit('closed', w='w1', key=key, start=start, value=float(value))\n"
        "w2 = tumbling(2, 'count', table=None)\n"
        "@w2.on_close\ndef w2_closed(key, start, end, value):\n"
        "    emit('closed', w='w2', key=key, start=start, value=float(value))\n"
        + (
            "@on('w1:close')\ndef w1_listener(e):\n    emit('listened', key=e.key)\n"
            if listened
            else ""
        )
        + f"@on('a')\ndef track(e):\n    seen[e.k] += 1\n    w1.add({w1_key})\n    w2.add(e.k)\n"
    )


@pytest.mark.parametrize(
    "counts_in_w1, listened, w1_key",
    [(False, True, "e.j"), (True, False, "e.j")],
    ids=["listened", "other-state"],
)
def test_closes_of_a_window_in_its_own_pass_and_a_fused_one_at_one_time_keep_serial_order(
    counts_in_w1, listened, w1_key, spark_session
):
    # w1's closes run its expansion in a close pass, w2's natively in the adding pass: both
    # placed by the root event's position and seq (``passes._rows.scheduled_sub``).
    source = _two_closing_windows(counts_in_w1, listened, w1_key)
    program = rk.Program.from_source(source, name="beside_fused")
    times = (2, 2, 2, 2, 3, 6)
    log = rk.Log([{"ts": t, "kind": "a", "k": 0, "j": i // 5, "v": 0} for i, t in enumerate(times)])
    want = rk.replay(program, log)
    # At time 8 the last event (its root) closes w1's window and w2's [6, 8), in this order.
    at_8 = [r for r in want.tables["closed"].to_pylist() if r["ts"] == 8 and r["lsn"] == 5]
    assert [r["w"] for r in at_8] == ["w1", "w2"]
    got = rk.replay(program, log, engine="spark", path="passes", partitions=2)
    assert got.tables["closed"].equals(want.tables["closed"])
