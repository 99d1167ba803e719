"""A sweep of 12 variants of the anti-spam thresholds against one replay, serial engine.

``python -m bench sweep [--events N] [--runs R] [--log PATH] [--out JSON]``

Both sides run in this process, on the same ``Log`` (its canonical form cached once, untimed):
one replay of ``bench/programs/antispam_params.py`` with its defaults, and
``sweep(..., ratio=[1.5, 2, 2.5, 3], share=[0.1, 0.2, 0.3])``. Before timing, the sweep's
variants are checked against separate replays (the first, the default one and the last). The
sides alternate ``--runs`` times; the ratio is ``sweep median / replay median``; the target is
at most 3 (SPEC section 7, issue 14).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

__all__ = ["main", "run", "PROGRAM", "GRID", "TARGET"]

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "bench" / "programs" / "antispam_params.py"
GRID = {"ratio": [1.5, 2.0, 2.5, 3.0], "share": [0.1, 0.2, 0.3]}
TARGET = 3.0
DEFAULT_OUT = ROOT / "bench" / "results" / "sweep.json"


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, print and write the JSON; 1 when a variant disagrees."""
    parser = argparse.ArgumentParser(prog="python -m bench sweep", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each side (3)")
    parser.add_argument("--log", help="Parquet log (default: the generated social log)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)
    try:
        run(args.events, args.runs, Path(args.log) if args.log else None, Path(args.out))
    except AssertionError as exc:
        print(f"sweep FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def run(events: int, runs: int, log_path: Path | None, out: Path) -> dict:
    """Run the benchmark; return what it wrote to ``out``."""
    import restream_kit as rk
    from bench.serial_vs_loop import _ensure_log
    from restream_kit.model.program import Program

    path = _ensure_log(events, log_path)
    log = rk.Log(str(path))
    program = Program.from_file(PROGRAM)
    first = rk.sweep(program, log, **GRID)
    assert first.single_scan, "the sweep did not run in one scan"
    for index in (0, 4, len(first) - 1):
        variant = first[index]
        alone = rk.replay(program, log, params=variant.params)
        for name, table in alone.tables.items():
            assert variant.result.tables[name].equals(table), f"variant {variant.label}: {name}"
    replay_s, sweep_s = [], []
    for _ in range(runs):
        started = time.perf_counter()
        rk.replay(program, log)
        replay_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        rk.sweep(program, log, **GRID)
        sweep_s.append(time.perf_counter() - started)
    ratio = statistics.median(sweep_s) / statistics.median(replay_s)
    results = {
        "benchmark": "sweep",
        "events": len(log),
        "variants": len(first),
        "shared_handlers": list(first.shared_handlers),
        "variant_handlers": list(first.variant_handlers),
        "replay_s": replay_s,
        "sweep_s": sweep_s,
        "ratio": ratio,
        "target": TARGET,
        "met": ratio <= TARGET,
        "spam_rows": {v.label: v.result.metrics.rows.get("spam", 0) for v in first},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(
        f"sweep of {len(first)} variants over {len(log):,} events: "
        f"{statistics.median(sweep_s):.2f} s; one replay {statistics.median(replay_s):.2f} s; "
        f"ratio {ratio:.2f} (target <= {TARGET}) {'met' if ratio <= TARGET else 'NOT met'}"
    )
    return results


if __name__ == "__main__":
    sys.exit(main())
