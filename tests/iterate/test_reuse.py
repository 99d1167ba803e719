"""Run history and incremental re-replay (SPEC section 7): a re-replay equals a full replay.

Every re-replay here is compared with a full serial replay of the same edited program (the
oracle), on hand-written programs and on random programs with random edits (hypothesis,
programs from ``naive``).
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from naive import KEYS, KINDS, HandlerSpec, Op, ProgramSpec, events, programs, render

import restream_kit as rk
from restream_kit.cli import main as cli
from restream_kit.history.probes import ABSENT
from restream_kit.history.recorder import History
from restream_kit.io.catalog import Catalog

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_PROPERTY_EXAMPLES", "200")) // 2
SOCIAL = "sample_data/social_small.parquet"
ANTISPAM = rk.sample_program("antispam").read_text()
STRICTER = ANTISPAM.replace("0.2 * ip_msgs", "0.3 * ip_msgs")


def assert_same(got: rk.Result, want: rk.Result) -> None:
    assert list(got.tables) == list(want.tables)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.state == want.state


def test_history_records_every_cross_stage_read_for_every_event_of_the_readers_kinds():
    source = """
from restream_kit import emit, on, state
c = state.Counter()
m = state.Map(default=None)

@on("a")
def h(e):
    c[e.k] += 2
    m[e.k, "x"] = {"v": e.v}
    if e.v < 0:
        del m[e.k, "x"]

@on("a", "b")
def r(e):
    if e.v > 100 and c[e.k] > 1:  # c is read on every event all the same
        emit("out", n=c.get(e.k, -1), m=m[e.k, "x"])
