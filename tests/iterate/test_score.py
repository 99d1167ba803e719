"""Scoring against labels (issue 35): every score equals a hand-written DuckDB query over the
same tables, on hand-made tables (several alerts per key, labels with no alert, alerts before
the label time, an empty table, keys of two fields) and on a serial replay of the sample
anti-spam rule with the sample labels."""

from __future__ import annotations

import math

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.iterate.score import changed_keys, pareto_front, score
from restream_kit.model.errors import RestreamError

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _alerts(rows: list[tuple], fields: tuple[str, ...] = ("user",)) -> pa.Table:
    """An output table: lsn, ts, handler, seq, then the fields, from (ts, *fields) rows."""
    columns = {
        "lsn": pa.array(range(len(rows)), pa.int64()),
        "ts": pa.array([r[0] for r in rows], pa.int64()),
        "handler": pa.array(["flag"] * len(rows), pa.string()),
        "seq": pa.array([0] * len(rows), pa.int64()),
    }
    for i, f in enumerate(fields):
        columns[f] = pa.array([r[i + 1] for r in rows])
    return pa.table(columns)


def sql_scores(alerts: pa.Table, labels: pa.Table, by: list[str], window: int | None) -> dict:
    """The scores of one table, by hand in SQL (labels: the by fields and ts, all positive)."""
    con = duckdb.connect()
    con.register("alerts", alerts)
    con.register("labels", labels)
    keys = ", ".join(by)
    on = " AND ".join(f"k.{f} = l.{f}" for f in by)
    con.execute(f"""
        CREATE TABLE k AS SELECT {keys}, min(ts) AS first_ts, count(*) AS n
        FROM alerts GROUP BY {keys};
        CREATE TABLE l AS SELECT {keys}, min(ts) AS label_ts FROM labels GROUP BY {keys};
        CREATE TABLE tp AS SELECT k.*, l.label_ts, k.first_ts - l.label_ts AS delay
        FROM k JOIN l ON {on};
    """)
    one = lambda q: con.execute(q).fetchone()[0]  # noqa: E731
    tp = one("SELECT count(*) FROM tp")
    out = {
        "tp": tp,
        "fp": one("SELECT count(*) FROM k") - tp,
        "fn": one("SELECT count(*) FROM l") - tp,
        "alerts": one("SELECT count(*) FROM alerts"),
        "alerts_on_positives": one("SELECT coalesce(sum(n), 0) FROM tp"),
        "early": one("SELECT count(*) FROM tp WHERE delay < 0"),
        "delay_p50_ms": one("SELECT quantile_cont(delay, 0.5) FROM tp WHERE delay >= 0"),
        "delay_p90_ms": one("SELECT quantile_cont(delay, 0.9) FROM tp WHERE delay >= 0"),
    }
    if window is not None:
        out["timely"] = one(f"SELECT count(*) FROM tp WHERE delay <= {window}")
        out["late"] = one(f"SELECT count(*) FROM tp WHERE delay > {window}")
    outcomes = con.execute(f"""
        SELECT {keys}, 'tp' AS outcome FROM tp
        UNION ALL SELECT {keys}, 'fp' FROM k WHERE ({keys}) NOT IN (SELECT ({keys}) FROM l)
        UNION ALL SELECT {keys}, 'fn' FROM l WHERE ({keys}) NOT IN (SELECT ({keys}) FROM k)
        ORDER BY ALL
    """).fetchall()
    return out, outcomes


