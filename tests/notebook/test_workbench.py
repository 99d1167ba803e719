"""The workbench core: diff by row identity, the run catalog, baselines, the magics."""

from __future__ import annotations

import json
import os
import stat
import textwrap
import time

import polars as pl
import pytest

import restream_kit as rk
from restream_kit.io.catalog import Catalog
from restream_kit.io.compare import diff
from restream_kit.io.progress import Phase
from restream_kit.workbench import BackgroundRun, Workbench

SAMPLE = "sample_data/social_small.parquet"


def table(rows):
    base = {"lsn": 0, "ts": 0, "handler": "h", "seq": 0}
    return pl.DataFrame([{**base, **r} for r in rows])


def test_diff_by_row_identity():
    baseline = table(
        [
            {"lsn": 1, "x": "a"},
            {"lsn": 1, "x": "b"},
            {"lsn": 2, "x": "c"},
            {"lsn": 3, "x": "d"},
        ]
    )
    run = table(
        [
            {"lsn": 1, "x": "a"},
            {"lsn": 1, "x": "B"},
            {"lsn": 1, "x": "extra"},
            {"lsn": 3, "x": "d"},
            {"lsn": 3, "seq": 1, "x": "scheduled"},
        ]
    )
    d = diff({"t": run}, {"t": baseline})
    t = d.tables["t"]
    assert t.counts == {"added": 2, "removed": 1, "changed": 1}
    assert t.added.select("lsn", "seq", "n", "x").rows() == [
        (1, 0, 2, "extra"),
        (3, 1, 0, "scheduled"),
    ]
    assert t.removed.select("lsn", "n", "x").rows() == [(2, 0, "c")]
    assert t.changed.select("lsn", "n", "x", "x_baseline").rows() == [(1, 1, "B", "b")]
    assert not d.empty and diff({"t": run}, {"t": run}).empty


def test_diff_of_tables_present_on_one_side_only():
    d = diff({"new": table([{"lsn": 5}])}, {"old": table([{"lsn": 1}, {"lsn": 2}])})
    assert d.summary() == {
        "old": {"added": 0, "removed": 2, "changed": 0},
        "new": {"added": 1, "removed": 0, "changed": 0},
    }


def test_threshold_change_shows_as_removed_rows(root):
    v1 = rk.replay(root / "examples" / "antispam.py", str(root / SAMPLE))
    source = (
        (root / "examples" / "antispam.py").read_text().replace("0.2 * ip_msgs", "0.3 * ip_msgs")
    )
    v2 = rk.replay(rk.Program.from_source(source, "v2"), str(root / SAMPLE))
    d = diff(v2, v1)
    removed = d.tables["spam"].removed
    assert removed.height == v1.tables["spam"].num_rows - v2.tables["spam"].num_rows > 0
    assert d.tables["spam"].counts["added"] == 0
    assert set(removed["lsn"]) <= set(v1.tables["spam"].column("lsn").to_pylist())
    assert "removed" in d.text()


def test_catalog_records_and_reloads_a_run(root, tmp_path):
    catalog = Catalog(tmp_path / "home")
    program = rk.Program.from_file(root / "examples" / "antispam.py")
    log = rk.Log(str(root / SAMPLE))
    result = rk.replay(program, log)
    record = catalog.record(name="v1", program=program, log=log, engine="serial", result=result)
    found = catalog.find(program_sha=program.sha256, log_fingerprint=log.fingerprint)
    assert found == record
    loaded = catalog.load(found)
    assert loaded.tables["spam"].equals(result.tables["spam"]) and loaded.state == result.state
    assert loaded.metrics.events == result.metrics.events
    runs = catalog.runs()
    assert runs.select("name", "engine", "status").rows() == [("v1", "serial", "ok")]
    for path in (catalog.home, catalog.runs_dir, catalog.path):
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, path