"""
    log = rk.Log(
        [
            {"ts": 1, "kind": "a", "k": 1, "v": 5},
            {"ts": 2, "kind": "b", "k": 2, "v": 500},
            {"ts": 3, "kind": "a", "k": 1, "v": -1},
        ]
    )
    result = rk.replay(source, log, history=True)
    hist = result.history
    probes = {(s.state, s.key): (s.kinds, s.before, p) for s, p in hist.probes.items()}
    assert set(probes) == {("c", "e.k"), ("m", "(e.k, 'x')")}
    kinds, before, c = probes["c", "e.k"]
    assert kinds == ("a", "b") and before == ("h",)
    # After h ran on the event: 2 at lsn 0, nothing for key 2, 4 at lsn 2.
    assert c.python_values()[0] == 2 and c.python_values()[2] == 4
    assert c.python_values()[1] is ABSENT and c.encoding == "int64"
    m = probes["m", "(e.k, 'x')"][2]
    # A dict is not a plain type: JSON text in a typed column, and its encoding says so.
    assert m.encoding == 'columns:{"k":"json"}' and m.python_values()[0] == {"v": 5}
    assert m.python_values()[2] is ABSENT  # deleted by h on that event
    assert hist.writers == {"c": ["h"], "m": ["h"]}
    assert result.state == {"c": {1: 4}, "m": {}}
    assert rk.replay(source, log).history is None  # only when asked
    edited = source.replace("e.v > 100", "e.v > 1")
    want = rk.replay(edited, log)
    got = rk.replay(edited, log, reuse=result)
    assert got.reuse["rerun_stages"] == ["r"] and got.reuse["rerun_as"] == "loop"
    assert_same(got, want)


def test_reuse_of_the_antispam_threshold_reruns_only_the_flag():
    log = rk.Log(SOCIAL)
    v1 = rk.replay(ANTISPAM, log, history=True)
    v2 = rk.replay(STRICTER, log, reuse=v1)
    assert v2.reuse["reused_stages"] == ["befriend", "tally_sender", "tally_ip"]
    assert v2.reuse["rerun_stages"] == ["flag"]
    assert v2.reuse["reuse_reason"] is None
    want = rk.replay(STRICTER, log)
    assert_same(v2, want)
    assert v2.metrics.rows["spam"] < v1.metrics.rows["spam"]  # the edit mattered


def test_reuse_through_the_catalog_and_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    (tmp_path / "v1.py").write_text(ANTISPAM)
    (tmp_path / "v2.py").write_text(STRICTER)
    base = ["--log", SOCIAL, "--quiet", "--json"]
    assert cli(["replay", str(tmp_path / "v1.py"), *base, "--name", "v1", "--history"]) == 0
    capsys.readouterr()
    assert cli(["replay", str(tmp_path / "v2.py"), *base, "--name", "v2", "--reuse", "v1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reused_stages"] == ["befriend", "tally_sender", "tally_ip"]
    assert summary["rerun_stages"] == ["flag"]
    assert summary["saved_s"] >= 0 and summary["reused_run"] == "v1"
    want = rk.replay(STRICTER, SOCIAL)
    assert summary["tables"] == {"spam": want.metrics.rows["spam"]}
    catalog = Catalog()
    runs = catalog.runs()
    sizes = dict(zip(runs["name"], runs["history"], strict=True))
    assert sizes["v1"].endswith("B") and sizes["v2"] == ""
    v1 = catalog.latest("v1")
    assert History.read(v1.outputs) is not None
    assert_same(rk.replay(STRICTER, SOCIAL, reuse="v1"), want)
    assert cli(["runs"]) == 0
    assert "history" in capsys.readouterr().out
    # Without a history there is nothing to reuse: it says so and replays in full.
    assert cli(["replay", str(tmp_path / "v2.py"), *base, "--name", "v3", "--reuse", "v2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reused_stages"] == [] and "kept no history" in summary["reuse_reason"]
    assert summary["tables"] == {"spam": want.metrics.rows["spam"]}


def test_nothing_is_reused_on_another_log_or_after_an_upstream_edit():
    log = rk.Log(SOCIAL)
    v1 = rk.replay(ANTISPAM, log, history=True)
    other = rk.Log(log.table.slice(0, 20_000))
    got = rk.replay(STRICTER, other, reuse=v1)
    assert "another log" in got.reuse["reuse_reason"] and got.reuse["reused_stages"] == []
    assert_same(got, rk.replay(STRICTER, other))
    upstream = ANTISPAM.replace("friends[e.dst, e.src] = True", "pass")
    got = rk.replay(upstream, log, reuse=v1)
    assert "befriend" in got.reuse["rerun_stages"]
    assert_same(got, rk.replay(upstream, log))


def test_a_checkpointed_replay_reuses_nothing_and_says_which_option(tmp_path):
    log = rk.Log(rk.Log(SOCIAL).table.slice(0, 5_000))
    v1 = rk.replay(ANTISPAM, log, history=True)
    got = rk.replay(STRICTER, log, reuse=v1, checkpoint=str(tmp_path / "ck"))
    assert got.reuse["reused_stages"] == []
    assert "checkpoint is given (a re-replay is one whole replay)" in got.reuse["reuse_reason"]
    assert_same(got, rk.replay(STRICTER, log))


def test_reads_no_probe_serves_rerun_the_writers_of_that_state_and_say_why():
    log = rk.Log(SOCIAL)
    v1 = rk.replay(ANTISPAM, log, history=True)
    membership = ANTISPAM.replace(
        "if to_strangers[e.src] > 2 * to_friends[e.src]", "if e.src in to_strangers"
    )
    got = rk.replay(membership, log, reuse=v1)
    assert got.reuse["reuse_reason"] is None
    assert got.reuse["rerun_stages"] == ["tally_sender", "flag"]
    assert got.reuse["reused_stages"] == ["befriend", "tally_ip"]
    assert any("other than by reading one key" in n for n in got.reuse["notes"])
    assert_same(got, rk.replay(membership, log))
    # A new handler after tally_ip reads ip_msgs where flag's read was recorded: served.
    busy = """
@on("message")
def busy(e):
    if ip_msgs[e.ip] > 40:
        emit("busy", ip=e.ip)
