"""Re-replays of programs with timed writes (``at=``) and scheduled events (windows).

Every re-replay is compared with a full serial replay of the edited program (tables row for
row, state for state), on random programs from ``naive`` with timed writes, a scheduler and a
handler of the scheduled kind, and on the bench programs (windows, the ordinary rule).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from naive import KEYS, HandlerSpec, Op, ProgramSpec, events, programs, render

import restream_kit as rk

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_PROPERTY_EXAMPLES", "200")) // 2
ROOT = Path(__file__).resolve().parents[2]
SOCIAL = "sample_data/social_small.parquet"
#: Statement shapes a re-replay serves (``k in state``, the naive "emit", is not served).
SERVED = ("inc", "set", "delete", "cond_emit", "future_add", "future_set")


def assert_same(got: rk.Result, want: rk.Result) -> None:
    assert list(got.tables) == list(want.tables)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.state == want.state


def served(spec: ProgramSpec) -> ProgramSpec:
    handlers = []
    for h in spec.handlers:
        ops = tuple(
            op if op.what in SERVED else dataclasses.replace(op, what="cond_emit") for op in h.ops
        )
        handlers.append(HandlerSpec(h.name, h.kinds, ops))
    return ProgramSpec(spec.states, tuple(handlers))


def with_timer(spec: ProgramSpec, delay: int, closer: tuple[Op, ...]) -> str:
    """``spec`` plus a handler that schedules kind ``c`` on every ``a`` event and a handler of
    ``c`` (like a window's close) with the ops ``closer``."""
    closing = HandlerSpec("hc", ("c",), closer)
    source = render(ProgramSpec(spec.states, (*spec.handlers, closing)))
    source = source.replace(
        "from restream_kit import state, on, emit",
        "from restream_kit import state, on, emit, schedule",
    )
    return source + (
        f'\n\n@on("a")\ndef hs(e):\n    schedule("c", at=e.ts + {delay}, k=e.k, j=e.j, v=e.v)\n'
    )


def emit_only(h: HandlerSpec) -> bool:
    return all(op.what == "cond_emit" for op in h.ops)


@st.composite
def threshold_edits(draw, spec: ProgramSpec) -> tuple[ProgramSpec, bool]:
    """``spec`` with one handler's threshold or constant changed; True when that handler only
    reads and emits (then it alone re-runs, and every other stage is reused)."""
    handlers = list(spec.handlers)
    i = draw(st.integers(0, len(handlers) - 1))
    h = handlers[i]
    j = draw(st.integers(0, len(h.ops) - 1))
    op = h.ops[j]
    if draw(st.booleans()):
        op = dataclasses.replace(op, threshold=op.threshold + draw(st.sampled_from([-1, 1, 2])))
    else:
        op = dataclasses.replace(op, value=("const", draw(st.integers(-2, 3))))
    handlers[i] = HandlerSpec(h.name, h.kinds, (*h.ops[:j], op, *h.ops[j + 1 :]))
    return ProgramSpec(spec.states, tuple(handlers)), emit_only(h)


def check(old_source: str, new_source: str, log: list[dict]) -> rk.Result:
    the_log = rk.Log(log)
    old = rk.Program.from_source(old_source, name="old")
    new = rk.Program.from_source(new_source, name="new")
    recorded = rk.replay(old, the_log, history=True, require_kinds=False)
    got = rk.replay(new, the_log, reuse=recorded, require_kinds=False)
    assert_same(got, rk.replay(new, the_log, require_kinds=False))
    return got


ops = st.builds(
    Op,
    what=st.sampled_from(SERVED),
    state=st.sampled_from(["s0"]),
    key=st.sampled_from(KEYS),
    value=st.one_of(st.tuples(st.just("const"), st.integers(-2, 3)), st.tuples(st.just("field"))),
    delay=st.integers(0, 6),
    threshold=st.integers(-1, 3),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=programs().map(served), log=events)
def test_timed_writes_reuse_every_stage_an_edit_leaves_and_equal_a_full_replay(data, spec, log):
    edited, alone = data.draw(threshold_edits(spec))
    got = check(render(spec), render(edited), log)
    reason = got.reuse["reuse_reason"]
    event(f"re-ran as {got.reuse['rerun_as']}" if got.reuse["reused_stages"] else "in full")
    # Timed writes are served like any write: only a change of every stage replays in full.
    assert reason is None or "every stage changed" in reason, reason
    if alone and len(spec.handlers) > 1 and edited != spec:
        assert got.reuse["reused_stages"], got.reuse


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    spec=programs().map(served),
    closer=st.lists(ops, min_size=1, max_size=3),
    delay=st.integers(0, 5),
    log=events,
)
def test_scheduled_events_of_reused_stages_equal_a_full_replay(data, spec, closer, delay, log):
    """A scheduler (``hs``) and a closing handler (``hc``, on the scheduled kind) next to a
    random program: an edit of a handler on log events reuses the timer's stages whenever
    the edited handler re-runs alone; any edit equals a full replay."""
    closer = tuple(closer)
    edited, alone = data.draw(threshold_edits(spec))
    got = check(with_timer(spec, delay, closer), with_timer(edited, delay, closer), log)
    event(f"re-ran as {got.reuse['rerun_as']}" if got.reuse["reused_stages"] else "in full")
    if got.reuse["reuse_reason"]:
        event(got.reuse["reuse_reason"].split(": ", 1)[1][:60])
    if alone and edited != spec:
        assert "hs" in got.reuse["reused_stages"], got.reuse


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(
    spec=programs().map(served),
    closer=st.lists(ops, min_size=1, max_size=3),
    log=events,
    edit=st.sampled_from(["delay", "closer"]),
)
def test_an_edit_of_the_timer_itself_replays_in_full_and_says_why(spec, closer, log, edit):
    closer = tuple(closer)
    old = with_timer(spec, 2, closer)
    if edit == "delay":
        new = with_timer(spec, 3, closer)
    else:
        new = with_timer(spec, 2, (*closer, Op("cond_emit", "s0", "e.k", threshold=9)))
    got = check(old, new, log)
    assert not got.reuse["reused_stages"] or "hc" not in got.reuse["rerun_stages"]
    if not got.reuse["reused_stages"]:
        assert got.reuse["reuse_reason"], got.reuse


