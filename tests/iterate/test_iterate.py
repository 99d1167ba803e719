"""Iterating on a rule (SPEC section 7): parameters, sweeps in one scan, explain.

Every sweep variant is compared with a separate replay with that value (the oracle), on
hand-written programs and on random ones (hypothesis, programs from ``naive``).
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive import events, programs, render

import restream_kit as rk
from restream_kit.cli import main as cli
from restream_kit.iterate.sweeps import partition
from restream_kit.model.errors import ProgramError

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_PROPERTY_EXAMPLES", "200")) // 2
SOCIAL = "sample_data/social_small.parquet"

ANTISPAM = """
from restream_kit import emit, on, state, param
import restream_kit as rk

friends = state.Map(default=False)
to_friends = state.Counter()
to_strangers = state.Counter()
ip_msgs = state.Counter()
ip_emails = state.Counter()
ratio = param("ratio", 2.0)
share = rk.param("share",
    0.2)


@on("friendship")
def befriend(e):
    friends[e.src, e.dst] = True
    friends[e.dst, e.src] = True


@on("message")
def tally_sender(e):
    if friends[e.src, e.dst]:
        to_friends[e.src] += 1
    else:
        to_strangers[e.src] += 1


@on("message")
def tally_ip(e):
    ip_msgs[e.ip] += 1
    if e.has_email:
        ip_emails[e.ip] += 1


def email_heavy(e):
    return ip_emails[e.ip] > share * ip_msgs[e.ip]


@on("message")
def flag(e):
    if to_strangers[e.src] > ratio * to_friends[e.src] and email_heavy(e):
        emit("spam", sender=e.src)
"""


def assert_same(got: rk.Result, want: rk.Result) -> None:
    assert sorted(got.tables) == sorted(want.tables)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.state == want.state


# -- parameters ---------------------------------------------------------------------------


def test_parameters_are_declared_reached_through_helpers_and_overridden():
    program = rk.Program.from_source(ANTISPAM, name="anti")
    assert {n: (p.variable, p.default) for n, p in program.params.items()} == {
        "ratio": ("ratio", 2.0),
        "share": ("share", 0.2),
    }
    # share reaches flag only through the helper email_heavy.
    assert dict(rk.plan(program).params) == {"ratio": ("flag",), "share": ("flag",)}
    default = rk.replay(program, SOCIAL)
    edited = rk.replay(ANTISPAM.replace('"ratio", 2.0', '"ratio", 3'), SOCIAL)
    overridden = rk.replay(program, SOCIAL, params={"ratio": 3})
    assert_same(overridden, edited)
    assert overridden.metrics.rows != default.metrics.rows


def test_a_bad_parameter_is_one_clear_error():
    program = rk.Program.from_source(ANTISPAM, name="anti")
    with pytest.raises(ProgramError, match=r"no parameter 'rate' \(its parameters: ratio, share\)"):
        rk.replay(program, SOCIAL, params={"rate": 3})
    with pytest.raises(ProgramError, match="module-level NAME = param"):
        rk.Program.from_source(
            "from restream_kit import param, on\n@on('a')\ndef h(e):\n    x = param('x', 1)\n"
        )
    with pytest.raises(ProgramError, match="must be a number"):
        rk.Program.from_source("from restream_kit import param\nx = param('x', [1])\n")


# -- sweeps -------------------------------------------------------------------------------


def test_sweep_runs_the_grid_in_one_scan_and_each_variant_equals_its_replay():
    result = rk.sweep(ANTISPAM, SOCIAL, ratio=[1.5, 2, 3], share=[0.1, 0.2])
    assert result.single_scan and not result.warnings
    assert result.shared_handlers == ("befriend", "tally_sender", "tally_ip")
    assert result.variant_handlers == ("flag",)
    assert [v.params for v in result] == [
        {"ratio": r, "share": s} for r in (1.5, 2, 3) for s in (0.1, 0.2)
    ]
    counts = set()
    for variant in result:
        assert_same(variant.result, rk.replay(ANTISPAM, SOCIAL, params=variant.params))
        assert set(variant.result["spam"]["handler"]) == {"flag"}
        counts.add(variant.result.metrics.rows["spam"])
    assert len(counts) == 6  # the thresholds matter: this could fail if variants leaked
    assert result.rows().height == 6


def test_a_varying_state_writer_and_its_readers_run_per_variant():
    source = """
from restream_kit import emit, on, state, param
step = param("step", 1)
seen = state.Counter()
total = state.Counter()

@on("message")
def count(e):
    seen[e.src] += 1
    total[e.src] += step

@on("message")
def report(e):
    if total[e.src] % 7 == 0:
        emit("hits", n=total[e.src], seen=seen[e.src])
"""
    program = rk.Program.from_source(source, name="steps")
    variant, states, tables = partition(program, ["step"])
    assert variant == {"count", "report"} and states == {"seen", "total"} and tables == {"hits"}
    result = rk.sweep(program, SOCIAL, step=[1, 2, 3])
    for v in result:
        assert_same(v.result, rk.replay(program, SOCIAL, params=v.params))


def test_a_parameter_used_at_module_level_cannot_be_swept():
    source = ANTISPAM.replace('\n\n@on("friendship")', '\nlimit = 2 * ratio\n\n@on("friendship")')
    with pytest.raises(ProgramError, match="parameter 'ratio' is used at module level"):
        rk.sweep(source, SOCIAL, ratio=[1, 2])


def test_a_varying_handler_that_schedules_runs_the_variants_apart_and_says_so():
    source = """