def test_a_recorded_run_has_a_short_repr(root, tmp_path):
    bench = Workbench(Catalog(tmp_path / "catalog"))
    cell = bench.run("v1", (root / "examples" / "antispam.py").read_text(), rk.Log("social_small"))
    shown = repr(cell.record)
    assert shown.startswith("<run 'v1' ") and "serial, ok, outputs in " in shown, shown
    assert cell.record.program_sha not in shown and len(shown) < 200, shown
    assert repr(cell).startswith("<restream run 'v1' on serial: ok, 50,000 events in ")


def test_baseline_is_reused_when_program_and_log_are_unchanged(root, tmp_path):
    wb = Workbench(Catalog(tmp_path / "home"))
    source = (root / "examples" / "antispam.py").read_text()
    first = wb.run("v1", source, str(root / SAMPLE))
    again = wb.run("v1", source, str(root / SAMPLE))
    assert first.ok and again.ok
    # A serial run is its own baseline: one replay, one run in the catalog.
    assert first.baseline.result is first.result and first.baseline.record == first.record
    assert first.diff.empty and again.diff.empty
    assert wb.catalog.runs()["name"].to_list() == ["v1", "v1"]
    changed = wb.run("v2", source.replace("> 2 *", "> 3 *"), str(root / SAMPLE), baseline="v1")
    assert changed.baseline.reused and not changed.diff.empty
    # The serial replay of the run's own program is the baseline a difference from which is
    # an engine's error; another cell's (v1) differs because the program changed.
    assert first.baseline.same_program and not changed.baseline.same_program
    assert not changed.unexpected_difference
    assert changed.reuse["rerun_stages"] == ["flag"], changed.reuse
    assert wb.diff("v2", "v1").summary() == changed.diff.summary()
    # Another session (a new kernel) finds v1's run in the catalog.
    fresh = Workbench(Catalog(tmp_path / "home"))
    later = fresh.run("v3", source.replace("> 2 *", "> 3 *"), str(root / SAMPLE), baseline="v1")
    assert later.baseline.reused and later.reuse["rerun_stages"] == ["flag"], later.reuse
    assert later.diff.summary() == changed.diff.summary()


def test_background_run_can_be_cancelled(root, tmp_path):
    from restream_kit.io.progress import Progress

    wb = Workbench(Catalog(tmp_path / "home"))
    started = []
    source = (root / "examples" / "antispam.py").read_text()

    def observer(event):
        if isinstance(event, Progress):
            started.append(event)
            run.cancel()

    run = BackgroundRun(wb, "v1", source, str(root / SAMPLE), observer=observer, epoch=1000)
    cell = run.wait(timeout=120)
    assert started and isinstance(cell.error, Exception) and "cancelled" in str(cell.error)
    assert wb.catalog.runs().filter(pl.col("name") == "v1")["status"].to_list()[0] == "failed"


def test_progress_is_published_at_least_once_a_second_on_a_million_events(tmp_path):
    import time

    from sample_data.social import generate, write

    path = tmp_path / "m.parquet"
    write(generate(1_000_000, seed=3), path)
    stamps = []
    result = rk.replay(
        "examples/antispam.py", str(path), observer=lambda _e: stamps.append(time.monotonic())
    )
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert result.metrics.events == 1_000_000 and len(stamps) > 10
    assert max(gaps) < 1.0


# -- the magics, in a real IPython shell -----------------------------------------------------


@pytest.fixture
def shell(root, monkeypatch):
    from IPython.testing.globalipapp import get_ipython

    from widgets.magics import register

    monkeypatch.chdir(root)
    monkeypatch.setenv("RESTREAM_DISPLAY", "text")
    ip = get_ipython()
    ip.run_line_magic("load_ext", "restream_kit")
    register(ip)  # a fresh workbench, whose catalog is under this test's RESTREAM_HOME
    yield ip
    ip.run_line_magic("reset", "-f")