def bench_case(path: str, before: str, after: str) -> rk.Result:
    source = (ROOT / path).read_text()
    edited = source.replace(before, after)
    assert edited != source
    log = rk.Log(SOCIAL)
    recorded = rk.replay(rk.Program.from_source(source, name="v1"), log, history=True)
    new = rk.Program.from_source(edited, name="v2")
    got = rk.replay(new, log, reuse=recorded)
    assert_same(got, rk.replay(new, log))
    return got


def test_the_ordinary_rules_threshold_reuses_the_timed_write_sliding_count():
    got = bench_case("bench/programs/ordinary.py", "ip_hour[e.ip] > 5", "ip_hour[e.ip] > 3")
    assert got.reuse["reused_stages"] == ["sender_rate", "ip_window"]
    assert got.reuse["rerun_stages"] == ["suspicious"]


WINDOWS_SPLIT = (
    "    per_ip.add(e.ip)\n    if per_ip.value(e.ip) > 30:",
    '    per_ip.add(e.ip)\n\n\n@on("message")\ndef burst(e):\n    if per_ip.value(e.ip) > 30:',
)


def test_a_threshold_downstream_of_windows_reuses_the_windows(tmp_path):
    source = (ROOT / "bench/programs/windows.py").read_text().replace(*WINDOWS_SPLIT)
    path = tmp_path / "windows_split.py"
    path.write_text(source)
    got = bench_case(str(path), "> 30", "> 12")
    assert got.reuse["reused_stages"] == ["track", "per_sender__close"]
    assert got.reuse["rerun_stages"] == ["burst"]
    assert got.tables["sender_10min"].num_rows and got.tables["ip_burst"].num_rows


def test_a_threshold_in_the_handler_that_fills_the_windows_replays_in_full():
    # The threshold shares its handler with the window writes: the handler changed, and the
    # window's close reads what it writes. A re-replay re-runs whole handlers.
    got = bench_case("bench/programs/windows.py", "> 30", "> 12")
    assert not got.reuse["reused_stages"]
    assert "every stage changed" in got.reuse["reuse_reason"]


def test_a_rerun_handler_on_scheduled_events_replays_in_full_and_says_why(tmp_path):
    source = (ROOT / "bench/programs/windows.py").read_text() + (
        '\n\n@on("per_sender:close")\ndef late(e):\n    if e.start > 0:\n'
        '        emit("late", key=e.key)\n'
    )
    path = tmp_path / "windows_late.py"
    path.write_text(source)
    got = bench_case(str(path), "e.start > 0", "e.start > 1")
    assert not got.reuse["reused_stages"]
    assert "late re-runs and runs on scheduled events" in got.reuse["reuse_reason"]


HELPERS = """
from restream_kit import emit, on, state
c = state.Counter()
w = state.Counter()


@on("a")
def count(e):
    c[e.k] += 1
    w.add(e.k, 1, at=e.ts + 3)


def seen(key):
    return c[key]


def heavy(e):
    return w[e.k] > 1


@on("a", "b")
def judge(e):
    if seen(e.k) > 1 and heavy(e):
        emit("out", k=e.k)
"""


def test_reads_through_helpers_are_served_or_rerun_their_writers():
    log = [{"ts": t // 2, "kind": "ab"[t % 3 == 0], "k": t % 2, "j": 0, "v": 0} for t in range(30)]
    # seen(e.k) is one return with a harmless argument: served. heavy(e) takes the event:
    # its state's writer re-runs too (here the same stage), and the result is a full replay's.
    got = check(HELPERS, HELPERS.replace("> 1 and", "> 2 and"), log)
    assert got.reuse["rerun_stages"] == ["count", "judge"], got.reuse
    assert "helper heavy() (line 18) uses state 'w'" in got.reuse["reuse_reason"], got.reuse
    only_seen = HELPERS.replace(" and heavy(e)", "")
    got = check(only_seen, only_seen.replace("> 1:", "> 2:"), log)
    assert got.reuse["reused_stages"] == ["count"] and got.reuse["rerun_stages"] == ["judge"]