def sql_buckets(alerts: pa.Table, labels: pa.Table, by: list[str], width: int) -> list[tuple]:
    con = duckdb.connect()
    con.register("alerts", alerts)
    con.register("labels", labels)
    keys = ", ".join(by)
    using = ", ".join(by)
    return con.execute(f"""
        WITH k AS (SELECT {keys}, min(ts) AS first_ts FROM alerts GROUP BY {keys}),
        l AS (SELECT {keys}, min(ts) AS label_ts FROM labels GROUP BY {keys}),
        r AS (SELECT ts - ts % {width} AS b, count(*) AS alerts FROM alerts GROUP BY b),
        f AS (SELECT first_ts - first_ts % {width} AS b, count(*) AS first_alerted,
                     count(l.label_ts) AS tp
              FROM k LEFT JOIN l USING ({using}) GROUP BY b),
        p AS (SELECT label_ts - label_ts % {width} AS b, count(*) AS positives,
                     count(k.first_ts) AS caught
              FROM l LEFT JOIN k USING ({using}) GROUP BY b),
        bs AS (SELECT b FROM r UNION SELECT b FROM f UNION SELECT b FROM p)
        SELECT bs.b, coalesce(alerts, 0), coalesce(first_alerted, 0), coalesce(tp, 0),
               coalesce(positives, 0), coalesce(caught, 0)
        FROM bs LEFT JOIN r USING (b) LEFT JOIN f USING (b) LEFT JOIN p USING (b) ORDER BY bs.b
    """).fetchall()


def _ours(s, table: str, by: list[str]) -> tuple[dict, list[tuple]]:
    t = s.tables[table]
    keys = s.by_key.filter(pl.col("table") == table).select(*by, "outcome").sort(pl.all())
    return t.to_dict(), [tuple(r) for r in keys.iter_rows()]


def _check(s, table, alerts, labels, by, window=None):
    expected, outcomes = sql_scores(alerts, labels, by, window)
    got, got_outcomes = _ours(s, table, by)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v) if v is not None else got[k] is None, (k, got[k], v)
    assert got_outcomes == outcomes
    tp, fp, fn = expected["tp"], expected["fp"], expected["fn"]
    assert got["precision"] == (tp / (tp + fp) if tp + fp else None)
    assert got["recall"] == (tp / (tp + fn) if tp + fn else None)
    assert got["f1"] == (2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None)


@pytest.fixture
def hand_made():
    """Keys a..f: a alerted thrice after its label, b twice before it (early), c labelled and
    never alerted, d and e alerted and not labelled, f labelled twice (the earliest counts)."""
    alerts = _alerts(
        [
            (T0 + 5_000, "a"),
            (T0 + 9_000, "a"),
            (T0 + DAY + 1, "a"),
            (T0 + 1_000, "b"),
            (T0 + 2 * DAY, "b"),
            (T0 + 3_000, "d"),
            (T0 + DAY + 50, "e"),
            (T0 + 60_000, "f"),
        ]
    )
    labels = pa.table(
        {
            "user": ["a", "b", "c", "f", "f"],
            "ts": pa.array(
                [T0 + 1_000, T0 + 4_000, T0 + DAY + 7, T0 + 30_000, T0 + 10], pa.int64()
            ),
        }
    )
    return alerts, labels


def test_scores_equal_sql_on_hand_made_tables(hand_made):
    alerts, labels = hand_made
    empty = _alerts([]).set_column(4, "user", pa.array([], pa.string()))
    s = score({"alerts": alerts, "quiet": empty}, labels, by="user", window="30s", bucket="1d")
    _check(s, "alerts", alerts, labels, ["user"], window=30_000)
    t = s["alerts"]
    assert (t.tp, t.fp, t.fn, t.early) == (3, 2, 1, 1)  # a and f caught, b early, c missed
    # The empty table: nothing alerted, every label a false negative.
    _check(s, "quiet", empty, labels, ["user"], window=30_000)
    q = s["quiet"]
    assert (q.tp, q.fp, q.fn, q.precision, q.recall, q.f1) == (0, 0, 4, None, 0.0, 0.0)
    # Per day buckets, against SQL.
    mine = s.buckets.filter(pl.col("table") == "alerts")
    got = mine.select("bucket_ts", "alerts", "first_alerted", "tp", "positives", "caught")
    assert [tuple(r) for r in got.iter_rows()] == sql_buckets(alerts, labels, ["user"], DAY)
    assert mine["precision"].to_list()[0] == pytest.approx(3 / 4)
    # alerts per day over the rows' span (no Result, so no log span).
    span = 2 * DAY - 1_000
    assert t.alerts_per_day == pytest.approx(8 * DAY / span) and s.span_ms == span


