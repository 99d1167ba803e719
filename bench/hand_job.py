"""The Spark engine against a hand-written Spark job and the serial engine, on one rule.

``python -m bench hand-job [--rule ewma|teams] [--events N] [--runs R] [--master URL]
[--log PATH] [--out JSON]``

Each rule comes with what a Spark user would write for it in twenty lines:

- ``ewma`` (``bench/programs/sender_ewma.py``, an exponentially weighted gap between a
  sender's messages): the messages repartitioned by sender, sorted by position within
  partitions, and one ``mapInArrow`` pass over plain dicts;
- ``teams`` (``bench/programs/teams.py``, the broadcast read: messages counted per team over a
  sliding hour, the team looked up by sender): each message's team looked up in the JVM (the
  sender's last friendship before it, a window function), then the messages repartitioned by
  team, sorted, and one ``mapInArrow`` pass that counts, takes each count back an hour later
  and flags busy teams. The engine's passes take the same shape, the team looked up in Python
  by the pass holding ``team_of`` (``docs/spark_engine.md``, "Partitioned by a key read
  upstream").

The engine knows everything such a job knows, so it should be at least as fast.

The warm notebook case: one process, the log loaded and the session up. The three sides
alternate ``--runs`` times and the report gives their medians and two ratios, engine against
the job and serial against the engine. Before timing, the job's rows must be serial's (the
same fields in the same order) and the engine's table must be serial's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["main", "hand_job", "RULES"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "hand_job.json"
HOUR_MS = 3_600_000
TEAMS = 50  # as in bench/programs/teams.py


def _ewma(batches):
    """The per-sender float rule by hand, over one partition's messages in log order."""
    import pyarrow as pa

    gap_avg: dict = {}
    last: dict = {}
    sender, avg_out, ts_out, lsn_out = [], [], [], []
    for batch in batches:
        columns = [batch.column(c).to_pylist() for c in ("ts", "lsn", "src")]
        for ts, lsn, src in zip(*columns):
            prev = last.get(src)
            if prev is not None:
                avg = 0.9 * gap_avg.get(src, 0.0) + 0.1 * ((ts - prev) / 1000.0)
                gap_avg[src] = avg
                if avg < 0.5:
                    sender.append(src)
                    avg_out.append(round(avg, 3))
                    ts_out.append(ts)
                    lsn_out.append(lsn)
            last[src] = ts
    yield pa.RecordBatch.from_pydict(
        {"sender": sender, "avg": avg_out, "ts": ts_out, "lsn": lsn_out}, schema=_EWMA_SCHEMA
    )


def _teams(batches):
    """The team rule by hand, over one partition's messages (with their team) in log order:
    a count per team, each message taken back an hour later (before any message of that
    time, as a timed write is), and a row whenever a team's count passes 400."""
    import pyarrow as pa

    count: dict = {}
    due: deque = deque()  # (time, team) of the take-backs, in time order
    out: dict[str, list] = {name: [] for name in _TEAMS_SCHEMA.names}
    for batch in batches:
        columns = [batch.column(c).to_pylist() for c in ("ts", "lsn", "src", "team")]
        for ts, lsn, src, team in zip(*columns):
            while due and due[0][0] <= ts:
                count[due.popleft()[1]] -= 1
            n = count[team] = count.get(team, 0) + 1
            due.append((ts + HOUR_MS, team))
            if n > 400:
                for name, value in zip(out, (team, src, n, ts, lsn)):
                    out[name].append(value)
    yield pa.RecordBatch.from_pydict(out, schema=_TEAMS_SCHEMA)


def _ewma_job(frame, partitions: int):
    return (
        frame.where("kind = 'message'")
        .select("ts", "lsn", "src")
        .repartition(partitions, "src")
        .sortWithinPartitions("ts", "lsn")
        .mapInArrow(_ewma, "sender long, avg double, ts long, lsn long")
    )


def _teams_job(frame, partitions: int):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # A message's team: its sender's last friendship before it, in log order.
    before = (
        Window.partitionBy("src").orderBy("ts", "lsn").rowsBetween(Window.unboundedPreceding, 0)
    )
    joined = F.when(F.col("kind") == "friendship", F.pmod("dst", F.lit(TEAMS)))
    looked = frame.select("ts", "lsn", "kind", "src", joined.alias("joined")).withColumn(
        "team", F.last("joined", ignorenulls=True).over(before)
    )
    return (
        looked.where("kind = 'message' AND team IS NOT NULL")
        .select("ts", "lsn", "src", "team")
        .repartition(partitions, "team")
        .sortWithinPartitions("ts", "lsn")
        .mapInArrow(_teams, "team long, sender long, messages long, ts long, lsn long")
    )


