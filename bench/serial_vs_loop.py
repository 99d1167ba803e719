"""The serial engine against a plain-Python loop, both running the anti-spam rule.

Each side is a whole process, timed from launch to exit, so interpreter start-up, imports and
reading the Parquet log count on both sides:

- serial engine: ``python -m bench.serial_antispam LOG`` (``restream_kit.replay`` of
  ``examples/antispam.py``);
- plain loop: ``python -m bench.plain_antispam LOG`` (the rule by hand, dicts for state).

Before timing, each side runs once untimed: that run's spam rows are compared in full, and it
leaves the serial engine's canonical log (sorted, with lsn) in its cache under
``.restream/logs``, so that timed runs read it instead of sorting; the plain loop needs no sort
either, since the generated log is in time order. Then the sides alternate, ``--runs`` times
each, and every timed run must report the same rows again. The ratio is
``plain loop median / serial engine median``: 0.5 means the engine is half as fast.

``--cli`` times the command line instead of ``restream_kit.replay`` in a script: the engine's
side is ``restream replay examples/antispam.py --log LOG --quiet``, the whole process as a user
runs it (start-up, imports, the log's cached ordered copy, checks, the replay, recording the run
in the catalog and printing its summary), in a fresh catalog (``$RESTREAM_HOME`` in a temporary
directory; its untimed first run writes the ordered copy). After each timed run the run's
``spam`` table is read back from the catalog (untimed) and its digest must be the plain loop's.
The target is then at least 0.85 (issue 32). CPU time (user and system) is reported beside the
wall time. Results go to ``bench/results/serial_vs_loop_cli.json`` unless ``--out`` says
otherwise.

``python -m bench serial [--events N] [--runs R] [--log PATH] [--out JSON] [--cli]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["main", "run", "run_cli", "BenchmarkError", "ROOT", "DEFAULT_OUT", "write_results"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "serial_vs_loop.json"
CLI_OUT = ROOT / "bench" / "results" / "serial_vs_loop_cli.json"
DEFAULT_EVENTS = 1_000_000
SIDES = {
    "plain loop": "bench.plain_antispam",
    "serial engine": "bench.serial_antispam",
}
#: The ratio the serial engine aims at: at least half as fast as the plain loop.
TARGET = 0.5
#: The command line's target: the whole ``restream replay`` process (issue 32).
CLI_TARGET = 0.85


class BenchmarkError(RuntimeError):
    """The benchmark could not run, or the two sides did not agree."""


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the benchmark, print the table and write the JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m bench serial",
        description="Time the serial engine against a plain-Python loop on the anti-spam rule.",
    )
    parser.add_argument(
        "--events", type=int, default=DEFAULT_EVENTS, help="events in the log (1,000,000)"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each side (5)")
    parser.add_argument(
        "--log", help="Parquet log to use (default: sample_data/generated/social_<N>.parquet)"
    )
    parser.add_argument("--out", help="where to write the JSON results")
    parser.add_argument("--cli", action="store_true", help="time `restream replay` processes")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.events < 1:
        parser.error("--runs and --events must be at least 1")
    log = Path(args.log) if args.log else None
    try:
        if args.cli:
            run_cli(args.events, args.runs, log, Path(args.out or CLI_OUT))
        else:
            run(args.events, args.runs, log, Path(args.out or DEFAULT_OUT))
    except BenchmarkError as exc:
        print(f"serial_vs_loop FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def run(events: int, runs: int, log: Path | None, out: Path) -> dict:
    """Run the benchmark and return what it wrote to ``out``."""
    log = _ensure_log(events, log)
    rows = pq.read_metadata(log).num_rows
    print(f"serial engine vs plain-Python loop, anti-spam rule, {rows:,} events ({_display(log)})")
    with tempfile.TemporaryDirectory(prefix="restream-bench-") as tmp:
        checked = _check_outputs(log, Path(tmp))
    print(
        f"outputs agree: {checked['rows']:,} spam rows from {checked['senders']:,} senders "
        "(same rows, same senders, same order)"
    )
    print(
        "untimed first run of each side done: the serial engine's canonical log is cached "
        f"({_display(checked['cache'])}), so timed runs skip its sort; the plain loop needs none"
    )
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for i in range(runs):
        order = list(SIDES) if i % 2 == 0 else list(reversed(SIDES))
        for side in order:
            seconds, summary = _launch(side, log)
            if summary["digest"] != checked["digest"]:
                raise BenchmarkError(
                    f"{side} gave different spam rows in timed run {i + 1}: {summary}"
                )
            times[side].append(seconds)
    medians = {side: statistics.median(ts) for side, ts in times.items()}
    ratio = medians["plain loop"] / medians["serial engine"]
    print(f"whole processes (start-up, reading Parquet, the rule), {runs} interleaved run(s) each:")
    print(f"  {'':<14} {'median s':>9} {'min s':>8} {'max s':>8} {'events/s':>10}")
    for side, ts in times.items():
        print(
            f"  {side:<14} {medians[side]:>9.3f} {min(ts):>8.3f} {max(ts):>8.3f} "
            f"{rows / medians[side]:>10,.0f}"
        )
    verdict = "meets" if ratio >= TARGET else "misses"
    print(
        f"ratio plain/serial: {ratio:.2f} (the serial engine runs at {ratio:.2f}x the plain loop's "
        f"speed; {verdict} the {TARGET} target)"
    )
    results = {
        "benchmark": "serial_vs_loop",
        "log": _display(log),
        "events": rows,
        "runs": runs,
        "seconds": times,
        "median_s": medians,
        "ratio": ratio,
        "target": TARGET,
        "spam_rows": checked["rows"],
        "spam_senders": checked["senders"],
        "serial_cache": "warm (canonical log built by an untimed run)",
    }
    return write_results(results, out)


def run_cli(events: int, runs: int, log: Path | None, out: Path) -> dict:
    """The plain loop against whole ``restream replay`` processes (see the module doc)."""
    from bench.rows import digest
    from restream_kit.io.catalog import Catalog

    log = _ensure_log(events, log)
    rows = pq.read_metadata(log).num_rows
    print(f"restream replay (CLI) vs plain-Python loop, anti-spam rule, {rows:,} events")
    with tempfile.TemporaryDirectory(prefix="restream-bench-") as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "RESTREAM_HOME": str(home)}
        command = [str(Path(sys.executable).with_name("restream")), "replay"]
        command += [str(ROOT / "examples" / "antispam.py"), "--log", str(log.resolve())]

        def cli(name: str) -> tuple[float, float, str]:
            seconds, cpu = _timed_process([*command, "--quiet", "--name", name], env)
            spam = Catalog(home).load(Catalog(home).latest(name).run_id).tables["spam"]
            return seconds, cpu, digest(*(spam.column(c).to_pylist() for c in ("lsn", "sender")))

        want = _launch("plain loop", log)[1]["digest"]
        if cli("first")[2] != want:  # untimed: also writes the log's ordered copy
            raise BenchmarkError("restream replay gave other spam rows than the plain loop")
        times: dict[str, list[tuple[float, float]]] = {"plain loop": [], "restream replay": []}
        for i in range(runs):
            for side in list(times) if i % 2 == 0 else list(times)[::-1]:
                if side == "plain loop":
                    before = _children_cpu()
                    seconds, summary = _launch(side, log)
                    got, cpu = summary["digest"], _children_cpu() - before
                else:
                    seconds, cpu, got = cli(f"run{i}")
                if got != want:
                    raise BenchmarkError(f"{side} gave other spam rows in timed run {i + 1}")
                times[side].append((seconds, cpu))
    wall = {side: statistics.median(w for w, _ in ts) for side, ts in times.items()}
    cpu = {side: statistics.median(c for _, c in ts) for side, ts in times.items()}
    ratio = wall["plain loop"] / wall["restream replay"]
    cpu_ratio = cpu["plain loop"] / cpu["restream replay"]
    print(f"whole processes, {runs} interleaved run(s) each (medians):")
    for side in times:
        print(f"  {side:<16} wall {wall[side]:7.3f} s  cpu {cpu[side]:7.3f} s")
    print(
        f"ratio plain/CLI: {ratio:.2f} wall, {cpu_ratio:.2f} CPU (target {CLI_TARGET}: "
        f"{'met' if ratio >= CLI_TARGET else 'NOT met'}); load average {os.getloadavg()[0]:.1f}"
    )
    results = {
        "benchmark": "serial_vs_loop_cli",
        "log": _display(log),
        "events": rows,
        "runs": runs,
        "seconds": {side: [w for w, _ in ts] for side, ts in times.items()},
        "cpu_seconds": {side: [c for _, c in ts] for side, ts in times.items()},
        "median_s": wall,
        "median_cpu_s": cpu,
        "ratio": ratio,
        "cpu_ratio": cpu_ratio,
        "target": CLI_TARGET,
        "load_average": list(os.getloadavg()),
    }
    return write_results(results, out)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_process(command: list[str], env: dict) -> tuple[float, float]:
    """Wall and CPU seconds of one process run to its end (it must succeed)."""
    before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchmarkError(f"{' '.join(command)} exited with {proc.returncode}:\n{proc.stderr}")
    return seconds, _children_cpu() - before


def write_results(results: dict, out: Path) -> dict:
    """Add where and when the benchmark ran to ``results``, write them to ``out`` as JSON."""
    results.update(
        python=platform.python_version(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
        commit=_commit(),
        when=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {_display(out)}")
    return results


def _ensure_log(events: int, log: Path | None) -> Path:
    """The log to replay: ``log`` or the default path for ``events``, generated when missing."""
    from sample_data.social import default_path, generate, write

    path = log or ROOT / default_path(events)
    if path.exists() and log is None and pq.read_metadata(path).num_rows != events:
        print(f"{_display(path)} does not hold {events:,} events: generating it again")
        path.unlink()
    if not path.exists():
        started = time.perf_counter()
        write(generate(events), path)
        print(
            f"generated {_display(path)} ({events:,} events) in {time.perf_counter() - started:.1f} s"
        )
    ts = pq.read_table(path, columns=["ts"]).column("ts")
    if len(ts) > 1 and pc.any(pc.less(ts[1:], ts[:-1])).as_py():
        raise BenchmarkError(
            f"{path} is not in time order; the plain loop needs a log sorted by ts"
        )
    return path


def _command(side: str, log: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", SIDES[side], str(log.resolve()), *extra]


def _launch(side: str, log: Path, *extra: str) -> tuple[float, dict]:
    started = time.perf_counter()
    proc = subprocess.run(_command(side, log, *extra), cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchmarkError(f"{side} exited with {proc.returncode}:\n{proc.stderr.strip()}")
    try:
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise BenchmarkError(f"{side} printed no summary line: {proc.stdout!r}") from None
    return seconds, summary


def _check_outputs(log: Path, tmp: Path) -> dict:
    """Run each side once with its rows dumped; fail unless the rows are identical."""
    dumps = {}
    summaries = {}
    for side in SIDES:
        dump = tmp / f"{SIDES[side]}.json"
        _seconds, summaries[side] = _launch(side, log, "--dump", str(dump))
        dumps[side] = json.loads(dump.read_text())
    plain, serial = dumps["plain loop"], dumps["serial engine"]
    if plain != serial:
        raise BenchmarkError(_difference(plain, serial))
    if summaries["plain loop"] != summaries["serial engine"]:
        raise BenchmarkError(f"same rows but different summaries: {summaries}")
    cache = _serial_cache(log)
    if not cache.exists():
        raise BenchmarkError(f"the serial engine left no cached canonical log at {cache}")
    return {
        "rows": len(plain["lsn"]),
        "senders": len(set(plain["sender"])),
        "digest": summaries["plain loop"]["digest"],
        "cache": cache,
    }


def _difference(plain: dict, serial: dict) -> str:
    pairs = list(zip(plain["lsn"], plain["sender"]))
    others = list(zip(serial["lsn"], serial["sender"]))
    first = next(
        (i for i, (a, b) in enumerate(zip(pairs, others)) if a != b), min(len(pairs), len(others))
    )

    def at(rows: list[tuple[int, int]]) -> str:
        return (
            f"(lsn {rows[first][0]}, sender {rows[first][1]})" if first < len(rows) else "nothing"
        )

    return (
        f"the outputs differ: plain loop {len(pairs):,} spam rows, serial engine {len(others):,}; "
        f"first difference at row {first}: plain loop {at(pairs)}, serial engine {at(others)}"
    )


def _serial_cache(log: Path) -> Path:
    """Where the serial engine (run with cwd ``ROOT``) caches the canonical form of ``log``."""
    from restream_kit import Log
    from restream_kit.io.log import default_home

    home = default_home()
    home = home if home.is_absolute() else ROOT / home
    return home / "logs" / f"{Log(str(log.resolve())).fingerprint}.parquet"


def _commit() -> str | None:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