def test_two_field_keys_and_types_that_differ(hand_made):
    alerts = _alerts(
        [(T0, "eu", 1), (T0 + 5, "eu", 1), (T0 + 9, "us", 1), (T0 + 20, "eu", 2)],
        ("region", "user"),
    )
    # CSV-like labels: the user id as text, the time as ISO strings, one null time.
    labels = pa.table(
        {
            "region": ["eu", "us", "us"],
            "user": ["1", "2", "1"],
            "ts": ["2026-01-01T00:00:00.003Z", "2026-01-01T00:00:00Z", None],
        }
    )
    s = score({"t": alerts}, labels, by="region,user")
    typed = alerts.set_column(5, "user", alerts.column("user").cast(pa.string()))
    ms = pa.array([T0 + 3, T0, None], pa.int64())
    _check(s, "t", typed, labels.set_column(2, "ts", ms), ["region", "user"])
    keys = s.by_key.sort("first_alert_ts", nulls_last=True)
    assert keys["outcome"].to_list() == ["tp", "tp", "fp", "fn"]
    # eu/1 alerted at T0, labelled at T0+3: early; us/1 has no label time: no delay.
    assert keys["early"].to_list()[:2] == [True, None]


def test_labels_from_csv_pandas_with_a_class(tmp_path, hand_made):
    alerts, labels = hand_made
    frame = labels.to_pandas()
    frame["class"] = ["fraud", "fraud", "fraud", "ok", "fraud"]
    path = tmp_path / "labels.csv"
    frame.to_csv(path, index=False)
    expected = pa.Table.from_pandas(frame[frame["class"] == "fraud"], preserve_index=False)
    for source in (path, frame, pl.from_pandas(frame)):
        s = score({"alerts": alerts}, source, by=["user"], positive="fraud")
        _check(s, "alerts", alerts, expected.select(["user", "ts"]), ["user"])
        assert s.labels.positives == 4 and s.labels.negatives == 0
    # Without positive=, every row with a class is a positive; a boolean class, its trues.
    assert score({"a": alerts}, frame, by="user").labels.positives == 4
    flags = pd.DataFrame({"user": ["a", "b"], "class": [True, False]})
    assert score({"a": alerts}, flags, by="user").labels.positives == 1


def test_bad_labels_name_the_file_column_and_row(tmp_path, hand_made):
    alerts, _labels = hand_made
    path = tmp_path / "bad.csv"
    path.write_text("user,ts\na,1000\nb,yesterday\n")
    with pytest.raises(RestreamError, match=r"bad.csv, column 'ts', row 1: 'yesterday' is neither"):
        score({"a": alerts}, path, by="user")
    with pytest.raises(RestreamError, match=r"bad.csv: no key column 'sender'"):
        score({"a": alerts}, path, by="sender")
    pq.write_table(pa.table({"user": ["a", None], "ts": [1, 2]}), tmp_path / "null.parquet")
    with pytest.raises(RestreamError, match=r"null.parquet, column 'user', row 1: the key is null"):
        score({"a": alerts}, tmp_path / "null.parquet", by="user")
    with pytest.raises(RestreamError, match="no such file"):
        score({"a": alerts}, tmp_path / "missing.parquet", by="user")
    with pytest.raises(RestreamError, match="no output table has that field"):
        score({"a": alerts}, pa.table({"x": [1]}), by="x")
    with pytest.raises(RestreamError, match="not a duration"):
        score({"a": alerts}, pa.table({"user": ["a"]}), by="user", window="soon")


def test_pareto_front_on_a_hand_made_case():
    # (precision, recall): B dominates A; C and D trade off; E equals D; F has no precision.
    p = [0.5, 0.6, 0.9, 0.7, 0.7, None, 0.2]
    r = [0.5, 0.6, 0.3, 0.8, 0.8, 0.9, 0.8]
    assert pareto_front(p, r) == [False, False, True, True, True, False, False]
    assert pareto_front([], []) == []


