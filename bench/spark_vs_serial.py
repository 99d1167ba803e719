"""The Spark engine against the serial engine, both replaying the anti-spam rule.

Each run is a whole process, timed from launch to exit, so that start-up (and, for Spark, the
JVM and the session) counts:

- serial: ``restream replay examples/antispam.py --log LOG --engine serial --json --quiet``
- spark:  the same with ``--engine spark --master local[2]``

Each run is launched by a small wrapper process, whose ``resource.getrusage(RUSAGE_CHILDREN)``
gives that run's peak RSS: the largest resident size of any one process the run started and
reaped. Spark's JVM is not reaped by its driver, so for Spark that is the Python driver only;
the wrapper also samples /proc for the whole process tree (see ``_WRAPPER``).
Before timing, one untimed run per side checks that both write the same tables and final
state, and leaves the canonical log in the cache. The sides then alternate, ``--runs`` times
each; medians are reported with events/s, the multiple of real time, the Spark engine's
seconds per stage (``Result.metrics.stages``) and, beside the measured ratio, the planner's
predicted speedup on 2 cores.

``python -m bench spark [--events N] [--runs R] [--log PATH] [--master URL] [--epoch E] [--out JSON]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

__all__ = ["main", "run", "BenchmarkError", "ROOT", "DEFAULT_OUT", "PROGRAM"]

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "antispam.py"
DEFAULT_OUT = ROOT / "bench" / "results" / "spark_vs_serial.json"
DEFAULT_EVENTS = 10_000_000
DEFAULT_MASTER = "local[2]"
#: Issue 4: on two cores the Spark engine is no slower than the serial engine (ratio >= 1).
TARGET_SPEEDUP = 1.0
#: Issue 8: a 10M-event replay keeps the replaying (kernel) process under 4 GiB.
MEMORY_LIMIT_MIB = 4096

#: Runs one command and prints its exit status, wall time and peak memory as JSON on stderr's
#: last line (the command's own output passes through). Peak memory twice: getrusage of the
#: reaped children (the largest single process; Spark's JVM is not reaped by its driver, so it
#: is missing there) and, from /proc, the sum over the process tree of each process's own peak
#: (VmHWM, sampled every 0.2 s while it runs: an upper bound of the tree's peak).
_WRAPPER = """
import json, os, resource, subprocess, sys, time
def tree(root):
    children = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(pid))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out
def hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
peaks = {}
import threading
out = {}
def drain(name, stream):
    out[name] = stream.read()
readers = [threading.Thread(target=drain, args=(n, s)) for n, s in
           (("stdout", proc.stdout), ("stderr", proc.stderr))]
for r in readers:
    r.start()
while proc.poll() is None:
    for pid in tree(proc.pid):
        peaks[pid] = max(peaks.get(pid, 0), hwm(pid))
    time.sleep(0.2)
for r in readers:
    r.join()
seconds = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.write(out["stdout"])
sys.stderr.write(out["stderr"])
sys.stderr.write("\\n" + json.dumps({"rc": proc.returncode, "seconds": seconds,
                                      "max_rss_kb": usage.ru_maxrss,
                                      "tree_peak_kb": sum(peaks.values())}) + "\\n")
