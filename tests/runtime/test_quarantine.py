"""Poison events: ``on_error="stop" | "skip" | "quarantine"`` on every engine.

A handler run that raises under skip or quarantine is rolled back (its state changes, timed
writes, emitted rows and scheduled events never happen) and recorded in ``Result.quarantine``;
every engine must roll back and record exactly the serial engine's runs.
"""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_same_commits

import restream_kit as rk
from restream_kit.cli import main
from restream_kit.io.result import QUARANTINE_SCHEMA

# Three Spark steps: befriend (a map step), tally (partitioned by src, own state `sent`,
# blind sums into `total`, a timed write into `last`) and flag (reads all of them).
PROGRAM = """\
from restream_kit import emit, on, state

friends = state.Map(default=False)
sent = state.Counter()
total = state.Counter()
last = state.Map()

@on("friendship")
def befriend(e):
    friends[e.src, e.dst] = True
    if e.dst == 13:
        raise ValueError("unlucky friend")

@on("message")
def tally(e):
    sent[e.src] += 1
    total[e.ip] += 1
    last.set(e.src, e.n, at=e.ts + 5)
    emit("tallied", src=e.src, n=sent[e.src])
    if e.n % 7 == 3:
        raise RuntimeError(f"poison n={e.n}")

@on("message")
def flag(e):
    if friends[e.src, e.dst] and total[e.ip] > 2:
        emit("flagged", src=e.src, n=e.n)
    if sent[e.src] == 4:
        emit("fourth", src=e.src)
        1 / 0
"""


def poison_log(n: int = 240, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "ts": i // 2,
            "kind": "friendship" if rng.random() < 0.25 else "message",
            "src": rng.randrange(8),
            "dst": rng.randrange(15),
            "ip": "abcde"[rng.randrange(5)],
            "n": rng.randrange(50),
        }
        for i in range(n)
    ]


def _same(got: rk.Result, want: rk.Result) -> None:
    assert sorted(got.tables) == sorted(want.tables)
    for name in want.tables:
        assert got.tables[name].to_pylist() == want.tables[name].to_pylist(), name
    assert got.state == want.state
    assert got.quarantine.schema == QUARANTINE_SCHEMA
    assert got.quarantine.to_pylist() == want.quarantine.to_pylist()


@pytest.mark.parametrize("mode", ["skip", "quarantine"])
def test_every_engine_quarantines_the_serial_engines_runs(engine, mode):
    log = rk.Log(poison_log())
    want = rk.replay(PROGRAM, log, on_error=mode)
    handlers = set(want.quarantine.column("handler").to_pylist())
    assert handlers == {"befriend", "tally", "flag"}, "every step must have a poison event"
    with pytest.warns(rk.RestreamWarning, match="rolled back"):
        got = rk.replay(PROGRAM, log, engine=engine, on_error=mode)
    _same(got, want)
    if engine == "spark":
        assert not any("one task" in w for w in got.warnings), got.warnings
        assert all(what.startswith("parallel") for what in got.metrics.path.values())


def test_a_rolled_back_run_leaves_no_trace():
    """Writes, merges, timed writes and rows of a run that raises half-way never happen."""
    log = poison_log()
    result = rk.replay(PROGRAM, log, on_error="skip")
    q = result.quarantine.to_pylist()
    poisoned = {r["lsn"] for r in q if r["handler"] == "tally"}
    messages = [(lsn, e) for lsn, e in enumerate(log) if e["kind"] == "message"]
    assert poisoned == {lsn for lsn, e in messages if e["n"] % 7 == 3}
    kept = [e for lsn, e in messages if lsn not in poisoned]
    tallied = result.tables["tallied"].to_pylist()
    assert not {r["lsn"] for r in tallied} & poisoned
    for src in {e["src"] for e in kept}:
        assert result.state["sent"][src] == sum(1 for e in kept if e["src"] == src)
    for ip in {e["ip"] for e in kept}:
        assert result.state["total"][ip] == sum(1 for e in kept if e["ip"] == ip)
    # A sender's final `last` is the timed write of its last kept message that fell due.
    end = log[-1]["ts"]
    for src in result.state["last"]:
        due = [e["n"] for e in kept if e["src"] == src and e["ts"] + 5 <= end]
        assert result.state["last"][src] == due[-1]
    assert len(result.state["last"]) == len({e["src"] for e in kept if e["ts"] + 5 <= end})
    # flag raised after emitting "fourth": the row went with the rollback.
    assert "fourth" not in result.tables
    first = next(r for r in q if r["handler"] == "flag")
    assert first["error"] == "ZeroDivisionError: division by zero"
    assert first["code"] == "1 / 0" and first["line"] == 29
    assert first["traceback"].endswith(":29: 1 / 0")
    assert first["kind"] == "message" and '"src": ' in first["fields"]


def test_stop_names_the_event_its_fields_the_handler_and_the_line(engine):
    if engine == "spark":
        pass  # the spark_session fixture came with `engine`
    with pytest.raises(rk.HandlerError) as info:
        rk.replay(PROGRAM, poison_log(), engine=engine)
    err = info.value
    serial = rk.replay(PROGRAM, poison_log(), on_error="skip").quarantine.to_pylist()[0]
    assert (err.lsn, err.handler, err.lineno) == (serial["lsn"], serial["handler"], serial["line"])
    text = str(err)
    assert f"event lsn {err.lsn} at ts {err.ts} {{src=" in text and "dst=" in text
    assert text.count("\n") == 0 and f":{err.lineno}: handler {err.handler!r}" in text