from restream_kit import emit, on, param, schedule
delay = param("delay", 10)

@on("message")
def later(e):
    if e.has_email:
        schedule("check", at=e.ts + delay, src=e.src)

@on("check")
def check(e):
    emit("checked", src=e.src)
"""
    result = rk.sweep(source, SOCIAL, delay=[5, 50])
    assert not result.single_scan
    assert "separate replays" in result.warnings[-1] and "'later'" in result.warnings[-1]
    for v in result:
        assert_same(v.result, rk.replay(source, SOCIAL, params=v.params))


def with_params(source: str, chosen: list[bool]) -> str:
    """The rendered program with its thresholds and increments turned into parameters p0, p1
    in the chosen handlers, each handler emitting to its own table (so that some handlers are
    shared and others vary)."""
    out, handler = [], -1
    for line in source.splitlines():
        if line.startswith("def h"):
            handler += 1
        line = line.replace('emit("out"', f'emit("out{handler}"')
        if handler >= 0 and chosen[handler % len(chosen)]:
            line = re.sub(r"> (-?\d+):$", "> p0:", line)
            line = re.sub(r"\+= (-?\d+)$", "+= p1", line)
        out.append(line)
    head = ["from restream_kit import param", 'p0 = param("p0", 0)', 'p1 = param("p1", 1)']
    return "\n".join(head + out) + "\n"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=programs(), log=events, chosen=st.lists(st.booleans(), min_size=1, max_size=4))
def test_every_sweep_variant_equals_its_own_replay_on_random_programs(spec, log, chosen):
    program = rk.Program.from_source(with_params(render(spec), chosen), name="prop")
    the_log = rk.Log(log)
    result = rk.sweep(program, the_log, p0=[-1, 0, 2], p1=[1, 3], require_kinds=False)
    assert len(result) == 6 and result.single_scan
    for v in result:
        assert_same(v.result, rk.replay(program, the_log, params=v.params, require_kinds=False))


def test_cli_sweep_prints_json_and_writes_each_variant(tmp_path, capsys):
    path = tmp_path / "anti.py"
    path.write_text(ANTISPAM)
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--log", SOCIAL, "--param", "ratio=1.5,3", "--param", "share=0.1"]
    assert cli([*argv, "--json", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [v["params"] for v in summary["variants"]] == [
        {"ratio": 1.5, "share": 0.1},
        {"ratio": 3, "share": 0.1},
    ]
    for v in summary["variants"]:
        want = rk.replay(ANTISPAM, SOCIAL, params=v["params"])
        assert v["tables"] == {"spam": want.metrics.rows["spam"]}
        assert v["outputs"]["spam"].startswith(str(out / f"ratio={v['params']['ratio']},share=0.1"))
    assert summary["single_scan"] is True
    assert cli(["sweep", str(path), "--log", SOCIAL, "--param", "ratio"]) == 2
    assert "expected NAME=V1,V2" in capsys.readouterr().err
    assert cli(["replay", str(path), "--log", SOCIAL, "--param", "ratio=3", "--json",
                "--no-record", "--quiet"]) == 0  # fmt: skip
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["tables"] == rk.replay(ANTISPAM, SOCIAL, params={"ratio": 3}).metrics.rows


def test_sweep_benchmark_quick_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "sweep.json"
    command = [
        sys.executable, "-m", "bench", "sweep", "--events", "20000", "--runs", "1",
        "--log", str(tmp_path / "social_20000.parquet"), "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, RESTREAM_HOME=str(tmp_path / ".restream"))
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert results["variants"] == 12 and results["variant_handlers"] == ["flag"]
    assert len(set(results["spam_rows"].values())) > 1
    assert re.search(r"ratio \d+\.\d+ \(target <= 3.0\)", proc.stdout), proc.stdout


# -- explain ------------------------------------------------------------------------------

COUNT_V1 = """
from restream_kit import emit, on, state
seen = state.Counter()

@on("message")
def count(e):
    seen[e.src] += 1

@on("message")
def flag(e):
    if seen[e.src] == 3:
        emit("third", src=e.src)
"""
#: v2 counts a message with email twice: a sender reaches 3 sooner.
COUNT_V2 = COUNT_V1.replace("seen[e.src] += 1", "seen[e.src] += 2 if e.has_email else 1")


def known_answer(row: dict):
    """What explain must say, computed from the log with polars alone: the sender's first
    message with email, and the count each version reads on the row's event."""
    import polars as pl

    log = rk.Log(SOCIAL)
    events = pl.from_arrow(log.table).filter(
        (pl.col("kind") == "message")
        & (pl.col("src") == row["src"])
        & (pl.col("lsn") <= row["lsn"])
    )
    first_email = events.filter(pl.col("has_email"))["lsn"][0]
    v1 = events.height  # flag runs after count: it reads the count with this message
    v2 = events.height + events.filter(pl.col("has_email")).height
    return first_email, v1, v2


