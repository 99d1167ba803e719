"""The Spark engine against a hand-written Spark job and the serial engine, per-sender float rule.

``python -m bench hand-job [--events N] [--runs R] [--master URL] [--log PATH] [--out JSON]``

The rule is ``bench/programs/sender_ewma.py`` (an exponentially weighted gap between a
sender's messages). The hand-written job is what a Spark user would write for it in twenty
lines: the log's DataFrame (cached), its messages repartitioned by sender, sorted by time
within partitions, and one ``mapInArrow`` pass over plain dicts. The engine knows everything
that job knows, so it should be at least as fast.

The warm notebook case: one process, the log loaded and the session up. The three sides
alternate ``--runs`` times and the report gives their medians and two ratios, engine against
the job and serial against the engine. Before timing, the three must produce the same number of
``bursty`` rows, and the engine must produce the same table as serial.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

__all__ = ["main", "hand_job"]

ROOT = Path(__file__).resolve().parents[1]
RULE = ROOT / "bench" / "programs" / "sender_ewma.py"
DEFAULT_OUT = ROOT / "bench" / "results" / "hand_job.json"


def _ewma(batches):
    """The rule by hand, over one partition's messages in time order."""
    import pyarrow as pa

    gap_avg: dict = {}
    last: dict = {}
    sender, avg_out, ts_out = [], [], []
    for batch in batches:
        for ts, src in zip(batch.column("ts").to_pylist(), batch.column("src").to_pylist()):
            prev = last.get(src)
            if prev is not None:
                avg = 0.9 * gap_avg.get(src, 0.0) + 0.1 * ((ts - prev) / 1000.0)
                gap_avg[src] = avg
                if avg < 0.5:
                    sender.append(src)
                    avg_out.append(round(avg, 3))
                    ts_out.append(ts)
            last[src] = ts
    yield pa.RecordBatch.from_pydict({"sender": sender, "avg": avg_out, "ts": ts_out})


def hand_job(frame, partitions: int):
    """The hand-written job over the log's DataFrame: the rule's rows as an Arrow table."""
    return (
        frame.where("kind = 'message'")
        .select("ts", "src")
        .repartition(partitions, "src")
        .sortWithinPartitions("ts")
        .mapInArrow(_ewma, "sender long, avg double, ts long")
        .toArrow()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench hand-job", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per side (7)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--log", help="Parquet log (default: sample_data/generated/social_<N>)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    import restream_kit as rk
    from bench.serial_vs_loop import _ensure_log
    from restream_kit.engines.spark import get_session

    path = _ensure_log(args.events, Path(args.log) if args.log else None)
    session = get_session(args.master)
    partitions = max(1, int(session.sparkContext.defaultParallelism))
    frame = session.createDataFrame(pq.read_table(path)).persist()
    frame.count()
    log = rk.Log(path)
    len(log)
    program = rk.Program.from_file(RULE)
    want = rk.replay(program, log)
    got = rk.replay(program, log, engine="spark", master=args.master)
    if not got.tables["bursty"].equals(want.tables["bursty"]):
        raise SystemExit("hand-job: the Spark engine's bursty table differs from serial")
    rows = want.tables["bursty"].num_rows
    if hand_job(frame, partitions).num_rows != rows:
        raise SystemExit("hand-job: the hand-written job finds another number of bursty rows")
    sides = {
        "serial": lambda: rk.replay(program, log),
        "engine": lambda: rk.replay(program, log, engine="spark", master=args.master),
        "hand_job": lambda: hand_job(frame, partitions),
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
        "events": len(log),
        "master": args.master,
        "bursty_rows": rows,
        "median_s": med,
        "engine_vs_hand_job": med["hand_job"] / med["engine"],
        "engine_vs_serial": med["serial"] / med["engine"],
        "path": got.metrics.path,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(
        f"per-sender float rule, {len(log):,} events, {args.master}, warm, medians of "
        f"{args.runs}: serial {med['serial']:.2f} s, hand-written job {med['hand_job']:.2f} s, "
        f"engine {med['engine']:.2f} s; engine {report['engine_vs_hand_job']:.2f}x the job's "
        f"speed, {report['engine_vs_serial']:.2f}x serial's ({rows:,} bursty rows each)"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