def test_scheduled_events_are_rolled_back_too(engine):
    program = """\
from restream_kit import emit, on, schedule, state

opened = state.Counter()

@on("open")
def arm(e):
    opened[e.k] += 1
    schedule("close", at=e.ts + 10, k=e.k)
    if e.k == "bad":
        raise KeyError(e.k)

@on("close")
def close(e):
    emit("closed", k=e.k, n=opened[e.k])
    if e.k == "worse":
        raise ValueError("cannot close")
"""
    log = [{"ts": t, "kind": "open", "k": k} for t, k in enumerate(["a", "bad", "worse", "a"])]
    want = rk.replay(program, log, on_error="quarantine")
    q = want.quarantine.to_pylist()
    assert [(r["handler"], r["lsn"], r["seq"]) for r in q] == [("arm", 1, 0), ("close", 2, 1)]
    assert [r["k"] for r in want.tables["closed"].to_pylist()] == ["a", "a"]
    assert want.state["opened"] == {"a": 2, "worse": 1}
    _same(rk.replay(program, log, engine=engine, on_error="quarantine"), want)


def test_on_error_must_be_one_of_three():
    with pytest.raises(rk.RestreamError, match="on_error must be one of stop, skip, quarantine"):
        rk.replay(PROGRAM, poison_log(10), on_error="ignore")


def test_cli_quarantine_writes_the_table_with_the_outputs(tmp_path, capsys):
    program = tmp_path / "p.py"
    program.write_text(PROGRAM)
    log = tmp_path / "log.parquet"
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(poison_log()), log)
    out = tmp_path / "out"
    args = ["replay", str(program), "--log", str(log), "--quiet", "--out", str(out), "--json"]
    assert main([*args, "--on-error", "quarantine"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    want = rk.replay(str(program), str(log), on_error="quarantine").quarantine
    assert summary["quarantined"] == want.num_rows > 0
    assert pq.read_table(out / "_quarantine.parquet").to_pylist() == want.to_pylist()
    # skip keeps the table in the result only; stop fails with one line.
    assert main([*args, "--on-error", "skip", "--out", str(tmp_path / "skip")]) == 0
    assert not (tmp_path / "skip" / "_quarantine.parquet").exists()
    capsys.readouterr()
    assert main(args) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_workbench_shows_the_quarantine(tmp_path):
    from restream_kit.io.catalog import Catalog
    from restream_kit.workbench import Workbench
    from widgets.quarantine_view import QuarantineView, quarantine_text

    bench = Workbench(Catalog(tmp_path / "catalog.duckdb"))
    cell = bench.run("poison", PROGRAM, poison_log(), on_error="quarantine")
    assert cell.ok and cell.diff.empty
    view = QuarantineView()
    view.finish(cell)
    first = cell.result.quarantine.to_pylist()[0]
    assert view.widget.layout.display is None
    assert f"{cell.result.quarantine.num_rows} handler run(s) raised" in view.widget.value
    assert f">{first['handler']}</td>" in view.widget.value
    assert f"lsn {first['lsn']} " in quarantine_text(cell.result.quarantine)
    quiet = QuarantineView()
    quiet.finish(
        bench.run(
            "fine",
            "from restream_kit import on\n@on('message')\ndef h(e):\n    pass\n",
            poison_log(20),
        )
    )
    assert quiet.widget.layout.display == "none"


@pytest.mark.parametrize("engine", ["spark"], indirect=True)
def test_a_checkpointed_quarantine_on_spark_commits_the_serial_engines_epochs(engine, tmp_path):
    """With ``on_error`` and a checkpoint, Spark runs its passes once over the log, in
    parallel: every committed epoch (state, waiting timed writes, quarantined runs so far,
    rows) is the serial engine's, and a resume from the first epoch ends as serial does."""
    import json

    from restream_kit.io import checkpoint

    log = rk.Log(poison_log())
    options = dict(on_error="quarantine", epoch=60)
    want = rk.replay(PROGRAM, log, checkpoint=tmp_path / "serial", **options)
    with pytest.warns(rk.RestreamWarning, match="rolled back"):
        got = rk.replay(
            PROGRAM, log, engine=engine, checkpoint=tmp_path / "spark", partitions=2, **options
        )
    _same(got, want)
    assert all(
        what.startswith("parallel over 2 partitions")
        and what.endswith("each of the 4 epochs' ends committed to the checkpoint")
        for what in got.metrics.path.values()
    ), got.metrics.path
    assert_same_commits(tmp_path / "serial", tmp_path / "spark", range(4))
    assert len(checkpoint.read(tmp_path / "spark", 3).state["quarantined"]) == 40
    # As if killed after epoch 0 committed: the resume ends with the serial engine's result.
    ck = tmp_path / "spark"
    m = json.loads((ck / "manifest.json").read_text())
    m["epochs"], m["complete"] = m["epochs"][:1], False
    (ck / "manifest.json").write_text(json.dumps(m))
    with pytest.warns(rk.RestreamWarning, match="rolled back"):
        resumed = rk.replay(
            PROGRAM, log, engine=engine, checkpoint=ck, resume=True, partitions=2, **options
        )
    assert resumed.resumed_from_epoch == 1
    _same(resumed, want)
