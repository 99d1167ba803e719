"""A run's history recorded on Spark equals the serial engine's, and re-replays reuse it.

Every Spark-recorded history is compared, probe by probe (signature, encoding, values,
absent flags, ``last_ts``), with the history the serial engine records for the same program
and log (the oracle); every re-replay from it with a full serial replay of the edited program.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from naive import events, programs, render
from test_reuse import ANTISPAM, SOCIAL, STRICTER, assert_same, edits, servable

import restream_kit as rk
from restream_kit.cli import main as cli
from restream_kit.history.recorder import History
from restream_kit.io.catalog import Catalog

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning"),
]

SPARK_EXAMPLES = max(4, int(os.environ.get("RESTREAM_PROPERTY_EXAMPLES", "200")) // 20)


def assert_same_history(got: History, want: History) -> None:
    """The two histories hold the same probes with the same values, encodings and files."""
    assert got is not None and want is not None
    assert list(got.probes) == list(want.probes)
    for sig, probe in want.probes.items():
        mine = got.probes[sig]
        assert mine.encoding == probe.encoding, sig
        assert mine.value.equals(probe.value), (sig, mine.value[:8], probe.value[:8])
        assert (mine.absent is None) == (probe.absent is None), sig
        if probe.absent is not None:
            assert mine.absent.equals(probe.absent), sig
        assert mine.python_values() == probe.python_values() or _same_nans(mine, probe)
    assert got.last_ts == want.last_ts
    assert got.identities == want.identities and got.stages == want.stages
    assert got.writers == want.writers and got.schedulers == want.schedulers


def _same_nans(a, b) -> bool:
    import math

    return all(
        x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))
        for x, y in zip(a.python_values(), b.python_values(), strict=True)
    )


def spark(program, log, **options):
    options.setdefault("require_kinds", False)  # generated logs may lack a handler's kind
    return rk.replay(program, log, engine="spark", history=True, **options)


def test_antispam_history_on_the_prefix_path_equals_the_serial_one_and_serves_a_rereplay(
    spark_session,
):
    log = rk.Log(SOCIAL)
    serial = rk.replay(ANTISPAM, log, history=True)
    got = spark(ANTISPAM, log, epoch=12_000)  # five epochs
    assert got.metrics.path["history"].startswith("recorded on Spark: 5 probe(s)")
    assert "lowered to columns" in next(iter(got.metrics.path.values()))
    assert_same_history(got.history, serial.history)
    assert_same(got, serial)
    again = rk.replay(STRICTER, log, engine="spark", reuse=got)
    assert again.reuse["rerun_stages"] == ["flag"]
    assert_same(again, rk.replay(STRICTER, log))


def test_antispam_history_on_the_pass_path_equals_the_serial_one(spark_session):
    log = rk.Log(SOCIAL)
    got = spark(ANTISPAM, log, path="passes")
    assert "evaluated by the tasks that run their reading handlers" in got.metrics.path["history"]
    assert_same_history(got.history, rk.replay(ANTISPAM, log, history=True).history)
    assert_same(rk.replay(STRICTER, log, reuse=got), rk.replay(STRICTER, log))


FLOATS = """
from restream_kit import emit, on, state

gap_avg = state.Map(default=0.0)
last_seen = state.Map(default=None)
seen = state.Counter()


@on("message")
def track(e):
    prev = last_seen.get(e.src)
    if prev is not None:
        gap_avg[e.src] = 0.9 * gap_avg[e.src] + 0.1 * (e.ts - prev) / 1000.0
    last_seen[e.src] = e.ts


@on("message", "friendship")
def count(e):
    seen[e.dst] += 1


@on("message")
def flag(e):
    if gap_avg.get(e.src, 9.0) < LIMIT and last_seen[e.src] is not None and seen[e.src] > 1:
        emit("bursty", sender=e.src, avg=round(gap_avg[e.src], 3))
