"""A smoke test of the benchmark harness (python -m bench): it runs and both sides agree.

Timings over 20,000 events say nothing, so nothing here asserts on speed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_serial_vs_loop_quick_run(tmp_path):
    out = tmp_path / "serial_vs_loop.json"
    command = [
        sys.executable, "-m", "bench", "serial",
        "--events", "20000", "--runs", "1",
        "--log", str(tmp_path / "social_20000.parquet"),
        "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, RESTREAM_HOME=str(tmp_path / ".restream"))
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"outputs agree: [\d,]+ spam rows from [\d,]+ senders", proc.stdout), (
        proc.stdout
    )
    match = re.search(r"ratio plain/serial: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout
    results = json.loads(out.read_text())
    assert results["events"] == 20_000 and results["runs"] == 1
    assert results["spam_rows"] > 0
    assert set(results["median_s"]) == {"plain loop", "serial engine"}
    assert abs(results["ratio"] - float(match.group(1))) < 0.01


def test_unknown_benchmark_is_refused():
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "nosuch"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown benchmark" in proc.stderr


def test_spark_vs_serial_quick_run(tmp_path):
    """The Spark benchmark end to end on a small log: both engines agree, and it reports the
    ratio, the per-stage seconds, the planner's prediction and both targets."""
    out = tmp_path / "spark_vs_serial.json"
    command = [
        sys.executable, "-m", "bench", "spark",
        "--events", "20000", "--runs", "1", "--epoch", "5000",
        "--log", str(tmp_path / "social_20000.parquet"),
        "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, RESTREAM_HOME=str(tmp_path / ".restream"))
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "outputs agree" in proc.stdout and "the planner predicts" in proc.stdout, proc.stdout
    results = json.loads(out.read_text())
    assert results["events"] == 20_000 and results["spam_rows"] > 0
    assert results["sides"]["spark"]["epochs"] == 4
    assert any(name.startswith("round 3") for name in results["spark_stages_s"])
    assert results["predicted_speedup_p2"] > 1
    assert isinstance(results["speed_ok"], bool) and results["memory_ok"] is True


def spark_rules(tmp_path, *args) -> tuple[dict, str]:
    """``python -m bench spark-rules`` on a 3,000-event log, one run a side: its JSON report
    and what it printed."""
    out = tmp_path / "spark_rules.json"
    command = [
        sys.executable, "-m", "bench", "spark-rules", "--events", "3000", "--runs", "1",
        "--log", str(tmp_path / "social_3000.parquet"), "--out", str(out), *args,
    ]  # fmt: skip
    env = dict(os.environ, RESTREAM_HOME=str(tmp_path / ".restream"))
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_spark_rules_quick_run(tmp_path):
    """The rules benchmark end to end, warm and cold, on a small log: both engines agree on
    every rule (an ordinary one and a broadcast read), and it reports the ratio, what ran
    and the time per stage."""
    results, _out = spark_rules(tmp_path, "--rules", "ordinary,teams")
    for rule in ("ordinary", "teams"):
        warm, cold = results["rules"][rule]["warm"], results["rules"][rule]["cold"]
        assert warm["ratio"] > 0 and cold["ratio"] > 0 and cold["spark_first_process_s"] > 0
        assert all(what.startswith("parallel") for what in warm["path"].values()), warm["path"]
        assert any(stage.endswith("(tasks, summed)") for stage in warm["stage_s"])


def test_spark_rules_times_resumes_and_on_error(tmp_path):
    """``--resume`` and ``--on-error``: a resume after half the checkpointed epochs, checked
    equal to serial, and every side guarded, the passes in the serial engine's guarded loop."""
    results, printed = spark_rules(
        tmp_path, "--rules", "ordinary", "--no-cold", "--checkpoint", "--resume",
        "--on-error", "skip",
    )  # fmt: skip
    assert results["on_error"] == "skip"
    warm = results["rules"]["ordinary"]["warm"]
    assert warm["checkpoint_cost"] > 0 and warm["resume_cost"] > 0
    assert all("guarded loop" in what for what in warm["path"].values()), warm["path"]
    assert "resumed after 5 of 10 epochs" in printed


def test_spark_rules_kills(tmp_path):
    """``--kills``: three killed whole processes, each resumed and checked equal to the
    uncheckpointed result; the timed process's commits followed in its manifest."""
    results, printed = spark_rules(
        tmp_path, "--rules", "antispam", "--no-cold", "--kills", "--checkpoint-every", "5s"
    )
    kills = results["rules"]["antispam"]["kills"]
    assert [k["killed_at"] for k in kills["kills"]] == [0.25, 0.5, 0.75]
    assert all(k["identical"] for k in kills["kills"])
    assert kills["commit_times"][-1][1] == 3000  # the last commit: the whole log
    assert kills["plain_cpu_s"] > 0 and kills["whole_cpu_s"] > 0
    assert "commits of the whole process" in printed


@pytest.mark.parametrize(("rule", "events"), [("ewma", 20_000), ("teams", 100_000)])
def test_hand_job_quick_run(tmp_path, rule, events):
    """The engine against the hand-written job: all three sides agree (the job's rows are
    checked field by field against serial's), and it reports the ratios and what ran."""
    out = tmp_path / "hand_job.json"
    command = [
        sys.executable, "-m", "bench", "hand-job", "--rule", rule, "--events", str(events),
        "--runs", "1", "--log", str(tmp_path / f"social_{events}.parquet"), "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, RESTREAM_HOME=str(tmp_path / ".restream"))
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["rule"] == rule and report["rows"] > 0
    assert report["engine_vs_hand_job"] > 0 and report["engine_vs_serial"] > 0
    assert report["hand_job_vs_serial"] > 0
    assert all(what.startswith("parallel") for what in report["path"].values()), report["path"]
    assert "hand-written job" in proc.stdout


def test_cells_quick_run(tmp_path):
    """Serial only: a kernel, three %%restream cells, each checked before it is timed."""
    out = tmp_path / "cells.json"
    command = [sys.executable, "-m", "bench", "cells", "--engines", "serial", "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(out.read_text())["cells"]
    assert [(c["cell"], c["position"]) for c in cells] == [
        ("v1", "first"),
        ("v2", "later"),
        ("v3", "later"),
    ]
    for c in cells:
        assert c["done_s"] >= c["replay_wall_s"] > 0
        # The ratio is printed to one decimal, its two times to the millisecond.
        assert c["ratio"] == pytest.approx(c["done_s"] / c["replay_wall_s"], rel=0.05, abs=0.05)


def test_scale_notebook_mode_replays_the_whole_log_in_a_kernel(tmp_path):
    """``bench scale --modes notebook``: each size's rule runs as a %%restream cell in a kernel,
    over the whole log, and the kernel's peak is what the ratio divides."""
    from sample_data.social_scale import write_scaled

    for events in (2000, 4000):
        write_scaled(tmp_path / f"social_scale_{events}_500.parquet", events, unordered=True)
    out = tmp_path / "scale.json"
    command = [sys.executable, "-m", "bench", "scale", "--sizes", "2000,4000", "--users", "500"]
    command += ["--modes", "notebook", "--runs", "cold", "--data", str(tmp_path), "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    for events in (2000, 4000):
        got = result["runs"][str(events)]["notebook"]["cold"]
        assert (got["run_status"], got["events"]) == ("ok", events)
        assert got["peak_mb"] > 100 and got["cpu_s"] > 0
    peaks = [result["runs"][size]["notebook"]["cold"]["peak_mb"] for size in ("4000", "2000")]
    assert result["ratio"]["notebook"]["cold"] == pytest.approx(peaks[0] / peaks[1], rel=0.01)


def test_kills_timeline_reads_each_new_commit(tmp_path):
    """``--kills`` follows the whole process's commits in its manifest: each commit is taken
    once, with the events it had committed, in the order they came."""
    import restream_kit as rk
    from bench._kills import _committed

    program = rk.Program.from_file(ROOT / "examples" / "antispam.py")
    log = rk.Log(ROOT / "sample_data" / "social_small.parquet")
    ck, timeline = tmp_path / "ck", []
    _committed(ck, 0.0, timeline)  # no manifest yet: nothing
    assert timeline == []
    rk.replay(program, log, epoch=len(log) // 2, checkpoint=ck)
    _committed(ck, 0.0, timeline)
    _committed(ck, 0.0, timeline)  # the same commit seen again is not a new one
    assert [done for _, done in timeline] == [len(log)]
