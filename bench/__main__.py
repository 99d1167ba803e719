"""``python -m bench [NAME ...] [options]``: run every benchmark, or the named ones.

Options after the names go to each benchmark run (``python -m bench serial --events 20000``);
``python -m bench --list`` lists the benchmarks. To add one, write a module with a
``main(argv) -> int`` and register it in ``BENCHMARKS``. ``python -m bench regress --base REV``
times the others' rules on a base revision and the current tree, alternating; it runs only
when named.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["BENCHMARKS", "main"]

#: Benchmark name -> (module, what it measures).
BENCHMARKS: dict[str, tuple[str, str]] = {
    "serial": ("bench.serial_vs_loop", "serial engine vs a plain-Python loop, anti-spam rule"),
    "plan": ("bench.plan_bench", "planning a 1M-event log, against a serial replay of it"),
    "spark": (
        "bench.spark_vs_serial",
        "Spark engine local[2] vs serial engine, 10M-event anti-spam log, whole processes",
    ),
    "sweep": (
        "bench.sweep_bench",
        "12 variants of the anti-spam thresholds in one sweep vs one replay, serial engine",
    ),
    "reuse": (
        "bench.reuse_bench",
        "re-replay after an anti-spam threshold edit vs a full replay, serial engine",
    ),
    "spark-rules": (
        "bench.spark_rules",
        "Spark engine vs serial on anti-spam, ordinary Python, windows, EWMA: warm and cold",
    ),
    "hand-job": (
        "bench.hand_job",
        "Spark engine vs a hand-written Spark job and serial, float or team rule, warm",
    ),
    "windows": (
        "bench.windows_bench",
        "windowed rules (tumbling, hopping, sliding, session) vs the plain counter, serial",
    ),
    "score": (
        "bench.score_bench",
        "scoring a 10M-event anti-spam run against 100k labels vs the serial replay",
    ),
    "state-columns": (
        "bench.state_columns",
        "recording and loading a run's state as typed Parquet vs its replay; --reuse as processes",
    ),
    "result-files": (
        "bench.result_files",
        "Spark replay emitting a row per event: tables written by the tasks vs sent to the driver",
    ),
    "scale": (
        "bench.scale",
        "peak memory at two log sizes, bounded-state rule, CLI or a notebook's kernel, cold and warm",
    ),
    "cells": (
        "bench.cell_bench",
        "time to done of the first and later %%restream cells in a kernel vs the replay's wall",
    ),
    "cell-iterate": (
        "bench.cell_iterate_bench",
        "a --baseline threshold edit and a 12-variant --sweep cell vs a full replay, in a kernel",
    ),
    "regress": (
        "bench.regress",
        "the benchmarks' rules on a base revision (--base REV) and the current tree, alternating",
    ),
}
#: Benchmarks run only when named: ``regress`` needs ``--base`` and times the others' rules.
ONLY_BY_NAME = {"regress"}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks named at the start of ``argv`` (all by default) with the rest."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--list"], ["-h"], ["--help"]):
        print(__doc__.strip().splitlines()[0])
        for name, (module, what) in BENCHMARKS.items():
            print(f"  {name:<10} {what} ({module})")
        return 0
    names = []
    while argv and not argv[0].startswith("-"):
        names.append(argv.pop(0))
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}",
            file=sys.stderr,
        )
        return 2
    failed = []
    for name in names or [name for name in BENCHMARKS if name not in ONLY_BY_NAME]:
        module = importlib.import_module(BENCHMARKS[name][0])
        if module.main(argv) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