"""


def test_a_per_key_float_rule_records_its_history_in_the_pass_tasks(spark_session):
    log = rk.Log(rk.Log(SOCIAL).table.slice(0, 20_000))
    v1 = FLOATS.replace("LIMIT", "40.0")
    got = spark(v1, log)
    assert "evaluated by the tasks" in got.metrics.path["history"]
    assert not any("serial replay in the driver" in w for w in got.warnings)
    serial = rk.replay(v1, log, history=True)
    assert_same_history(got.history, serial.history)
    assert_same(got, serial)  # recording changes nothing in the replay
    assert {s.state for s in got.history.probes} == {"gap_avg", "last_seen", "seen"}
    v2 = FLOATS.replace("LIMIT", "25.0")
    again = rk.replay(v2, log, engine="spark", reuse=got)
    assert again.reuse["rerun_stages"] == ["flag"]
    assert_same(again, rk.replay(v2, log))


EDGES = """
from restream_kit import emit, on, state

c = state.Counter(default=5)
m = state.Map(default=0)
g = state.Map(default=False)


@on("a")
def write(e):
    c[e.k] += e.v
    m[e.k] = e.v
    if e.v > 3:
        del m[e.k]
    if e.v == 0:
        g[e.k, e.j] = True


@on("a", "b")
def read(e):
    if c[e.k] > 7 and m[e.k] > 1 or g[e.k, e.j]:
        emit("x", k=e.k)
"""


def _edge_log(n: int = 3000, seed: int = 3) -> rk.Log:
    rng = random.Random(seed)
    return rk.Log(
        [
            {
                "ts": i // 3,
                "kind": rng.choice("ab"),
                "k": rng.randrange(40),
                "j": rng.randrange(3),
                "v": rng.randrange(6),
            }
            for i in range(n)
        ]
    )


@pytest.mark.parametrize("path", ["auto", "passes"])
def test_absent_keys_deletes_and_defaults_across_epochs(spark_session, path):
    log = _edge_log()
    got = spark(EDGES, log, epoch=700, path=path)  # five epochs
    serial = rk.replay(EDGES, log, history=True)
    if path == "auto":
        assert "as columns" in got.metrics.path["history"]
    assert any(p.absent is not None for p in serial.history.probes.values())
    assert_same_history(got.history, serial.history)
    # A merge state whose default is not 0 (``c``): its reads and final value add it once.
    assert_same(got, serial)


WINDOWS = """
from restream_kit import emit, minutes, on, state
from restream_kit.windows import sliding, tumbling

per_sender = tumbling(minutes(10), "count", table="sender_10min")
per_ip = sliding(minutes(5), "count")
hot = state.Map(default=0)


@on("message")
def track(e):
    per_sender.add(e.src)
    per_ip.add(e.ip)
    hot.set(e.src, e.dst, at=e.ts + 60_000)


@on("message")
def judge(e):
    if per_ip.value(e.ip) > LIMIT and hot[e.src] != e.dst:
        emit("ip_burst", ip=e.ip)