def test_cell_magic_replays_and_binds_the_run(shell, capsys):
    body = pathlib_text("examples/antispam.py")
    shell.run_cell_magic("restream", f"v1 --log {SAMPLE}", body)
    out = capsys.readouterr().out
    assert "befriend" in out and "identical" in out
    assert shell.user_ns["v1"].wait().result.tables["spam"].num_rows > 0


def test_a_spark_cell_on_a_million_events_runs_the_engines_own_epochs(
    shell, tmp_path, spark_session
):
    """Without ``--epoch`` a cell cuts a small log into about ten epochs, for the monitor; on
    a log of a million events Spark's prefix path runs its own few (ten tasks a round would
    cost it about twice), each round still split over the session's cores."""
    from restream_kit.engines.spark.prefix._driver import default_epoch
    from sample_data.social import generate, write

    path = tmp_path / "m.parquet"
    write(generate(1_000_000, seed=5), path)
    shell.run_cell_magic(
        "restream", f"big --log {path} --engine spark", pathlib_text("examples/antispam.py")
    )
    run = shell.user_ns["big"].wait()
    assert run.ok, run.error
    cores = spark_session.sparkContext.defaultParallelism
    epochs = -(-1_000_000 // default_epoch(1_000_000, cores))
    assert 1 < run.result.metrics.epochs == epochs < 10, run.result.metrics.epochs
    for stage, what in run.result.metrics.path.items():
        assert what == f"lowered to columns, parallel over {epochs} epochs ({epochs} tasks)", (
            stage,
            what,
        )


def test_plan_only_does_not_replay(shell, capsys):
    shell.run_cell_magic(
        "restream", f"p1 --log {SAMPLE} --plan-only", pathlib_text("examples/antispam.py")
    )
    out = capsys.readouterr().out
    assert "flag" in out and "events/s" not in out and "p1" not in shell.user_ns


def test_program_error_in_a_cell_is_one_line(shell):
    from IPython.core.error import UsageError

    with pytest.raises(
        UsageError, match=r"<restream bad>:4: write to 'counts', which is undeclared"
    ):
        shell.run_cell_magic(
            "restream",
            "bad --plan-only",
            textwrap.dedent(
                """\
            from restream_kit import on
            @on("message")
            def h(e): counts[e.src] += 1
            """
            ),
        )


def test_line_magic_lists_runs(shell, capsys):
    shell.run_cell_magic("restream", f"v1 --log {SAMPLE}", pathlib_text("examples/antispam.py"))
    runs = shell.run_line_magic("restream", "runs")
    # One row per cell run: a serial cell is its own baseline.
    assert set(runs["name"].to_list()) == {"v1"} and len(runs) == 1, runs
    assert runs["role"].to_list() == ["cell"], runs
    assert runs.columns == [
        "name", "engine", "events", "time", "when", "status", "size", "role", "run"
    ]  # fmt: skip
    assert runs["time"].str.ends_with(" s").all() and runs["when"].str.ends_with("UTC").all()


def test_a_spark_cell_above_the_compare_limit_says_so_and_compare_compares_it(
    shell, capsys, spark_session
):
    source = pathlib_text("examples/antispam.py").replace("> 2 *", "> 4 *")
    shell.run_cell_magic(
        "restream", f"big --log {SAMPLE} --engine spark --compare-limit 100", source
    )
    shown = capsys.readouterr().out
    assert "not compared with serial: the log has 50,000 events, above the compare limit" in shown
    assert "%restream compare big" in shown and "serial baseline" not in shown, shown
    shell.run_line_magic("restream", "compare big")
    shown = capsys.readouterr().out
    assert "diff against serial replay of big:" in shown and "identical" in shown, shown


def pathlib_text(path: str) -> str:
    from pathlib import Path

    return Path(path).read_text()


def test_the_monitor_says_each_phase_and_done_only_when_the_cell_ends(root, tmp_path):
    from widgets.monitor import ReplayMonitor

    monitor = ReplayMonitor("v1 on serial")
    statuses = []

    def status(event):
        monitor(event)
        statuses.append(monitor.status.value)

    wb = Workbench(Catalog(tmp_path / "home"))
    cell = wb.run("v1", (root / "examples" / "antispam.py").read_text(), SAMPLE, observer=status)
    assert cell.ok and [p for p, _t in cell.phases] == [
        "starting", "replaying", "comparing", "recording"
    ]  # fmt: skip
    assert not any("data-status='done'" in s for s in statuses), statuses
    assert "replayed in" in statuses[-3] and "comparing with" in statuses[-2], statuses
    monitor.finish(cell)
    assert "data-status='done'" in monitor.status.value and "done in" in monitor.status.value
    monitor(Phase("recording", "late"))  # a finished monitor keeps its words
    assert "done in" in monitor.status.value


def test_a_sweep_cell_compares_with_its_own_default_variant(root, tmp_path):
    wb = Workbench(Catalog(tmp_path / "home"))
    source = (root / "bench" / "programs" / "antispam_params.py").read_text()
    cell = wb.sweep("s", source, SAMPLE, values={"share": [0.1, 0.2, 0.3]})
    assert cell.ok and cell.baseline.result is cell.variant({"share": 0.2}).result
    assert cell.baseline.same_program
    assert cell.diff({"share": 0.2}).empty and not cell.diff({"share": 0.1}).empty
    assert wb.catalog.runs().height == 0  # no serial replay of the defaults besides the sweep


def test_a_parallel_run_above_the_compare_limit_is_not_compared_until_asked(
    root, tmp_path, spark_session
):
    wb = Workbench(Catalog(tmp_path / "home"), compare_limit=10)
    source = (root / "examples" / "antispam.py").read_text()
    log = rk.Log(SAMPLE)
    # The oracle's limit does not apply: a serial run is its own baseline.
    assert wb.run("own", source, log).diff.empty
    program = rk.Program.from_source(source.replace("> 2 *", "> 3 *"), "v9")
    cell = wb.run("v9", program, log, engine="spark")
    assert cell.ok and cell.diff is None and cell.baseline is None
    assert "above the compare limit of 10" in cell.not_compared
    assert "%restream compare v9" in cell.not_compared
    compared = wb.compare("v9")
    assert compared.diff.empty and compared.not_compared is None


def test_diff_view_fills_in_epoch_by_epoch_before_the_replay_ends(root, tmp_path):
    from types import SimpleNamespace

    from restream_kit.io.progress import EpochFinished, ReplayFinished
    from restream_kit.workbench import Baseline
    from widgets.diff_view import DiffView

    source = (root / "examples" / "antispam.py").read_text()
    v1 = rk.replay(rk.Program.from_source(source, "v1"), str(root / SAMPLE))
    view = DiffView()
    view.set_baseline(SimpleNamespace(baseline=Baseline("v1", v1, reused=False)))
    headers = []

    def observer(event):
        view(event)
        if isinstance(event, EpochFinished) and event.settled_ts is not None:
            headers.append(view.header.value)
        if isinstance(event, ReplayFinished):
            headers.append("finished")

    v2 = source.replace("0.2 * ip_msgs", "0.3 * ip_msgs")
    rk.replay(rk.Program.from_source(v2, "v2"), str(root / SAMPLE), observer=observer, epoch=10_000)
    partial = headers[: headers.index("finished")]
    assert len(partial) == 4 and all("so far" in h for h in partial)
    assert "differences found" in partial[-1] and "removed" in view.counts.value


@pytest.mark.parametrize("engine", ["serial", "spark"])
def test_a_cells_monitor_moves_ten_times_on_the_sample_log(
    engine, root, tmp_path, request, monkeypatch
):
    """As a ``%%restream`` cell runs it: epochs from ``log_epoch``, the monitor as observer.

    On Spark (the prefix path here) progress comes from tasks finishing while a round runs, and
    a round's stage bar is full once it has run every epoch. The monitor draws every step here
    (no 0.2 s throttle): on a loaded machine a 50k-event replay's steps can come within one
    throttle interval, and what this checks is that there are ten and the monitor shows each;
    the browser test watches the throttled monitor move on a longer replay."""
    import widgets.monitor
    from restream_kit.io.progress import Progress, Recorder, StageFinished
    from restream_kit.workbench import log_epoch
    from widgets.monitor import ReplayMonitor

    monkeypatch.setattr(widgets.monitor, "REDRAW_EVERY_S", 0.0)

    if engine == "spark":
        request.getfixturevalue("spark_session")
    log = rk.Log("social_small")
    monitor, recorder = ReplayMonitor("v1", engine), Recorder()
    labels = []
    monitor.events_label.observe(lambda change: labels.append(change["new"]), "value")

    def observer(event):
        recorder(event)
        monitor(event)

    bench = Workbench(Catalog(tmp_path / "catalog.duckdb"))
    cell = bench.run(
        "v1",
        (root / "examples" / "antispam.py").read_text(),
        log,
        engine=engine,
        epoch=log_epoch(log),
        observer=observer,
    )
    assert cell.ok, cell.error
    assert cell.result.metrics.epochs == 10
    values = [e.events_done for e in recorder.of(Progress)]
    assert values == sorted(values) and values[-1] == len(log)
    print(f"{engine}: {len(set(values))} progress values, {len(set(labels))} monitor labels")
    assert len(set(values)) >= 10, values
    assert len(set(labels)) >= 10, labels
    assert labels[-1] == f"100% of {len(log):,} events ({len(log):,} done)"
    if engine == "spark":
        assert any(name.startswith("round 3") for name in cell.result.metrics.stages)
        # Every stage bar ends full: each round ran every epoch.
        bars = {stage: bar.value for stage, bar in monitor._stage_bars.items()}
        assert len(bars) == 3 and set(bars.values()) == {10}, [
            (e.stage, e.epochs) for e in recorder.of(StageFinished)
        ]


@pytest.mark.parametrize("program", ["slow", "antispam"], ids=["pass path", "prefix path"])
def test_a_spark_replay_cancelled_just_before_its_job_starts_stops(program, root, spark_session):
    """Stop pressed between the engine's last check and the job's start (here: at the stage's
    start, in the replay's own thread) still cancels the job, on both Spark paths."""
    from restream_kit.io.progress import Cancelled, CancelToken, StageStarted

    slow = """\
from restream_kit import on, state

work = state.Counter()


@on("message")
def grind(e):
    x = 0
    for i in range(20000):
        x += i % 7
    work[e.src] += x % 3
"""
    source = slow if program == "slow" else (root / "examples" / "antispam.py").read_text()
    token = CancelToken()

    def cancel_at_the_first_stage(event):
        if isinstance(event, StageStarted) and not token.cancelled:
            token.cancel()

    started = time.monotonic()
    with pytest.raises(Cancelled):
        rk.replay(
            rk.Program.from_source(source, name=program),
            "social_small",
            engine="spark",
            cancel=token,
            observer=cancel_at_the_first_stage,
        )
    # The slow rule takes minutes on 2 cores; a lost cancel would run it to the end.
    assert time.monotonic() - started < 30


def test_a_cell_commits_its_checkpoint_as_it_goes(shell, tmp_path):
    from IPython.core.error import UsageError

    ck = tmp_path / "ck"
    line = f"c1 --log {SAMPLE} --epoch 10000 --checkpoint {ck} --checkpoint-every 20000"
    shell.run_cell_magic("restream", line, pathlib_text("examples/antispam.py"))
    run = shell.user_ns["c1"].wait()
    assert run.ok, run.error
    manifest = json.loads((ck / "manifest.json").read_text())
    assert [e["epoch"] for e in manifest["epochs"]] == [0, 1, 2, 3, 4] and manifest["complete"]
    with pytest.raises(UsageError, match="--checkpoint-every needs --checkpoint"):
        shell.run_cell_magic("restream", f"c2 --log {SAMPLE} --checkpoint-every 5s", "x = 1")
