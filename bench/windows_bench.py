"""Windowed rules against the plain counter rule over the same events, serial engine, warm.

A matrix of cells, each one windowed rule over the social log's messages:

- window: ``tumbling`` (10 min), ``hopping`` (10 min every 5), ``sliding`` (5 min),
  ``session`` (30 min gap);
- key: ``ip`` (about ten thousand values), ``src`` (power-law senders), ``pair``
  (``(src, dst)``: hundreds of thousands of values);
- aggregate: ``count``, ``sum`` (of ``dst % 7``) or ``distinct`` (recipients);
- output: ``rows`` (a closing window's rows go to a table; a sliding window is only read),
  ``threshold`` (an alert when the aggregate passes a threshold: a sliding window's
  ``value`` after each add, a closing window's ``on_close`` checking the closed value) or
  ``on_close`` (an ``on_close`` handler that emits every closed window and counts the
  windows per key in a state; for a sliding window, the same as ``threshold``).

By default the cells are every window and key with ``count`` and ``rows``, and, on the
skewed key, every window with ``sum``, ``distinct``, ``threshold`` and ``on_close``;
``--full`` runs the whole product. Each cell is timed against the plain counter rule
(``n[key] += 1`` per message) with the same key, in one process with the log loaded,
alternating, ``--runs`` times: the report is the events/s of each and their ratio (medians;
also on the process's CPU time, which other work on a shared machine changes least),
and the rows the cell emits per event (the counter emits none: a cell whose windows are
nearly all of one event, keyed by pairs, pays for about a row per event).
``--spark`` also times the Spark engine (``--master``, warm session) on every cell, as a
ratio to serial, after checking that its result equals the serial one. ``--process`` also
times whole ``restream replay`` processes (the command line: loading the log, replaying,
recording the run), alternating: the cell's and the counter's, serial, and with ``--spark``
the cell's on Spark; their ratios and process-tree peaks.

``python -m bench windows [--events N] [--log PARQUET] [--runs R] [--full] [--cells SUBSTR]
[--spark] [--process] [--master URL] [--out JSON]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "WINDOWS", "KEYS", "AGGS", "OUTPUTS", "cell_source", "counter_source"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "windows.json"

WINDOWS = {
    "tumbling": "tumbling(minutes(10), {agg}{table})",
    "hopping": "hopping(minutes(10), minutes(5), {agg}{table})",
    "sliding": "sliding(minutes(5), {agg})",
    "session": "session(minutes(30), {agg}{table})",
}
KEYS = {"ip": "e.ip", "src": "e.src", "pair": "(e.src, e.dst)"}
AGGS = {"count": "", "sum": "e.dst % 7", "distinct": "e.dst"}
OUTPUTS = ("rows", "threshold", "on_close")
#: Alert thresholds: passed by some keys' windows, not by most.
THRESHOLD = {"count": 20, "sum": 60, "distinct": 15}


def cell_source(window: str, key: str, agg: str, output: str) -> str:
    """The program of one cell of the matrix."""
    closing = window != "sliding"
    table = ', table="closed"' if closing and output == "rows" else ""
    value = f", {AGGS[agg]}" if AGGS[agg] else ""
    limit = THRESHOLD[agg]
    lines = [
        "from restream_kit import emit, minutes, on, state",
        f"from restream_kit.windows import {window}",
        "",
        f"w = {WINDOWS[window].format(agg=repr(agg), table=table)}",
        "closed = state.Counter()",
        "",
        '@on("message")',
        "def track(e):",
        f"    w.add({KEYS[key]}{value})",
    ]
    if not closing and output != "rows":
        lines += [
            f"    v = w.value({KEYS[key]})",
            f"    if v > {limit}:",
            f'        emit("alert", key={KEYS[key]}, value=v)',
        ]
    if closing and output == "threshold":
        lines += [
            "",
            "@w.on_close",
            "def alert(key, start, end, value):",
            f"    if value > {limit}:",
            '        emit("alert", key=key, start=start, value=value)',
        ]
    elif closing and output == "on_close":
        lines += [
            "",
            "@w.on_close",
            "def report(key, start, end, value):",
            "    closed[key] += 1",
            '    emit("closed", key=key, start=start, end=end, value=value, n=closed[key])',
        ]
    return "\n".join(lines) + "\n"


def counter_source(key: str) -> str:
    """The plain counter rule over the same events and key."""
    return (
        "from restream_kit import on, state\n\nn = state.Counter()\n\n"
        f'@on("message")\ndef track(e):\n    n[{KEYS[key]}] += 1\n'
    )


def _cells(full: bool) -> list[tuple[str, str, str, str]]:
    if full:
        return list(itertools.product(WINDOWS, KEYS, AGGS, OUTPUTS))
    cells = [(w, k, "count", "rows") for w in WINDOWS for k in KEYS]
    for w in WINDOWS:
        cells += [(w, "src", "sum", "rows"), (w, "src", "distinct", "rows")]
        outputs = ("threshold",) if w == "sliding" else ("threshold", "on_close")
        cells += [(w, "src", "count", out) for out in outputs]
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench windows", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--log", help="Parquet log (default: sample_data/generated/social_<N>)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per side (3)")
    parser.add_argument("--full", action="store_true", help="every cell of the product")
    parser.add_argument("--cells", default="", help="only cells whose name contains this")
    parser.add_argument("--spark", action="store_true", help="also time Spark, warm")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument(
        "--process",
        action="store_true",
        help="also time whole `restream replay` processes (the counter's, serial, and Spark's "
        "with --spark)",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)

    import restream_kit as rk
    from bench.serial_vs_loop import _ensure_log

    log_path = _ensure_log(args.events, Path(args.log) if args.log else None)
    log = rk.Log(log_path)
    n = len(log)
    cells = [c for c in _cells(args.full) if args.cells in "/".join(c)]
    print(
        f"windowed rules vs the plain counter rule, serial, warm, {n:,} events, "
        f"{args.runs} run(s) each, medians"
    )
    counter_eps: dict[str, float] = {}
    report: dict = {"events": n, "log": str(log_path), "runs": args.runs, "cells": {}}
    for cell in cells:
        name = "/".join(cell)
        program = rk.Program.from_source(cell_source(*cell), name.replace("/", "_"))
        counter = rk.Program.from_source(counter_source(cell[1]), f"counter_{cell[1]}")
        want = rk.replay(program, log)  # untimed: compiles, warms caches
        times: dict[str, list[float]] = {"window": [], "counter": []}
        cpu: dict[str, list[float]] = {"window": [], "counter": []}
        for i in range(args.runs):
            for side in ("window", "counter") if i % 2 == 0 else ("counter", "window"):
                started, cpu_started = time.perf_counter(), time.process_time()
                rk.replay(program if side == "window" else counter, log)
                times[side].append(time.perf_counter() - started)
                cpu[side].append(time.process_time() - cpu_started)
        med = {side: statistics.median(ts) for side, ts in times.items()}
        cpu_med = {side: statistics.median(ts) for side, ts in cpu.items()}
        eps = n / med["window"]
        counter_eps[cell[1]] = n / med["counter"]
        row = {
            "events_per_s": eps,
            "counter_events_per_s": counter_eps[cell[1]],
            "ratio": eps / counter_eps[cell[1]],
            # The same on the process's CPU time: what a shared, loaded machine changes least.
            "cpu_ratio": cpu_med["counter"] / cpu_med["window"],
            "rows": {t: v.num_rows for t, v in want.tables.items()},
            "runs": times,
            "cpu_runs": cpu,
        }
        # Rows a cell emits per event: what it pays besides the window (the counter emits none).
        row["rows_per_event"] = sum(row["rows"].values()) / n if n else 0.0
        line = (
            f"  {name:<32} {eps:>10,.0f} ev/s  counter {counter_eps[cell[1]]:>10,.0f} ev/s  "
            f"ratio {row['ratio']:.2f}  cpu ratio {row['cpu_ratio']:.2f}  "
            f"rows/event {row['rows_per_event']:.2f}"
        )
        if args.spark:
            row.update(_spark(rk, program, log, want, args.runs, args.master, med["window"]))
            line += f"  spark {row['spark_ratio']:.2f}x serial"
        if args.process:
            row["process"] = _processes(cell, log_path, args.runs, args.master, args.spark)
            line += _said(row["process"])
        report["cells"][name] = row
        print(line, flush=True)
    for key, what in (("ratio", "ratio to the counter"), ("cpu_ratio", "on CPU time")):
        ratios = [row[key] for row in report["cells"].values()]
        if ratios:
            print(f"{what}: min {min(ratios):.2f}, median {statistics.median(ratios):.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


def _processes(cell: tuple, log_path: Path, runs: int, master: str, spark: bool) -> dict:
    """Whole ``restream replay`` processes of the cell and of the counter with its key (and
    of the cell on Spark), alternating, ``runs`` times each: medians of their seconds and
    process-tree peaks, and the ratios (the cell to the counter; Spark to serial)."""
    from bench.spark_rules import replay_command, run_process

    with tempfile.TemporaryDirectory() as scratch:
        sources = {"window": cell_source(*cell), "counter": counter_source(cell[1])}
        commands = {}
        for side, source in sources.items():
            path = Path(scratch) / f"{side}.py"
            path.write_text(source)
            commands[side] = replay_command(path, log_path) + ["--engine", "serial"]
        if spark:
            spark_side = replay_command(Path(scratch) / "window.py", log_path)
            commands["spark"] = spark_side + ["--engine", "spark", "--master", master]
        seconds: dict[str, list[float]] = {side: [] for side in commands}
        peaks: dict[str, list[float]] = {side: [] for side in commands}
        order = list(commands)
        for i in range(runs):
            for side in order if i % 2 == 0 else reversed(order):
                took, peak = run_process(commands[side])
                seconds[side].append(took)
                peaks[side].append(peak)
    med = {side: statistics.median(ts) for side, ts in seconds.items()}
    row = {
        "seconds": med,
        "tree_peak_mib": {side: statistics.median(ps) for side, ps in peaks.items()},
        "ratio": med["counter"] / med["window"],
        "runs": seconds,
    }
    if spark:
        row["spark_ratio"] = med["window"] / med["spark"]
    return row


def _said(process: dict) -> str:
    """A cell's whole processes, for its line of the report."""
    said = f"  process ratio {process['ratio']:.2f}"
    if "spark_ratio" in process:
        said += f"  spark process {process['spark_ratio']:.2f}x serial"
    return said


def _spark(rk, program, log, want, runs: int, master: str, serial_s: float) -> dict:
    """Spark warm on one cell, checked against the serial result, as a ratio to serial."""
    got = rk.replay(program, log, engine="spark", master=master)
    if sorted(got.tables) != sorted(want.tables) or got.state != want.state:
        raise RuntimeError(f"{program.name}: Spark and serial results differ")
    for name, table in want.tables.items():
        if not got.tables[name].equals(table):
            raise RuntimeError(f"{program.name}: table {name} differs")
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        rk.replay(program, log, engine="spark", master=master)
        times.append(time.perf_counter() - started)
    spark_s = statistics.median(times)
    return {"spark_s": spark_s, "spark_ratio": serial_s / spark_s, "path": got.metrics.path}


if __name__ == "__main__":
    sys.exit(main())