"""


class BenchmarkError(RuntimeError):
    """The benchmark could not run, or the two engines did not agree."""


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the benchmark, print the table and write the JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m bench spark",
        description="Time the Spark engine against the serial engine on the anti-spam rule.",
    )
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="events (10,000,000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each engine (3)")
    parser.add_argument("--log", help="Parquet log (default: sample_data/generated/social_<N>)")
    parser.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (local[2])")
    parser.add_argument("--epoch", default=None, help="epoch size for the Spark engine")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.events < 1:
        parser.error("--runs and --events must be at least 1")
    try:
        run(
            args.events,
            runs=args.runs,
            log=Path(args.log) if args.log else None,
            master=args.master,
            epoch=args.epoch,
            out=Path(args.out),
        )
    except BenchmarkError as exc:
        print(f"spark_vs_serial FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def run(
    events: int = DEFAULT_EVENTS,
    *,
    runs: int = 3,
    log: Path | None = None,
    master: str = DEFAULT_MASTER,
    epoch: str | None = None,
    out: Path = DEFAULT_OUT,
) -> dict:
    """Run the benchmark and return what it wrote to ``out``."""
    from bench.serial_vs_loop import _display, _ensure_log, write_results

    log = _ensure_log(events, log)
    rows = pq.read_metadata(log).num_rows
    span_s = _span_s(log)
    print(
        f"Spark engine ({master}) vs serial engine, anti-spam rule, {rows:,} events "
        f"({_display(log)}, {span_s / 86400:.1f} days of log)"
    )
    predicted = _predicted_speedup(log)
    sides = {
        "serial": ["--engine", "serial"],
        "spark": ["--engine", "spark", "--master", master]
        + (["--epoch", str(epoch)] if epoch else []),
    }
    with tempfile.TemporaryDirectory(prefix="restream-bench-") as tmp:
        checked = _check_outputs(log, sides, Path(tmp))
    print(
        f"outputs agree: {checked['rows']:,} spam rows, identical tables and final state "
        f"({checked['keys']:,} state keys); the canonical log is cached for the timed runs"
    )
    runs_out: dict[str, list[dict]] = {side: [] for side in sides}
    for i in range(runs):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for side in order:
            measured = _launch(log, sides[side])
            if measured["digest"] != checked["digest"]:
                raise BenchmarkError(f"{side} gave different outputs in timed run {i + 1}")
            runs_out[side].append(measured)
            print(
                f"  run {i + 1} {side:<6} {measured['seconds']:8.1f} s, peak RSS "
                f"{measured['max_rss_kb'] / 1024:,.0f} MiB (process tree "
                f"{measured['tree_peak_kb'] / 1024:,.0f} MiB)"
            )
    medians = {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs_out.items()}
    ratio = medians["serial"] / medians["spark"]
    print(f"whole processes, {runs} interleaved run(s) each (medians):")
    header = ("", "median s", "events/s", "x real time", "peak RSS MiB", "tree MiB")
    print("  {:<7} {:>9} {:>10} {:>12} {:>13} {:>9}".format(*header))
    summary = {}
    for side, rs in runs_out.items():
        seconds = medians[side]
        rss = statistics.median(r["max_rss_kb"] for r in rs) / 1024
        tree_mib = statistics.median(r["tree_peak_kb"] for r in rs) / 1024
        summary[side] = {
            "median_s": seconds,
            "seconds": [r["seconds"] for r in rs],
            "events_per_s": rows / seconds,
            "realtime_multiple": span_s / seconds,
            "peak_rss_mib": rss,
            "process_tree_peak_mib": tree_mib,
            "inside_replay_s": statistics.median(r["metrics"]["wall_s"] for r in rs),
            "epochs": rs[0]["metrics"].get("epochs"),
        }
        print(
            f"  {side:<7} {seconds:>9.1f} {rows / seconds:>10,.0f} {span_s / seconds:>12,.0f} "
            f"{rss:>13,.0f} {tree_mib:>9,.0f}"
        )
    stages = _median_stages(runs_out["spark"])
    print("Spark engine, seconds per stage (median over runs; steps fuse stateless stages):")
    for name, seconds in stages.items():
        print(f"  {name:<28} {seconds:8.1f}")
    print(
        f"speedup serial/spark: measured {ratio:.2f}x; the planner predicts {predicted:.2f}x "
        "on 2 cores (work / critical path, from a sample of the log)"
    )
    speed_ok = ratio >= TARGET_SPEEDUP
    kernel_mib = max(summary[side]["peak_rss_mib"] for side in summary)
    memory_ok = kernel_mib < MEMORY_LIMIT_MIB
    print(
        f"target: Spark no slower than serial: {'met' if speed_ok else 'NOT met'} "
        f"({ratio:.2f}x); replaying process under {MEMORY_LIMIT_MIB} MiB: "
        f"{'met' if memory_ok else 'NOT met'} (largest {kernel_mib:,.0f} MiB)"
    )
    results = {
        "benchmark": "spark_vs_serial",
        "log": _display(log),
        "events": rows,
        "span_s": span_s,
        "runs": runs,
        "master": master,
        "epoch": epoch,
        "sides": summary,
        "spark_stages_s": stages,
        "measured_speedup": ratio,
        "predicted_speedup_p2": predicted,
        "target_speedup": TARGET_SPEEDUP,
        "speed_ok": speed_ok,
        "memory_limit_mib": MEMORY_LIMIT_MIB,
        "kernel_peak_mib": kernel_mib,
        "memory_ok": memory_ok,
        "spam_rows": checked["rows"],
    }
    return write_results(results, out)


def _span_s(log: Path) -> float:
    ts = pq.read_table(log, columns=["ts"]).column("ts")
    return (ts[-1].as_py() - ts[0].as_py()) / 1000.0 if len(ts) else 0.0


def _predicted_speedup(log: Path) -> float:
    from restream_kit import Log, Program
    from restream_kit.planner import plan

    the_plan = plan(Program.from_file(PROGRAM), Log(str(log)))
    return the_plan.data.speedup(2) if the_plan.data is not None else float("nan")


def _command(log: Path, extra: list[str], out_dir: Path | None = None) -> list[str]:
    command = [
        sys.executable, "-m", "restream_kit", "replay", str(PROGRAM), "--log", str(log.resolve()),
        "--json", "--quiet", *extra,
    ]  # fmt: skip
    if out_dir is not None:
        command += ["--out", str(out_dir)]
    return command


def _launch(log: Path, extra: list[str], out_dir: Path | None = None) -> dict:
    """Run one replay in a wrapper process: its summary, wall time and peak RSS."""
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *_command(log, extra, out_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    try:
        measured = json.loads(proc.stderr.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise BenchmarkError(f"the wrapper printed no measurement: {proc.stderr[-2000:]}") from None
    if measured["rc"] != 0 or proc.returncode != 0:
        raise BenchmarkError(
            f"{' '.join(extra)} exited with {measured['rc']}:\n{proc.stderr[-3000:]}"
        )
    try:
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise BenchmarkError(
            f"{' '.join(extra)} printed no JSON summary: {proc.stdout!r}"
        ) from None
    measured["metrics"] = summary["metrics"]
    measured["digest"] = json.dumps(
        {"tables": summary["tables"], "state": summary["state"]}, sort_keys=True
    )
    return measured


def _check_outputs(log: Path, sides: dict[str, list[str]], tmp: Path) -> dict:
    """One untimed run per engine, writing its tables: they must be identical."""
    tables = {}
    digests = {}
    for side, extra in sides.items():
        started = time.perf_counter()
        measured = _launch(log, extra, tmp / side)
        print(f"  untimed {side} run: {time.perf_counter() - started:.1f} s")
        digests[side] = measured["digest"]
        tables[side] = {
            path.stem: pq.read_table(path) for path in sorted((tmp / side).glob("*.parquet"))
        }
    if digests["serial"] != digests["spark"]:
        raise BenchmarkError(f"different tables or state sizes: {digests}")
    for name, want in tables["serial"].items():
        got = tables["spark"].get(name)
        if got is None or got.schema != want.schema or got.to_pylist() != want.to_pylist():
            raise BenchmarkError(f"table {name!r} differs between the engines")
    summary = json.loads(digests["serial"])
    return {
        "rows": sum(summary["tables"].values()),
        "keys": sum(summary["state"].values()),
        "digest": digests["serial"],
    }


def _median_stages(runs: list[dict]) -> dict[str, float]:
    names = list(dict.fromkeys(n for r in runs for n in r["metrics"].get("stages", {})))
    return {
        name: statistics.median(r["metrics"]["stages"].get(name, 0.0) for r in runs)
        for name in names
    }


if __name__ == "__main__":
    sys.exit(main())
