"""Worker faults on Spark: a killed Python worker or a failed task is retried, and the result
is still the serial one.

Faults come from ``$RESTREAM_FAULT`` (``_faults.inject_fault``), read by the Python workers:
on the pass path a task's stage is ``pass0``, ``pass1``... (the pass's index), on the prefix
path ``round1``, ``round2``...
Retries need ``spark.task.maxFailures`` > 1, which local mode takes from the master URL
(``local[2,4]``: 2 cores, 4 attempts per task), and classic PySpark allows one SparkContext
per process, so each case is a real child process running the command line, with the fault in
its environment (which the JVM, and so every Python worker it starts, inherits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.engines.spark._faults import FAULT_ENV, FAULT_LOG_ENV, parse_faults

SAMPLE = "sample_data/social_small.parquet"
EVENTS = 12_000  # the sample's first events, in two epochs: small, and still spam in both


def replay_with_faults(
    root, tmp_path, faults: str, *conf: str, path: str = "passes"
) -> tuple[dict, list[str]]:
    """Replay antispam on Spark in a child process with ``faults``; the summary and the
    faults that struck. ``path``: the pass path (``PassTask``s, stages ``pass0``,
    ``pass1``...) or the prefix path (``PrefixTask``s, stages ``round1``, ``round2``...)."""
    struck = tmp_path / "faults.log"
    env = {
        **os.environ,
        FAULT_ENV: faults,
        FAULT_LOG_ENV: str(struck),
        "RESTREAM_SPARK_PATH": path,
    }
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    args = ["replay", "examples/antispam.py", "--log", str(small_log(root, tmp_path)),
            "--engine", "spark", "--master", "local[2,4]", "--epoch", str(EVENTS // 2),
            "--out", str(tmp_path / "out"), "--json", "--quiet"]  # fmt: skip
    for item in conf:
        args += ["--conf", item]
    done = subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        capture_output=True, text=True, cwd=root, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = struck.read_text().splitlines() if struck.exists() else []
    return json.loads(done.stdout), lines


def small_log(root, tmp_path):
    path = tmp_path / "small.parquet"
    if not path.exists():
        pq.write_table(pq.read_table(root / SAMPLE).slice(0, EVENTS), path)
    return path


@pytest.fixture
def serial_spam(root, tmp_path):
    log = str(small_log(root, tmp_path))
    spam = rk.replay(root / "examples" / "antispam.py", log).tables["spam"]
    assert spam.num_rows > 0
    return spam


def struck_where(lines: list[str]) -> set[tuple[str, str]]:
    """(action, stage) of each fault that struck; every one must be a first attempt."""
    assert lines and all(" attempt=0 " in line for line in lines), lines
    return {(line.split()[0], line.split(" partition=")[0].split("stage=")[1]) for line in lines}


def test_a_killed_worker_and_a_failed_task_are_retried_to_the_serial_result(
    root, tmp_path, serial_spam
):
    # Antispam's passes: befriend, the fold of friends, tally_sender, then tally_ip and flag.
    # Partition ids of a pass's tasks depend on Spark's plan: strike every partition.
    summary, struck = replay_with_faults(root, tmp_path, "kill:stage=pass2;fail:stage=pass3")
    assert struck_where(struck) == {("kill", "pass2"), ("fail", "pass3")}
    assert len(struck) >= 4  # once per task of each of the two passes (two tasks or more)
    path = summary["path"]
    assert list(path)[2:] == ["tally_sender", "tally_ip", "flag"], path  # per stage
    assert all(what.startswith("parallel") for what in path.values()), path
    got = pq.read_table(tmp_path / "out" / "spam.parquet")
    assert got.to_pylist() == serial_spam.to_pylist() and got.num_rows > 0


def test_with_speculation_on_a_retried_replay_is_still_the_serial_result(
    root, tmp_path, serial_spam
):
    """On the prefix path this time. Local mode never launches speculative copies (Spark
    starts its speculation checker only off local mode, and never puts a copy on the host
    running the original), so this shows that the setting changes nothing; why copies would
    be harmless is in docs/errors.md ("Worker faults")."""
    summary, struck = replay_with_faults(
        root, tmp_path, "kill:stage=round2;fail:stage=round3", "spark.speculation=true",
        "spark.speculation.interval=100ms", "spark.speculation.multiplier=1.1", path="prefix",
    )  # fmt: skip
    assert struck_where(struck) == {("kill", "round2"), ("fail", "round3")}
    assert any(name.startswith("round 3") for name in summary["metrics"]["stages"])
    got = pq.read_table(tmp_path / "out" / "spam.parquet")
    assert got.to_pylist() == serial_spam.to_pylist()


def test_fault_specs_parse_and_bad_ones_are_refused():
    assert parse_faults("kill:stage=pass1:attempt=0; fail:partition=1") == [
        ("kill", {"stage": "pass1", "attempt": "0"}),
        ("fail", {"partition": "1"}),
    ]
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        parse_faults("explode:stage=pass1")