"""
    late = ANTISPAM + busy
    got = rk.replay(late, log, reuse=v1)
    assert got.reuse["rerun_stages"] == ["busy"] and got.reuse["rerun_as"] == "columns"
    assert_same(got, rk.replay(late, log))
    # Declared before tally_ip, it reads ip_msgs where no read was recorded.
    early = ANTISPAM.replace(
        '@on("message")\ndef tally_sender', busy + '\n@on("message")\ndef tally_sender'
    )
    assert early != ANTISPAM
    got = rk.replay(early, log, reuse=v1)
    assert set(got.reuse["rerun_stages"]) == {"busy", "tally_ip", "flag"}
    assert any("no recorded read of ip_msgs[e.ip]" in n for n in got.reuse["notes"])
    assert_same(got, rk.replay(early, log))


# -- random programs, random edits ---------------------------------------------------------

SERVABLE = ("inc", "set", "delete", "cond_emit")


def servable(spec: ProgramSpec) -> ProgramSpec:
    """``spec`` without timed writes and ``k in state`` (which re-replays do not serve)."""
    handlers = []
    for h in spec.handlers:
        ops = tuple(
            op if op.what in SERVABLE else dataclasses.replace(op, what="cond_emit") for op in h.ops
        )
        handlers.append(HandlerSpec(h.name, h.kinds, ops))
    return ProgramSpec(spec.states, tuple(handlers))


@st.composite
def edits(draw, spec: ProgramSpec) -> ProgramSpec:
    """``spec`` with one random edit: a constant, a condition, a handler or a state."""
    what = draw(st.sampled_from(["const", "cond", "add_handler", "drop_handler", "add_state"]))
    handlers = list(spec.handlers)
    i = draw(st.integers(0, len(handlers) - 1))
    h = handlers[i]
    if what in ("const", "cond"):
        j = draw(st.integers(0, len(h.ops) - 1))
        op = h.ops[j]
        if what == "cond":
            op = dataclasses.replace(op, threshold=op.threshold + draw(st.sampled_from([-1, 1])))
        else:
            op = dataclasses.replace(op, value=("const", draw(st.integers(-2, 3))))
        handlers[i] = HandlerSpec(h.name, h.kinds, (*h.ops[:j], op, *h.ops[j + 1 :]))
        return ProgramSpec(spec.states, tuple(handlers))
    if what == "drop_handler" and len(handlers) > 1:
        del handlers[i]
        return ProgramSpec(spec.states, tuple(handlers))
    states = spec.states
    names = [s for s, _ in states]
    if what == "add_state":
        states = (*states, ("s9", "counter"))
        names.append("s9")
    op = Op(
        what=draw(st.sampled_from(SERVABLE)),
        state=names[-1] if what == "add_state" else draw(st.sampled_from(names)),
        key=draw(st.sampled_from(KEYS)),
        value=draw(
            st.one_of(
                st.tuples(st.just("const"), st.integers(-2, 3)),
                st.tuples(st.just("read"), st.sampled_from(names), st.sampled_from(KEYS)),
            )
        ),
        threshold=draw(st.integers(-1, 3)),
    )
    kinds = tuple(sorted(draw(st.sets(st.sampled_from(KINDS), min_size=1, max_size=2))))
    handlers.insert(draw(st.integers(0, len(handlers))), HandlerSpec("hn", kinds, (op,)))
    return ProgramSpec(states, tuple(handlers))


def check_edit(spec: ProgramSpec, edited: ProgramSpec, log: list[dict]) -> rk.Result:
    the_log = rk.Log(log)
    old = rk.Program.from_source(render(spec), name="old")
    new = rk.Program.from_source(render(edited), name="new")
    recorded = rk.replay(old, the_log, history=True, require_kinds=False)
    got = rk.replay(new, the_log, reuse=recorded, require_kinds=False)
    assert_same(got, rk.replay(new, the_log, require_kinds=False))
    return got


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=programs(), log=events)
def test_a_reuse_of_any_edit_equals_a_full_replay(data, spec, log):
    got = check_edit(spec, data.draw(edits(spec)), log)
    event(f"re-ran as {got.reuse['rerun_as']}" if got.reuse["reused_stages"] else "in full")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=programs().map(servable), log=events)
def test_a_reuse_of_servable_programs_reuses_whatever_did_not_change(data, spec, log):
    got = check_edit(spec, data.draw(edits(spec)), log)
    reason = got.reuse["reuse_reason"]
    event(f"re-ran as {got.reuse['rerun_as']}" if got.reuse["reused_stages"] else "in full")
    # Programs of plain reads and writes are always served; only a whole change is replayed.
    assert reason is None or "every stage changed" in reason, reason


@pytest.mark.spark
def test_reuse_on_spark_reruns_in_the_driver_and_equals_a_full_replay(spark_session):
    log = rk.Log(SOCIAL)
    v1 = rk.replay(ANTISPAM, log, history=True)
    want = rk.replay(STRICTER, log)
    got = rk.replay(STRICTER, log, engine="spark", reuse=v1)
    assert got.reuse["rerun_stages"] == ["flag"] and got.reuse["rerun_as"] == "columns"
    assert any("as polars columns in the driver" in w for w in got.warnings)
    assert_same(got, want)
    # A re-run stage that does not lower runs its Python in the driver's loop.
    looped = STRICTER.replace('emit("spam", sender=e.src)', 'emit("spam", sender=str(e.src))')
    got = rk.replay(looped, log, engine="spark", reuse=v1)
    assert got.reuse["rerun_as"] == "loop"
    assert any("through the serial re-replay in the driver" in w for w in got.warnings)
    assert_same(got, rk.replay(looped, log))
    # Nothing to reuse (another log): the full replay runs on Spark.
    other = rk.Log(log.table.slice(0, 20_000))
    got = rk.replay(STRICTER, other, engine="spark", reuse=v1)
    assert got.reuse["reused_stages"] == [] and got.metrics.engine == "spark"
    assert_same(got, rk.replay(STRICTER, other))


RICH = """
from restream_kit import emit, on, param, state