def test_changed_keys_between_two_versions(hand_made):
    alerts, labels = hand_made
    fewer = alerts.filter(pa.compute.not_equal(alerts.column("user"), "a"))
    more = pa.concat_tables([fewer, _alerts([(T0 + DAY + 9, "c"), (T0 + 7, "z")])])
    v1 = score({"t": alerts}, labels, by="user")
    v2 = score({"t": more}, labels, by="user")
    changes = changed_keys(v2, v1)
    got = {r["user"]: r["change"] for r in changes.iter_rows(named=True)}
    assert got == {"a": "newly missed", "c": "newly caught", "z": "new false alarm"}
    # The row explain takes: the run's first alert of the key, else the baseline's.
    rows = {r["user"]: r["first_row"] for r in changes.iter_rows(named=True)}
    assert rows == {"a": "t:0:0:0", "c": "t:0:0:0", "z": "t:1:0:0"}


def test_serial_replay_of_the_sample_rule_against_the_sample_labels():
    result = rk.replay(rk.sample_program("antispam"), "social_small")
    labels = pq.read_table(rk.sample_data("social_small_labels"))
    s = rk.score(result, "social_small_labels", by="sender", window="10min")
    spam = result.tables["spam"]
    _check(s, "spam", spam, labels.select(["sender", "ts"]), ["sender"], window=600_000)
    t = s["spam"]
    # The demo rule catches most labelled spammers, not all, and raises false alarms.
    assert 0 < t.fn < t.tp and t.fp > 0 and 0 < t.precision < 1
    assert t.alerts_per_day == pytest.approx(spam.num_rows * DAY / result.metrics.span_ms)
    assert s.summary().startswith("spam by sender: precision ")
    data = s.to_dict(keys=True)
    assert data["tables"]["spam"]["tp"] == t.tp and len(data["tables"]["spam"]["keys"]) == (
        t.tp + t.fp + t.fn
    )
    assert not math.isnan(data["tables"]["spam"]["buckets"][0]["alerts"])


def test_a_run_by_out_directory_and_by_catalog_name(tmp_path, monkeypatch, hand_made):
    from restream_kit.io.catalog import Catalog

    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / "home"))
    alerts, labels = hand_made
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(alerts, out / "alerts.parquet")
    by_dir = score(out, labels, by="user")
    assert by_dir.run == str(out) and by_dir["alerts"].tp == 3
    program = rk.Program.load(
        "from restream_kit import emit, on\n@on('m')\ndef f(e):\n    emit('alerts', user=e.u)\n"
    )
    log = rk.Log(pa.table({"ts": [T0 + 5_000, T0 + 7_000], "kind": ["m", "m"], "u": ["a", "z"]}))
    result = rk.replay(program, log)
    record = Catalog().record(name="v1", program=program, log=log, engine="serial", result=result)
    for ref in ("v1", record.run_id):
        s = score(ref, labels, by="user")
        assert (s["alerts"].tp, s["alerts"].fp, s["alerts"].fn) == (1, 1, 3)
    with pytest.raises(RestreamError, match="no successful run called 'nope'"):
        score("nope", labels, by="user")


def test_the_sample_labels_are_what_their_command_makes(root, tmp_path):
    """The command in sample_data/README.md gives the committed labels, and they are the
    generator's spammers who sent a message in social_small."""
    import shlex
    import subprocess
    import sys

    readme = (root / "sample_data" / "README.md").read_text()
    (line,) = [x for x in readme.splitlines() if "-m sample_data.spam_labels" in x]
    command = shlex.split(line)[1:]
    out = command.index("--out") + 1
    committed = root / command[out]
    command[out] = str(tmp_path / "labels.parquet")
    subprocess.run([sys.executable, *command], cwd=root, check=True, capture_output=True)
    again = pq.read_table(tmp_path / "labels.parquet")
    assert again.equals(pq.read_table(committed))
    assert committed == rk.sample_data("social_small_labels")
    log = pl.read_parquet(rk.sample_data("social_small")).filter(pl.col("kind") == "message")
    from sample_data.social import spammers

    wrote = set(log.filter(pl.col("src").is_in(spammers(50_000).tolist()))["src"].to_list())
    assert set(again.column("sender").to_pylist()) == wrote and len(wrote) > 10
