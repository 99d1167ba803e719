"""The domains of the window and join examples: their generators, committed samples, example
programs (checked against DuckDB where an independent computation is at hand) and the
two-stream command line. Replays go through ``replay_on``, so they run on every engine."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_matrix import rows_of

import restream_kit as rk
from restream_kit.planner import plan
from restream_kit.planner.causal import longest_chain
from sample_data import adclicks, flights, iot, streamscope

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "sample_data" / "README.md"
STREAMSCOPE = ROOT / "sample_data" / "streamscope_small"
ADCLICKS = ROOT / "sample_data" / "adclicks_small"
IOT = ROOT / "sample_data" / "iot_small"


def streamscope_log() -> rk.Log:
    return rk.Log(
        [
            f"processes={STREAMSCOPE / 'processes.parquet'}",
            f"alerts={STREAMSCOPE / 'alerts.parquet'}",
        ]
    )


def adclicks_log() -> rk.Log:
    return rk.Log(
        [
            f"impressions={ADCLICKS / 'impressions.parquet'}",
            f"clicks={ADCLICKS / 'clicks.parquet'}",
        ]
    )


def query(sql: str, **tables: pa.Table) -> pl.DataFrame:
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con.sql(sql).pl()


# -- generators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "schemas"),
    [
        (
            lambda seed: streamscope.generate(3, seed=seed),
            (streamscope.PROCESSES, streamscope.ALERTS),
        ),
        (lambda seed: adclicks.generate(5, seed=seed), (adclicks.IMPRESSIONS, adclicks.CLICKS)),
        (lambda seed: (iot.generate(1, seed=seed),), (iot.SCHEMA,)),
    ],
    ids=["streamscope", "adclicks", "iot"],
)
def test_generators_are_deterministic_by_seed_and_sorted(make, schemas):
    first, again, other = make(7), make(7), make(8)
    for table, same, different, schema in zip(first, again, other, schemas):
        assert table.schema == schema
        assert table.equals(same)
        assert not table.equals(different)
        ts = table.column("ts").to_numpy()
        assert (np.diff(ts) >= 0).all() and table.num_rows > 100


def documented_commands() -> list[list[str]]:
    lines = [
        line
        for line in README.read_text().splitlines()
        if line.startswith(".venv/bin/python -m sample_data.")
        and "_small" in line
        and "social" not in line
    ]
    return [shlex.split(line) for line in lines]


def test_committed_samples_are_what_the_documented_commands_make(tmp_path):
    commands = documented_commands()
    assert [c[2] for c in commands] == [
        "sample_data.streamscope",
        "sample_data.adclicks",
        "sample_data.iot",
    ]
    total = 0
    for command in commands:
        committed = ROOT / command[command.index("--out") + 1]
        again = tmp_path / committed.name
        command[command.index("--out") + 1] = str(again)
        command[0] = sys.executable
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        for path in sorted(committed.glob("*.parquet")):
            assert pq.read_table(path).equals(pq.read_table(again / path.name)), path
            total += path.stat().st_size
    assert total < 2_000_000


def test_streamscope_alerts_come_while_their_process_runs():
    processes, alerts = streamscope.generate(10, seed=1)
    lives = query(
        """
        SELECT s.host, s.pid, s.ts AS born, coalesce(e.ts, 9e18) AS died
        FROM processes s LEFT JOIN processes e
          ON e.host = s.host AND e.pid = s.pid AND e.action = 'end'
        WHERE s.action = 'start'
        """,
        processes=processes,
    )
    assert lives.select(pl.struct("host", "pid").is_unique().all()).item()
    joined = query(
        """
        SELECT a.ts, l.born, l.died FROM alerts a JOIN lives l ON a.host = l.host AND a.pid = l.pid
        """,
        alerts=alerts,
        lives=lives.to_arrow(),
    )
    system = pl.from_arrow(alerts).filter(pl.col("pid") < 1000).height
    assert joined.height + system == alerts.num_rows and system > 0
    assert (joined["ts"] > joined["born"]).all() and (joined["ts"] < joined["died"]).all()


def test_adclicks_clicks_come_after_their_impressions_and_fraud_is_labelled():
    impressions, clicks = adclicks.generate(20, seed=2)
    joined = query(
        "SELECT c.ts - i.ts AS lag, c.label FROM clicks c JOIN impressions i USING (impression_id)",
        clicks=clicks,
        impressions=impressions,
    )
    assert (joined["lag"] >= 50).all()
    labels = pl.from_arrow(clicks)["label"].value_counts()
    assert set(labels["label"]) == {"organic", "bot", "spam"}
    spam = pl.from_arrow(clicks).filter(pl.col("label") == "spam").height
    assert joined.height == clicks.num_rows - spam  # spam names impressions never served


def test_iot_readings_are_on_whole_seconds_with_gaps():
    table = iot.generate(12, sensors=10, seed=3)
    df = pl.from_arrow(table)
    assert (df["ts"] % 1_000 == 0).all()
    assert df["ts"].is_duplicated().any()
    gaps = df.sort("sensor", "ts").group_by("sensor").agg(pl.col("ts").diff().max().alias("gap"))
    assert (gaps["gap"] >= 10 * 60_000).any()  # an outage


def test_flights_come_from_the_package_in_time_order():
    departures, weather = flights.generate([1])
    assert departures.schema == flights.DEPARTURES and weather.schema == flights.WEATHER
    df = pl.from_arrow(departures)
    assert df.height == 27_004 and weather.num_rows == 2_226
    assert df["ts"].is_sorted() and pl.from_arrow(weather)["ts"].is_sorted()
    flown = df.filter(~pl.col("cancelled"))
    assert (flown["ts"] - flown["sched_ts"] == flown["dep_delay"] * 60_000).all()
    assert df.filter(pl.col("cancelled"))["dep_delay"].null_count() == df["cancelled"].sum()
    # 2013-01-01 05:15 in New York is 10:15 UTC.
    first = df.filter((pl.col("carrier") == "UA") & (pl.col("flight") == 1545)).row(0, named=True)
    assert first["sched_ts"] == 1_357_035_300_000
    with pytest.raises(ValueError, match="months"):
        flights.generate([13])


# -- the example programs -------------------------------------------------------------------


def test_streamscope_counts_alerts_per_user_as_duckdb_does(replay_on):
    log = streamscope_log()
    r = replay_on(ROOT / "examples" / "streamscope.py", log)
    processes = pq.read_table(STREAMSCOPE / "processes.parquet")
    alerts = pq.read_table(STREAMSCOPE / "alerts.parquet")
    expected = query(
        """
        WITH owned AS (
            SELECT a.ts, p.user FROM alerts a
            JOIN processes p ON p.host = a.host AND p.pid = a.pid AND p.action = 'start'
        ), windows AS (
            SELECT user, ts, unnest(range(ts - ts % 5000 - 10000, ts + 1, 5000)) AS start
            FROM owned
        )
        SELECT user AS key, start, count(*) AS value FROM windows
        WHERE start <= ts AND ts < start + 10000 GROUP BY user, start
        """,
        alerts=alerts,
        processes=processes,
    )
    got = pl.from_arrow(r.tables["alerts_per_user"]).select("key", "start", "value")
    assert sorted(got.rows()) == sorted(expected.rows())
    unattributed = pl.from_arrow(alerts).filter(pl.col("pid") < 1000).height
    assert len(rows_of(r, "unattributed")) == unattributed
    hot = rows_of(r, "hot_users")
    assert hot and all(row["alerts"] >= 20 for row in hot)
    assert 1 <= len({row["user"] for row in hot}) <= 3  # the compromised users


def test_adclicks_finds_the_bots_and_the_publisher_buying_clicks(replay_on):
    r = replay_on(ROOT / "examples" / "adclicks.py", adclicks_log())
    clicks = pl.read_parquet(ADCLICKS / "clicks.parquet")
    bots = set(clicks.filter(pl.col("label") == "bot")["ip"])
    spammed = set(clicks.filter(pl.col("label") == "spam")["publisher"])
    assert {row["ip"] for row in rows_of(r, "bot_ips")} == bots
    assert {row["publisher"] for row in rows_of(r, "publisher_alerts")} == spammed
    reasons = pl.from_arrow(r.tables["suspicious"])["reason"].value_counts()
    never = reasons.filter(pl.col("reason") == "never served")["count"].item()
    assert never == clicks.filter(pl.col("label") == "spam").height
    counted = pl.from_arrow(r.tables["publisher_clicks"])["value"].sum()
    assert counted == 10 * clicks.height  # every click is in ten windows of 10 min every minute


def test_iot_alerts_only_in_the_overheating_room(replay_on):
    r = replay_on(ROOT / "examples" / "iot.py", rk.Log(str(IOT / "readings.parquet")))
    heat = pl.from_arrow(r.tables["heat"])
    assert heat.height > 0 and heat["room"].n_unique() == 1
    first_per_sensor = heat.group_by("sensor", maintain_order=True).first()
    assert first_per_sensor["hot"].all()
    spikes = pl.from_arrow(r.tables["spikes"])
    assert spikes.height > 0 and ((spikes["fahrenheit"] - spikes["expected"]).abs() > 18).all()
    online = pl.from_arrow(r.tables["online"])
    assert online.height > 40  # every sensor has a session, some have several (outages)


def test_flights_hourly_delays_match_duckdb(replay_on):
    departures, weather = flights.generate([1])
    log = rk.Log([("weather", weather), ("departures", departures)])
    r = replay_on(ROOT / "examples" / "flights.py", log)
    expected = query(
        """
        SELECT origin AS key, ts - ts % 3600000 AS start, avg(dep_delay) AS value
        FROM departures WHERE NOT cancelled GROUP BY ALL
        """,
        departures=departures,
    ).sort("start", "key")
    got = (
        pl.from_arrow(r.tables["hourly_delay"]).select("key", "start", "value").sort("start", "key")
    )
    assert got.select("key", "start").rows() == expected.select("key", "start").rows()
    assert np.allclose(got["value"].to_numpy(), expected["value"].to_numpy())
    risky = pl.from_arrow(r.tables["at_risk"])
    assert risky.height > 0
    assert (risky["legs"] >= 4).all() and (risky["airport_delay"] >= 30).all()


@pytest.mark.parametrize("name", ["streamscope", "adclicks", "iot"])
def test_true_chain_of_a_domain_example_stays_within_the_plan_bound(name):
    logs = {
        "streamscope": streamscope_log,
        "adclicks": adclicks_log,
        "iot": lambda: rk.Log(str(IOT / "readings.parquet")),
    }
    log = logs[name]()
    path = ROOT / "examples" / f"{name}.py"
    chain = longest_chain(path, log, max_events=5_000)
    assert 1 <= chain.longest <= plan(path, log).data.chain_bound


def test_domain_plans_partition_every_stage():
    for name in ("streamscope", "adclicks", "iot", "flights"):
        p = plan(ROOT / "examples" / f"{name}.py")
        assert all(s.mode in ("stateless", "partitioned") for s in p.stages), (name, p.stages)
    assert plan(ROOT / "examples" / "flights.py").stage_of("aircraft").partition_key == "e.tailnum"


# -- two streams on the command line --------------------------------------------------------


def test_command_line_merges_two_named_streams(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "restream_kit",
            "replay",
            "examples/streamscope.py",
            "--log",
            "alerts=sample_data/streamscope_small/alerts.parquet",
            "--log",
            "processes=sample_data/streamscope_small/processes.parquet",
            "--out",
            str(out),
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["metrics"]["events"] == 7_181 + 1_925
    assert summary["warnings"] == []
    # Alerts listed first: ties go to alerts, which never matters here (module docstring).
    expected = rk.replay(ROOT / "examples" / "streamscope.py", streamscope_log())
    table = pq.read_table(out / "alerts_per_user.parquet").drop_columns(["lsn", "seq"])
    assert table.equals(expected.tables["alerts_per_user"].drop_columns(["lsn", "seq"]))
