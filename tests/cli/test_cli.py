"""The ``restream`` command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import restream_kit as rk

SAMPLE = "sample_data/social_small.parquet"


def restream(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_replay_writes_tables_and_prints_json(root, tmp_path):
    out = tmp_path / "out"
    done = restream(
        "replay",
        "examples/antispam.py",
        "--log",
        SAMPLE,
        "--engine",
        "serial",
        "--out",
        str(out),
        "--json",
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    table = pq.read_table(out / "spam.parquet")
    assert table.column_names == ["lsn", "ts", "handler", "seq", "sender"]
    assert summary["tables"] == {"spam": table.num_rows} and table.num_rows > 0
    assert summary["metrics"]["events"] == len(rk.Log(str(root / SAMPLE)))
    assert summary["metrics"]["realtime_multiple"] > 1
    expected = rk.replay(root / "examples" / "antispam.py", str(root / SAMPLE))
    assert table.to_pylist() == expected.tables["spam"].to_pylist()


def test_replay_text_summary_and_progress_lines(root):
    done = restream("replay", "examples/antispam.py", "--log", SAMPLE, "--epoch", "20000", cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replayed 50,000 events on serial")
    assert "spam:" in done.stdout
    lines = done.stderr.strip().splitlines()
    # not a terminal: plain lines, at least one per epoch, the last one complete
    assert len(lines) >= 3 and lines[-1].startswith("epoch 3/3 · 50,000/50,000 events (100%)")
    assert lines[-1].endswith("done")


@pytest.mark.parametrize(
    ("program", "log", "message"),
    [
        ("examples/antispam.py", "missing.parquet", "error: missing.parquet: log file not found"),
        ("nowhere.py", SAMPLE, "error: nowhere.py: cannot read program"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(root, program, log, message):
    done = restream("replay", program, "--log", log, cwd=root)
    assert done.returncode == 2
    assert done.stderr.strip() == message or done.stderr.strip().startswith(message)
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_handler_error_names_handler_line_and_event(root, tmp_path):
    program = tmp_path / "boom.py"
    program.write_text(
        "from restream_kit import on, state\n"
        "seen = state.Counter()\n\n"
        "@on('message')\n"
        "def boom(e):\n"
        "    seen[e.src] += 1\n"
        "    if seen[e.src] == 3:\n"
        "        raise ValueError(f'third message from {e.src}')\n"
    )
    done = restream("replay", str(program), "--log", SAMPLE, "--quiet", cwd=root)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"error: {program}:8: handler 'boom' raised ValueError: third message")
    assert "on 'message' event lsn" in line

    debug = restream("--debug", "replay", str(program), "--log", SAMPLE, cwd=root)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_a_kind_the_log_lacks_is_one_error_line_before_the_replay(root, tmp_path):
    log = tmp_path / "only_messages.csv"
    log.write_text("ts,kind,src,dst,ip,has_email\n1,message,1,2,a,true\n")
    done = restream("replay", "examples/antispam.py", "--log", str(log), cwd=root)
    assert done.returncode == 2
    # One line, at the program's own @on line, listing the kinds the log has; no progress.
    assert done.stderr.splitlines() == [
        "error: examples/antispam.py:12: no 'friendship' events in the log: handler(s) "
        "befriend will never run (the log's kinds: 'message')"
    ]
    assert done.stdout == ""


CLICKS = "time,user\n2026-03-01T09:30:01Z,b\n2026-03-01T09:30:00Z,a\n2026-03-01T09:30:02Z,a\n"
COUNT = """\
from restream_kit import emit, on, param, state

seen = state.Counter()
least = param("least", 1)

@on("click")
def count(e):
    seen[e.user] += 1
    if seen[e.user] >= least:
        emit("counts", user=e.user, n=seen[e.user])
"""


def test_own_data_with_ts_and_kind(root, tmp_path):
    """A CSV with an ISO time column called time and no kind column: refused with the way to
    name them, then read with --ts time --kind click by plan, replay and sweep."""
    (tmp_path / "clicks.csv").write_text(CLICKS)
    (tmp_path / "count.py").write_text(COUNT)
    refused = restream("replay", "count.py", "--log", "clicks.csv", "--quiet", cwd=tmp_path)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("error: clicks.csv, column 'ts': no 'ts' column (columns: ")
    assert 'name it with --ts time (ts="time" in Python)' in refused.stderr
    assert "--kind NAME" in refused.stderr

    own = ("--log", "clicks.csv", "--ts", "time", "--kind", "click")
    done = restream("replay", "count.py", *own, "--json", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tables"] == {"counts": 3}
    planned = restream("plan", "count.py", *own, "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    swept = restream("sweep", "count.py", *own, "--param", "least=1,2", "--json", cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    rows = [v["tables"].get("counts", 0) for v in json.loads(swept.stdout)["variants"]]
    assert rows == [3, 1]
    # sweep shows its progress on stderr as replay does, and --quiet leaves it out.
    assert "events (100%)" in swept.stderr
    quiet = restream(
        "sweep", "count.py", *own, "--param", "least=1,2", "--json", "--quiet", cwd=tmp_path
    )
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert json.loads(quiet.stdout)["variants"] == json.loads(swept.stdout)["variants"]


def test_spark_prints_progress_and_summary_as_serial_does(root, tmp_path):
    """``--engine spark`` in a process of its own: progress on stderr, the summary on stdout,
    and the JVM's own output in .restream/spark.log only."""
    home = tmp_path / "home"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "restream_kit",
            "replay",
            "examples/antispam.py",
            "--log",
            SAMPLE,
            "--engine",
            "spark",
            "--master",
            "local[1]",
            "--epoch",
            "25000",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        env={**os.environ, "RESTREAM_HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replayed 50,000 events on spark")
    assert "spam:" in done.stdout
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("epoch 2/2 · 50,000/50,000 events (100%)"), done.stderr
    assert lines[-1].endswith("done")
    jvm = (home / "spark.log").read_text()
    assert "log4j" in jvm and "events (" not in jvm and "replayed" not in jvm


def test_sparks_jvm_gone_is_one_line_saying_so_and_where_its_log_is(monkeypatch, capsys):
    """A JVM that died (its heap ran out) reaches the command line as py4j's network error:
    the line says the JVM stopped answering, what to set, and where Spark's log is."""
    import importlib

    from py4j.protocol import Py4JNetworkError

    from restream_kit.engines.spark import spark_log_path

    cli_main = importlib.import_module("restream_kit.cli.main")

    def jvm_gone(args):
        raise Py4JNetworkError("Answer from Java side is empty")

    monkeypatch.setitem(cli_main.COMMANDS, "runs", jvm_gone)
    assert cli_main.main(["runs"]) == cli_main.EXIT_INTERNAL_ERROR
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Spark's JVM stopped answering (Answer from Java side is empty)" in lines[0]
    assert "RESTREAM_SPARK_DRIVER_MEMORY" in lines[0] and str(spark_log_path()) in lines[0]
