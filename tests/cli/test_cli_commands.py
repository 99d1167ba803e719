"""The command line has the commands the README promises, and ``--help`` lists exactly those:
``plan``, ``replay``, ``diff``, ``score``, ``runs``, ``sweep``, ``bench`` and ``driver``
(``restream_kit/cli/main.py``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from restream_kit.cli import COMMANDS, build_parser

PROMISED = {"plan", "replay", "diff", "score", "runs", "sweep", "bench", "driver"}


def restream(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_help_lists_exactly_the_commands_that_exist():
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(commands.choices) == set(COMMANDS) == PROMISED
    out = restream("--help")
    assert out.returncode == 0, out.stderr
    listed = re.findall(r"^    (\w+)\s", out.stdout, flags=re.M)
    assert sorted(listed) == sorted(PROMISED), out.stdout
    for name in PROMISED:
        sub = restream(name, "--help")
        assert sub.returncode == 0 and f"usage: restream {name}" in sub.stdout, sub.stderr


def test_bench_in_a_checkout_runs_the_bench_package(root):
    listed = restream("bench", "--list", cwd=root)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^  serial\s+serial engine vs a plain-Python loop", listed.stdout, re.M)
    unknown = restream("bench", "nosuch", cwd=root)
    assert unknown.returncode == 2 and "unknown benchmark(s): nosuch" in unknown.stderr


def test_bench_builtin_times_the_serial_engine_against_a_plain_loop(in_tmp):
    out = restream("bench", "--builtin", "--runs", "1", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["events"] == 50_000 and result["spam_rows"] > 0 and result["ratio"] > 0
    text = restream("bench", "--builtin", "--runs", "1")
    assert re.search(r"both give the same [\d,]+ spam rows", text.stdout), text.stdout
    assert re.search(r"ratio plain/serial: \d+\.\d\d", text.stdout), text.stdout


def test_bench_builtin_refuses_what_only_a_checkout_has(in_tmp):
    out = restream("bench", "--builtin", "serial")
    assert out.returncode == 2
    assert out.stderr.startswith("error: bench --builtin serial: named benchmarks"), out.stderr
    assert restream("bench", "--builtin", "--runs", "0").returncode == 2


def test_plan_says_how_an_engine_will_run_each_stage_before_any_replay(root):
    one = restream("plan", str(root / "examples/plans/key_from_read.py"), "--engine", "spark")
    assert one.returncode == 0, one.stderr
    assert "On spark, before any replay:" in one.stdout
    # over_quota reads team_msgs by a looked-up team: every partition gets a copy of it.
    assert re.search(
        r"^  over_quota: parallel over N partitions \(by log order\), team_msgs copied whole "
        r"to each$",
        one.stdout,
        re.M,
    )
    ordinary = str(root / "bench/programs/ordinary.py")
    out = restream("plan", ordinary, "--engine", "spark", "--json")
    assert out.returncode == 0, out.stderr
    layout = json.loads(out.stdout)["engine_layout"]
    assert layout["engine"] == "spark"
    assert layout["stages"] == {
        "sender_rate": "parallel over N partitions by e.src",
        "ip_window": "parallel over N partitions by e.ip",
        "suspicious": "parallel over N partitions by e.ip",
    }
    serial = restream("plan", ordinary, "--engine", "serial")
    assert "whole program: one event at a time, in this process" in serial.stdout