limit = param("limit", 2)
scale = 1.5
seen = state.Counter()
last = state.Map(default=None)
big = state.Map(default=False)
name = state.Map(default="")
rare = state.Map(default=None)


@on("a")
def tally(e):
    seen[e.k] += e.v
    big[e.k] = e.v > 3
    name[e.k] = e.tag
    if e.v == 6:
        rare[e.k] = 1


@on("a", "b")
def remember(e):
    last[e.k] = e.v


@on("b", "a")
def judge(e):
    n = seen[e.k] - limit
    if n > 0 and big[e.k]:
        emit("hot", k=e.k, n=n, x=n * scale, tag=name[e.k], big=big[e.k])
    elif not big[e.k]:
        emit("cold", k=e.k, tag=name[e.k])
    if last[e.k]:
        emit("hot", k=e.k, n=0, x=0.5, tag="again", big=True)


@on("b")
def other(e):
    if seen[e.j] >= limit:
        emit("cold", k=e.j, tag=e.tag)
"""


def test_emit_only_rerun_stages_run_as_columns_row_for_row():
    import random

    rng = random.Random(7)
    rows = [
        {
            "ts": i // 3,
            "kind": rng.choice("ab"),
            "k": rng.randint(0, 9),
            "j": rng.randint(0, 9),
            "v": rng.randint(-2, 6),
            "tag": rng.choice(["x", "yy", ""]),
        }
        for i in range(3000)
    ]
    log = rk.Log(rows)
    v1 = rk.replay(RICH, log, history=True)
    for edit, rerun in (
        (('limit = param("limit", 2)', 'limit = param("limit", 4)'), ["judge", "other"]),
        (("elif not big[e.k]", "elif big[e.k] or n < -3"), ["judge"]),
        (("x=n * scale", "x=n * scale - 1"), ["judge"]),
    ):
        edited = RICH.replace(*edit)
        assert edited != RICH
        got = rk.replay(edited, log, reuse=v1)
        assert got.reuse["rerun_stages"] == rerun, got.reuse
        assert got.reuse["rerun_as"] == "columns", got.reuse["notes"]
        assert_same(got, rk.replay(edited, log))
        assert {t.schema.field("x").type for n, t in got.tables.items() if n == "hot"} <= {
            rk.Log([{"ts": 0, "kind": "a", "x": 1.0}]).table.schema.field("x").type
        }
    # Arithmetic on a value that may be None stays Python (it raises there).
    risky = RICH.replace("if last[e.k]:", "if rare[e.k] + 1 > 2:")
    with pytest.raises(rk.HandlerError):
        rk.replay(risky, log)
    with pytest.raises(rk.HandlerError):
        rk.replay(risky, log, reuse=v1)
