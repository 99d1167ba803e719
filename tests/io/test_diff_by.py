"""Diffs by what the user means: keys only in A, only in B, in both with different rows.

The motivating case (issue 17): v2 of a rule flags every sender v1 flagged, only earlier, plus
new ones. A row diff calls that "added and removed"; a diff by sender says "none lost, all
earlier, these are new".
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import polars as pl
import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.io.compare import KeyDiff, TableKeyDiff, format_moved

HOUR = 3_600_000


def flagger(threshold: int) -> str:
    """Flag a sender once it has sent ``threshold`` messages."""
    return textwrap.dedent(
        f"""
        from restream_kit import state, on, emit

        sent = state.Counter()

        @on("message")
        def flag(e):
            sent[e.src] += 1
            if sent[e.src] == {threshold}:
                emit("flagged", sender=e.src)
        """
    )


@pytest.fixture(scope="module")
def log() -> rk.Log:
    # Sender 1 writes every hour, sender 2 every two hours, sender 3 twice only.
    rows = [{"ts": h * HOUR, "kind": "message", "src": 1} for h in range(6)]
    rows += [{"ts": h * HOUR + 1, "kind": "message", "src": 2} for h in range(0, 12, 2)]
    rows += [{"ts": h * HOUR + 2, "kind": "message", "src": 3} for h in (0, 1)]
    return rk.Log(sorted(rows, key=lambda r: r["ts"]))


def test_v2_flags_the_same_senders_earlier_and_one_more(log):
    v1 = rk.replay(flagger(4), log)
    v2 = rk.replay(flagger(2), log)
    by_row = rk.diff(v2, v1)
    assert by_row.tables["flagged"].counts == {"added": 3, "removed": 2, "changed": 0}
    d = rk.diff(v2, v1, by="sender", labels=("v2", "v1"))
    assert isinstance(d, KeyDiff)
    t = d.tables["flagged"]
    assert isinstance(t, TableKeyDiff) and t.by == ("sender",)
    assert t.only_a.rows() == [(3, 1 * HOUR + 2, 1)]  # sender, first_ts, rows
    assert t.only_b.height == 0
    assert t.changed.columns[:6] == [
        "sender",
        "first_ts_a",
        "first_ts_b",
        "moved_ms",
        "rows_a",
        "rows_b",
    ]
    assert t.changed.select("sender", "first_ts_a", "first_ts_b", "moved_ms").rows() == [
        (1, 1 * HOUR, 3 * HOUR, 2 * HOUR),
        (2, 2 * HOUR + 1, 6 * HOUR + 1, 4 * HOUR),
    ]
    assert t.moved() == {"earlier": 2, "later": 0, "same_time": 0}
    text = d.summary()
    assert (
        "flagged: differs: 1 keys only in v2, 0 only in v1, 2 in both with different rows" in text
    )
    assert "changed sender=1: first row 2 h earlier in v2 than in v1" in text
    assert "only in v2 sender=3: first at 1970-01-01T01:00:00.002Z, 1 row" in text


def test_the_same_run_has_no_key_differences(log):
    r = rk.replay(flagger(2), log)
    d = rk.diff(r, r, by=["sender"])
    assert d.empty and d.tables["flagged"].counts == {
        "only_a": 0,
        "only_b": 0,
        "changed": 0,
        "same": 3,
    }


def test_changed_keys_with_the_same_first_row_name_the_first_difference():
    a = {"t": pl.DataFrame({"lsn": [1, 5], "ts": [10, 50], "handler": "h", "seq": 0, "k": "x"})}
    b = {"t": pl.DataFrame({"lsn": [1, 7], "ts": [10, 70], "handler": "h", "seq": 0, "k": "x"})}
    t = rk.diff(a, b, by="k").tables["t"]
    assert t.changed.rows(named=True) == [
        {
            "k": "x",
            "first_ts_a": 10,
            "first_ts_b": 10,
            "moved_ms": 0,
            "rows_a": 2,
            "rows_b": 2,
            "first_diff_ts": 50,
        }
    ]


def test_several_fields_and_null_keys():
    a = {"t": pl.DataFrame({"lsn": [0, 1], "ts": [0, 1], "handler": "h", "seq": 0,
                            "u": [1, None], "ip": ["a", "b"]})}  # fmt: skip
    b = {"t": pl.DataFrame({"lsn": [0, 2], "ts": [0, 2], "handler": "h", "seq": 0,
                            "u": [1, None], "ip": ["a", "c"]})}  # fmt: skip
    t = rk.diff(a, b, by="u,ip").tables["t"]
    assert t.by == ("u", "ip")
    assert t.only_a.select("u", "ip").rows() == [(None, "b")]
    assert t.only_b.select("u", "ip").rows() == [(None, "c")]
    assert t.same == 1


def test_a_table_on_one_side_only_has_all_its_keys_on_that_side():
    a = {"t": pl.DataFrame({"lsn": [0], "ts": [0], "handler": "h", "seq": 0, "k": [1]})}
    t = rk.diff(a, {}, by="k").tables["t"]
    assert t.only_a.height == 1 and t.only_b.height == 0


def test_a_field_no_table_has_is_an_error_naming_the_fields(log):
    r = rk.replay(flagger(2), log)
    with pytest.raises(rk.RestreamError, match="by sendr: no table has that field .*sender"):
        rk.diff(r, r, by="sendr")


def test_to_dict_is_json_with_readable_times(log):
    d = rk.diff(rk.replay(flagger(2), log), rk.replay(flagger(4), log), by="sender")
    out = json.loads(json.dumps(d.to_dict()))
    changed = out["tables"]["flagged"]["changed"][0]
    assert changed["first_time_a"] == "1970-01-01T01:00:00.000Z"
    assert changed["moved_ms"] == 2 * HOUR
    assert out["tables"]["flagged"]["counts"]["only_a"] == 1


def test_format_moved_in_words():
    assert format_moved(3 * HOUR, "v2", "v1") == "3 h earlier in v2 than in v1"
    assert format_moved(-90_000) == "1.5 min later in A than in B"
    assert format_moved(0) == "at the same time in A and B"


def test_row_diff_text_does_not_show_the_identity_rank(log):
    text = rk.diff(rk.replay(flagger(2), log), rk.replay(flagger(4), log)).text()
    assert "added: {'time': '1970-01-01T01:00:00.000Z', 'lsn'" in text and "'n':" not in text


def test_a_field_called_n_is_compared_not_replaced_by_the_rank():
    a = {"t": pl.DataFrame({"lsn": [0, 0], "ts": 0, "handler": "h", "seq": 0, "n": [5, 6]})}
    b = {"t": pl.DataFrame({"lsn": [0, 0], "ts": 0, "handler": "h", "seq": 0, "n": [5, 7]})}
    t = rk.diff(a, b).tables["t"]
    assert t.rank == "_n"
    assert t.changed.select("_n", "n", "n_baseline").rows() == [(1, 6, 7)]


def run(root, *args):
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )


def test_command_line_diff_by_key_and_replay_with_a_baseline(root, tmp_path, log):
    data = tmp_path / "log.parquet"
    pq.write_table(log.table, data)
    for name, threshold in (("v1", 4), ("v2", 2)):
        (tmp_path / f"{name}.py").write_text(flagger(threshold))
    v1, v2 = tmp_path / "out1", tmp_path / "out2"
    done = run(root, "replay", str(tmp_path / "v1.py"), "--log", str(data), "--out", str(v1))
    assert done.returncode == 0, done.stderr
    done = run(
        root,
        "replay",
        str(tmp_path / "v2.py"),
        "--log",
        str(data),
        "--out",
        str(v2),
        "--baseline",
        str(v1),
        "--by",
        "sender",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert f"compared with {v1}:" in done.stdout
    assert "changed sender=1: first row 2 h earlier in this run than in" in done.stdout

    same = run(root, "diff", str(v1), str(v1), "--by", "sender")
    assert same.returncode == 0 and "same keys, same rows" in same.stdout
    differs = run(root, "diff", str(v2), str(v1), "--by", "sender", "--json")
    assert differs.returncode == 1, differs.stderr
    out = json.loads(differs.stdout)
    assert out["tables"]["flagged"]["counts"] == {
        "only_a": 1,
        "only_b": 0,
        "changed": 2,
        "same": 0,
    }
    by_row = run(root, "diff", str(v2), str(v1))
    assert by_row.returncode == 1 and "+3 added, -2 removed" in by_row.stdout
    missing = run(root, "diff", str(v2), str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'nope'}: ")


def test_every_command_line_option_has_help():
    from restream_kit.cli import build_parser
    from restream_kit.engines import ENGINES

    parser = build_parser()
    assert all(action.help for action in parser._actions)
    commands = next(a for a in parser._actions if a.dest == "command")
    for name, sub in commands.choices.items():
        for action in sub._actions:
            assert action.help, f"restream {name} {action.option_strings or action.dest}"
            if action.dest == "engine":
                assert tuple(action.choices) == ENGINES