def _schemas():
    import pyarrow as pa

    ewma = pa.schema(
        [("sender", pa.int64()), ("avg", pa.float64()), ("ts", pa.int64()), ("lsn", pa.int64())]
    )
    teams = pa.schema([(name, pa.int64()) for name in ("team", "sender", "messages", "ts", "lsn")])
    return ewma, teams


_EWMA_SCHEMA, _TEAMS_SCHEMA = _schemas()


@dataclass(frozen=True)
class HandRule:
    """A bench rule, the table it emits, the fields compared, and the job written by hand."""

    program: Path
    table: str
    fields: tuple[str, ...]
    job: Callable[[Any, int], Any]


RULES = {
    "ewma": HandRule(
        ROOT / "bench/programs/sender_ewma.py", "bursty", ("sender", "avg"), _ewma_job
    ),
    "teams": HandRule(
        ROOT / "bench/programs/teams.py", "busy_team", ("team", "sender", "messages"), _teams_job
    ),
}


def hand_job(rule: HandRule, frame, partitions: int):
    """The hand-written job over the log's DataFrame: its rows as an Arrow table, in log
    order (the serial engine's)."""
    return (
        rule.job(frame, partitions).toArrow().sort_by([("ts", "ascending"), ("lsn", "ascending")])
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench hand-job", description=__doc__)
    parser.add_argument("--rule", choices=sorted(RULES), default="ewma", help="rule (ewma)")
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per side (7)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--log", help="Parquet log (default: sample_data/generated/social_<N>)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    import restream_kit as rk
    from bench.serial_vs_loop import _ensure_log
    from restream_kit.engines.spark import get_session

    rule = RULES[args.rule]
    path = _ensure_log(args.events, Path(args.log) if args.log else None)
    session = get_session(args.master)
    partitions = max(1, int(session.sparkContext.defaultParallelism))
    table = pq.read_table(path)
    table = table.append_column("lsn", pa.array(range(table.num_rows), pa.int64()))
    frame = session.createDataFrame(table).persist()
    frame.count()
    log = rk.Log(path)
    len(log)
    program = rk.Program.from_file(rule.program)
    want = rk.replay(program, log)
    if rule.table not in want.tables:
        raise SystemExit(f"hand-job: no {rule.table} rows in {path}: nothing to compare")
    got = rk.replay(program, log, engine="spark", master=args.master)
    if not got.tables[rule.table].equals(want.tables[rule.table]):
        raise SystemExit(f"hand-job: the Spark engine's {rule.table} table differs from serial")
    rows = want.tables[rule.table].num_rows
    by_hand = hand_job(rule, frame, partitions)
    for field in rule.fields:
        if by_hand.column(field).to_pylist() != want.tables[rule.table].column(field).to_pylist():
            raise SystemExit(f"hand-job: the hand-written job's {field!r} differs from serial's")
    sides = {
        "serial": lambda: rk.replay(program, log),
        "engine": lambda: rk.replay(program, log, engine="spark", master=args.master),
        "hand_job": lambda: hand_job(rule, frame, partitions),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(args.runs):
        for side in sides if i % 2 == 0 else list(sides)[::-1]:
            started = time.perf_counter()
            sides[side]()
            times[side].append(time.perf_counter() - started)
    frame.unpersist()
    med = {side: statistics.median(ts) for side, ts in times.items()}
    report = {
        "rule": args.rule,
        "events": len(log),
        "master": args.master,
        "table": rule.table,
        "rows": rows,
        "median_s": med,
        "engine_vs_hand_job": med["hand_job"] / med["engine"],
        "engine_vs_serial": med["serial"] / med["engine"],
        "hand_job_vs_serial": med["serial"] / med["hand_job"],
        "path": got.metrics.path,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(
        f"{args.rule} rule, {len(log):,} events, {args.master}, warm, medians of {args.runs}: "
        f"serial {med['serial']:.2f} s, hand-written job {med['hand_job']:.2f} s, engine "
        f"{med['engine']:.2f} s; engine {report['engine_vs_hand_job']:.2f}x the job's speed, "
        f"{report['engine_vs_serial']:.2f}x serial's; the job {report['hand_job_vs_serial']:.2f}x "
        f"serial's ({rows:,} {rule.table} rows each)"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
