"""The ``restream`` command line, run as a real subprocess."""

from __future__ import annotations

import json
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


def test_missing_kind_is_a_warning_not_an_error(root, tmp_path):
    log = tmp_path / "only_messages.csv"
    log.write_text("ts,kind,src,dst,ip,has_email\n1,message,1,2,a,true\n")
    done = restream("replay", "examples/antispam.py", "--log", str(log), cwd=root)
    assert done.returncode == 0
    # Once, at the program's own @on line, listing the kinds the log has.
    warning = (
        "warning: examples/antispam.py:12: no 'friendship' events in the log: handler(s) "
        "befriend will never run (the log's kinds: 'message')"
    )
    assert done.stderr.count(warning) == 1