def test_explain_names_the_emitter_the_reads_and_the_first_divergent_write():
    d = rk.diff(rk.replay(COUNT_V2, SOCIAL), rk.replay(COUNT_V1, SOCIAL))
    row = d.tables["third"].added.row(0, named=True)
    ex = rk.explain(COUNT_V2, COUNT_V1, f"third:{row['lsn']}:{row['seq']}:0", log=SOCIAL,
                    labels=("v2", "v1"))  # fmt: skip
    first_email, v1_count, v2_count = known_answer(row)
    assert (ex.side, ex.handler, ex.line, ex.fields) == ("a", "flag", 12, {"src": row["src"]})
    assert not ex.other_has_row
    (read,) = ex.reads
    assert (read.state, read.key, read.line) == ("seen", row["src"], 11)
    assert (read.value, read.baseline_value) == (3, v1_count) and v2_count == 3
    first = read.first_difference
    assert first.lsn == first_email and first.seq == 0
    assert [(w.handler, w.line) for w in first.writes] == [("count", 7)]
    assert first.value == first.baseline_value + 1
    text = ex.text()
    assert f"row third:{row['lsn']}:0:0 is in v2, not in v1" in text
    assert f"first differed after lsn {first_email}" in text
    assert ex.to_dict()["reads"][0]["first_difference"]["lsn"] == first_email


def test_explain_a_removed_row_and_from_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    (tmp_path / "v1.py").write_text(COUNT_V1)
    (tmp_path / "v2.py").write_text(COUNT_V2)
    for name in ("v1", "v2"):
        argv = ["replay", str(tmp_path / f"{name}.py"), "--log", SOCIAL, "--name", name]
        assert cli([*argv, "--quiet", "--json"]) == 0
    capsys.readouterr()
    d = rk.diff(rk.replay(COUNT_V2, SOCIAL), rk.replay(COUNT_V1, SOCIAL))
    row = d.tables["third"].removed.row(0, named=True)
    assert cli(["diff", "v2", "v1", "--explain", f"third:{row['lsn']}", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    first_email, _, _ = known_answer(row)
    assert out["emitted_by"]["handler"] == "flag" and out["emitted_by"]["run"].startswith("v1")
    assert out["reads"][0]["value"] == 3 and out["reads"][0]["other_value"] > 3
    assert out["reads"][0]["first_difference"]["lsn"] == first_email
    assert cli(["diff", "v2", "v1", "--explain", "third:x"]) == 2
    assert "expected TABLE:LSN:SEQ:N" in capsys.readouterr().err


# -- stage identities and the reuse decision ------------------------------------------------


def test_stage_identities_decide_what_an_edit_lets_a_re_replay_reuse():
    from restream_kit.history.identity import decide, stage_identities

    base = rk.Program.from_source(ANTISPAM, name="v1")
    recorded = stage_identities(base)
    assert len(set(recorded.values())) == len(recorded) == 4

    def decision(source, **kw):
        d = decide(rk.Program.from_source(source, name="v2"), recorded, **kw)
        return set(d.reused_stages), set(d.rerun_stages)

    # The final threshold: only flag re-runs.
    threshold = ANTISPAM.replace('"ratio", 2.0', '"ratio", 3.0')
    assert decision(threshold) == ({"befriend", "tally_sender", "tally_ip"}, {"flag"})
    # A comment and blank lines move every line: nothing changes.
    moved = ANTISPAM.replace('\n\n@on("friendship")', '\n# a note\n\n\n@on("friendship")')
    assert decision(moved) == ({"befriend", "tally_sender", "tally_ip", "flag"}, set())
    # An upstream edit re-runs it and everything downstream.
    upstream = ANTISPAM.replace("ip_msgs[e.ip] += 1", "ip_msgs[e.ip] += 2")
    assert decision(upstream) == ({"befriend", "tally_sender"}, {"tally_ip", "flag"})
    # A new handler that also writes ip_emails: tally_ip must re-run with it (shared state).
    added = ANTISPAM + '\n\n@on("friendship")\ndef bonus(e):\n    ip_emails[e.src] += 1\n'
    reused, rerun = decision(added)
    assert {"bonus", "tally_ip", "flag"} <= rerun and "tally_ip" not in reused
    # Another log: nothing can be reused, and the decision says so.
    other = decide(rk.Program.from_source(threshold, name="v2"), recorded, same_log=False)
    assert other.full and "another log" in other.reason


def test_a_spark_sweep_is_one_replay_of_the_sweep_program_and_equals_serial_replays(
    spark_session,
):
    result = rk.sweep(
        ANTISPAM, SOCIAL, engine="spark", options={"partitions": 2}, ratio=[1.5, 3], share=[0.1]
    )
    assert result.single_scan and "one scan of the log" in result.warnings[-1]
    assert {"flag__v0", "flag__v1"} <= set(result[0].result.metrics.path)
    for v in result:
        assert_same(v.result, rk.replay(ANTISPAM, SOCIAL, params=v.params))