"""


def test_windows_and_timed_writes_record_on_spark(spark_session):
    log = rk.Log(rk.Log(SOCIAL).table.slice(0, 20_000))
    v1 = WINDOWS.replace("LIMIT", "30")
    got = spark(v1, log)
    serial = rk.replay(v1, log, history=True)
    assert got.history.probes, "the reads of the window and of hot are probes"
    assert_same_history(got.history, serial.history)
    assert_same(got, serial)
    v2 = WINDOWS.replace("LIMIT", "12")
    again = rk.replay(v2, log, engine="spark", reuse=got)
    assert again.reuse["rerun_stages"] == ["judge"]
    assert_same(again, rk.replay(v2, log))


def test_no_history_with_checkpoints_or_rolled_back_runs_as_on_serial(spark_session, tmp_path):
    log = _edge_log(300)
    got = spark(EDGES, log, on_error="skip")
    assert got.history is None
    assert any("history was not recorded" in w for w in got.warnings)


def test_the_cli_records_a_spark_history_and_reuses_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    (tmp_path / "v1.py").write_text(ANTISPAM)
    (tmp_path / "v2.py").write_text(STRICTER)
    base = ["--log", SOCIAL, "--quiet", "--json", "--engine", "spark"]
    assert cli(["replay", str(tmp_path / "v1.py"), *base, "--name", "v1", "--history"]) == 0
    capsys.readouterr()
    v1 = Catalog().latest("v1")
    assert_same_history(History.read(v1.outputs), rk.replay(ANTISPAM, SOCIAL, history=True).history)
    assert cli(["replay", str(tmp_path / "v2.py"), *base, "--name", "v2", "--reuse", "v1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rerun_stages"] == ["flag"] and summary["reused_run"] == "v1"
    assert summary["tables"] == {"spam": rk.replay(STRICTER, SOCIAL).metrics.rows["spam"]}


def test_explain_works_from_runs_made_on_spark(tmp_path, monkeypatch, capsys):
    """Runs replayed (and recorded) on Spark explain a difference exactly as serial runs do:
    the row's emitter, the state it read in both runs, and where those values first differed."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    (tmp_path / "v1.py").write_text(ANTISPAM)
    (tmp_path / "v2.py").write_text(STRICTER)
    for engine in ("spark", "serial"):
        base = ["--log", SOCIAL, "--quiet", "--json", "--engine", engine, "--history"]
        for name in ("v1", "v2"):
            assert (
                cli(["replay", str(tmp_path / f"{name}.py"), *base, "--name", f"{name}_{engine}"])
                == 0
            )
    capsys.readouterr()
    d = rk.diff(rk.replay(ANTISPAM, SOCIAL), rk.replay(STRICTER, SOCIAL))
    row = d.tables["spam"].added.row(0, named=True)  # in v1, not in the stricter v2
    said = {}
    for engine in ("spark", "serial"):
        argv = ["diff", f"v1_{engine}", f"v2_{engine}", "--explain", f"spam:{row['lsn']}", "--json"]
        assert cli(argv) == 1  # the runs differ
        said[engine] = json.loads(capsys.readouterr().out)
    assert said["spark"]["emitted_by"]["handler"] == "flag"
    assert said["spark"]["reads"] and said["spark"]["reads"] == said["serial"]["reads"]


@settings(
    max_examples=SPARK_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), spec=programs().map(servable), rows=events)
def test_random_programs_record_the_serial_history_on_spark_and_reuse_it(
    spark_session, data, spec, rows
):
    the_log = rk.Log(rows)
    old = rk.Program.from_source(render(spec), name="old")
    got = spark(old, the_log)
    event(got.metrics.path.get("history", "no history")[:40])
    serial = rk.replay(old, the_log, history=True, require_kinds=False)
    assert_same_history(got.history, serial.history)
    assert_same(got, serial)
    new = rk.Program.from_source(render(data.draw(edits(spec))), name="new")
    assert_same(
        rk.replay(new, the_log, engine="spark", reuse=got, require_kinds=False),
        rk.replay(new, the_log, require_kinds=False),
    )


def test_a_spark_cell_with_a_baseline_keeps_its_history_and_serves_the_next_cell(tmp_path):
    from restream_kit.workbench import Workbench

    bench = Workbench(Catalog(tmp_path / "catalog"))
    log = rk.Log(SOCIAL)
    assert bench.run("v1", ANTISPAM, log).ok
    v2 = bench.run("v2", STRICTER, log, baseline="v1", engine="spark", reuse=False)
    assert v2.ok, v2.error
    assert v2.result.history is not None
    assert v2.result.metrics.path["history"].startswith("recorded on Spark")
    assert_same_history(v2.result.history, rk.replay(STRICTER, log, history=True).history)
    # v3 re-replays against v2 (served by the serial baseline replay of v2 the workbench makes).
    v3_source = STRICTER.replace("2 * to_friends", "3 * to_friends")
    v3 = bench.run("v3", v3_source, log, baseline="v2", engine="spark")
    assert v3.ok, v3.error
    assert v3.reuse["rerun_stages"] == ["flag"], v3.reuse
    assert_same(v3.result, rk.replay(v3_source, log))
