"""The Spark engine against the serial engine on several kinds of rule, warm and cold.

Rules (``bench/programs/`` and ``examples/``):

- ``antispam``: the anti-spam rule (lowers to columns: the prefix path);
- ``ordinary``: a float EWMA per sender, a sliding one-hour count per IP kept by a timed
  write, and a rule reading both (ordinary Python: parallel passes);
- ``windows``: a tumbling count per sender and a sliding count per IP (``schedule()``
  underneath: parallel passes);
- ``windows-ip``: a tumbling count per IP and a sliding count per sender with a threshold
  alert (the window keyed like its stage, the other not);
- ``sessions``: sessions per sender and a hopping count of distinct recipients per IP with
  an ``on_close`` alert;
- ``windows-keyed``: a tumbling count with an ``on_close`` alert, sessions and a sliding
  count, all per sender (every window keyed like its stage: closes run in its pass);
- ``ewma``: one partitioned stage with floats (the hand-written-job comparison);
- ``teams``: a read by a looked-up key (a broadcast read: every partition of its pass holds a
  copy of the counts it reads).

Two measures, both as ratios against the serial engine measured in the same run:

- **warm** (the notebook case): one process, the log loaded and the Spark session up; the
  serial and the Spark replay alternate ``--runs`` times, medians;
- **cold** (the command line): whole ``restream replay ... --json --quiet`` processes,
  alternating, medians, with the process's peak memory. On a local master the driver
  arranges a large log once and leaves the arrangement on disk for later processes
  (``docs/spark_engine.md``): the first Spark process, with none on disk, is reported
  on its own. On a ``spark://`` master the timed processes run through ``restream driver``
  (a long-lived driver the bench starts), and one process with its own JVM and executors is
  reported on its own.

Every Spark result is compared with the serial one before timing. The report gives events/s,
the time per stage, what ran (``metrics.path``) and the planner's predicted speedup; and, warm
on a local master, each side's CPU time (Spark's by driver, JVM and Python workers,
``bench/spark_rules_cpu.py``) with the ratio that CPU allows on the master's cores: on a
shared machine the CPU changes least.

``--checkpoint`` adds a third side: the Spark replay checkpointing 10 epochs, reported as its
cost against the uncheckpointed Spark replay. ``--resume`` adds another: a Spark replay
resumed after the fifth of those 10 epochs (the second half of the log), against the same.
``--on-error skip|quarantine`` runs every side with that ``on_error``.
``--checkpoint-every EVERY`` sets how often the checkpointed side commits (its waves; the
default is the engine's, 60 s). ``--kills`` kills a checkpointed whole process at a quarter,
half and three quarters of its time and resumes it (``bench/_kills.py``): the age of the
commit resumed from, and the result checked identical.

``python -m bench spark-rules [--events N] [--rules a,b] [--runs R] [--master URL]
[--no-cold] [--checkpoint] [--checkpoint-every EVERY] [--kills] [--resume] [--on-error MODE]
[--out JSON]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._kills import kills
from bench.spark_rules_cpu import bound, cpu_spent, tree_cpu

__all__ = ["main", "RULES", "replay_command", "run_process"]

ROOT = Path(__file__).resolve().parents[1]
RULES = {
    "antispam": ROOT / "examples" / "antispam.py",
    "ordinary": ROOT / "bench" / "programs" / "ordinary.py",
    "windows": ROOT / "bench" / "programs" / "windows.py",
    "windows-ip": ROOT / "bench" / "programs" / "windows_ip.py",
    "sessions": ROOT / "bench" / "programs" / "windows_sessions.py",
    "windows-keyed": ROOT / "bench" / "programs" / "windows_keyed.py",
    "ewma": ROOT / "bench" / "programs" / "sender_ewma.py",
    "teams": ROOT / "bench" / "programs" / "teams.py",
}
DEFAULT_OUT = ROOT / "bench" / "results" / "spark_rules.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench spark-rules", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated rules")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per side (3)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--no-cold", action="store_true", help="skip whole-process runs")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    parser.add_argument("--log", help="Parquet log (default: sample_data/generated/social_<N>)")
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="also time Spark with --checkpoint (10 epochs), against Spark without it",
    )
    parser.add_argument(
        "--checkpoint-every",
        default=None,
        metavar="EVERY",
        help="with --checkpoint or --kills: commit this often (60s; 5s, 500000 events...)",
    )
    parser.add_argument(
        "--kills",
        action="store_true",
        help="kill a checkpointed whole process at 1/4, 1/2, 3/4 of its time, and resume it",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="also time a Spark resume after 5 of 10 checkpointed epochs",
    )
    parser.add_argument(
        "--on-error",
        default="stop",
        choices=("stop", "skip", "quarantine"),
        help="on_error",
    )
    args = parser.parse_args(argv)
    rules = [r for r in args.rules.split(",") if r]
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        parser.error(f"unknown rule(s) {unknown}; known: {', '.join(RULES)}")
    from bench.serial_vs_loop import _ensure_log

    log_path = _ensure_log(args.events, Path(args.log) if args.log else None)
    report = {
        "events": args.events,
        "master": args.master,
        "log": str(log_path),
        "rules": {},
    }
    report["on_error"] = args.on_error
    sides = ["checkpointed"] * args.checkpoint + ["resumed"] * args.resume
    if args.checkpoint and args.checkpoint_every:
        sides.append("checkpointed_once")  # the same commits, in one wave: what waves add
    warm = _warm(
        log_path,
        rules,
        args.runs,
        args.master,
        sides,
        args.on_error,
        args.checkpoint_every,
    )
    if not args.master.startswith("local"):
        # The warm session holds the cluster's cores: a whole-process run needs them.
        from restream_kit.engines.spark import stop_session

        stop_session()
    for rule in rules:
        report["rules"][rule] = {"warm": warm[rule]}
        if args.kills:
            print(f"  {rule}: killed whole processes, --checkpoint-every {args.checkpoint_every}")
            want = warm[rule].pop("_want")
            every = args.checkpoint_every or "60s"
            report["rules"][rule]["kills"] = kills(
                RULES[rule], log_path, args.master, every, want, _same
            )
        warm[rule].pop("_want", None)
        if not args.no_cold:
            report["rules"][rule]["cold"] = _cold(log_path, rule, args.runs, args.master)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


def _warm(
    log_path: Path,
    rules: list[str],
    runs: int,
    master: str,
    more: list,
    on_error: str,
    every: str | None = None,
) -> dict:
    """Warm session: both engines in this process, the log loaded and Spark up; ``more``
    sides (``checkpointed``, ``resumed``) timed beside the uncheckpointed Spark replay."""
    import restream_kit as rk
    from restream_kit.planner import plan

    log = rk.Log(log_path)
    len(log)
    out = {}
    for rule in rules:
        program = rk.Program.from_file(RULES[rule])
        want = rk.replay(program, log, on_error=on_error)
        spark = dict(engine="spark", master=master, on_error=on_error)
        got = rk.replay(program, log, **spark)  # warms the session
        _same(got, want, rule)
        sides = ["serial", "spark", *more]
        times: dict[str, list[float]] = {side: [] for side in sides}
        epoch = max(1, len(log) // 10)
        stages = []
        waves = [None]  # how the checkpointed side committed (``metrics.path``)
        half = tempfile.TemporaryDirectory() if "resumed" in more else None
        if half is not None:  # five epochs of ten committed, as if killed then
            ck = Path(half.name) / "ck"
            rk.replay(program, log, **spark, checkpoint=ck, epoch=epoch)
            manifest = json.loads((ck / "manifest.json").read_text())
            manifest["epochs"], manifest["complete"] = manifest["epochs"][:5], False
        cpu: dict[str, list] = {"serial": [], "spark": []}
        for i in range(runs):
            for side in sides if i % 2 == 0 else sides[::-1]:
                started, before = time.perf_counter(), tree_cpu()
                if side == "serial":
                    rk.replay(program, log, on_error=on_error)
                    cpu[side].append(cpu_spent(before, tree_cpu()))
                elif side in ("checkpointed", "checkpointed_once"):
                    with tempfile.TemporaryDirectory() as tmp:
                        done = rk.replay(
                            program,
                            log,
                            **spark,
                            checkpoint=Path(tmp) / "ck",
                            epoch=epoch,
                            checkpoint_every=every if side == "checkpointed" else len(log),
                        )
                        if side == "checkpointed":
                            waves[0] = done.metrics.path.get("checkpoint", "one wave")
                        times[side].append(time.perf_counter() - started)
                    _same(done, want, rule)
                    continue
                elif side == "resumed":
                    (ck / "manifest.json").write_text(json.dumps(manifest))
                    started = time.perf_counter()
                    done = rk.replay(program, log, **spark, checkpoint=ck, epoch=epoch, resume=True)
                    times[side].append(time.perf_counter() - started)
                    _same(done, want, rule)
                    continue
                else:
                    result = rk.replay(program, log, **spark)
                    cpu[side].append(cpu_spent(before, tree_cpu()))
                    stages.append(result.metrics.stages)
                times[side].append(time.perf_counter() - started)
        if half is not None:
            half.cleanup()
        med = {side: statistics.median(ts) for side, ts in times.items()}
        the_plan = plan(program, log, allow_nondeterminism=True)
        predicted = the_plan.data.speedup(2) if the_plan.data is not None else None
        row = {
            "serial_s": med["serial"],
            "spark_s": med["spark"],
            "ratio": med["serial"] / med["spark"],
            "spark_events_per_s": len(log) / med["spark"],
            "serial_events_per_s": len(log) / med["serial"],
            "path": got.metrics.path,
            "stage_s": {k: statistics.median(s.get(k, 0.0) for s in stages) for k in stages[-1]},
            "predicted_speedup_2": predicted,
            "runs": times,
        }
        row["cpu"] = _cpu(cpu, master)
        if "checkpointed" in more:
            row["checkpointed_s"] = med["checkpointed"]
            row["checkpoint_cost"] = med["checkpointed"] / med["spark"]
            row["checkpoint_waves"] = waves[0]
        if "checkpointed_once" in more:
            row["checkpointed_once_s"] = med["checkpointed_once"]
            row["checkpoint_once_cost"] = med["checkpointed_once"] / med["spark"]
        if "resumed" in more:
            row["resumed_s"] = med["resumed"]
            row["resume_cost"] = med["resumed"] / med["spark"]
        out[rule] = row
        row["_want"] = want  # (for --kills; taken out of the report)
        print(
            f"warm {rule:<9} serial {med['serial']:7.2f} s  spark {med['spark']:7.2f} s  "
            f"ratio {row['ratio']:5.2f}x  ({row['spark_events_per_s']:,.0f} events/s; "
            f"predicted {predicted if predicted is None else round(predicted, 2)}x)"
        )
        if row["cpu"]:
            c = row["cpu"]
            parts = ", ".join(f"{k} {v:.2f}" for k, v in c["spark_parts"].items())
            print(
                f"    CPU: serial {c['serial_s']:.2f} s, spark {c['spark_s']:.2f} s ({parts}); "
                f"on {c['cores']} free cores at most {c['bound']:.2f}x"
            )
        if "checkpointed" in more:
            print(
                f"    with --checkpoint (10 epochs, {waves[0]}): {med['checkpointed']:.2f} s, "
                f"{row['checkpoint_cost']:.2f}x the uncheckpointed Spark replay"
            )
        if "checkpointed_once" in more:
            print(
                f"    the same commits in one wave: {med['checkpointed_once']:.2f} s, "
                f"{row['checkpoint_once_cost']:.2f}x the uncheckpointed Spark replay"
            )
        if "resumed" in more:
            print(
                f"    resumed after 5 of 10 epochs: {med['resumed']:.2f} s, "
                f"{row['resume_cost']:.2f}x the uncheckpointed Spark replay of the whole log"
            )
        for stage, what in got.metrics.path.items():
            # A stage that runs inside another's pass is timed under the pass's name.
            name = next((k for k in row["stage_s"] if stage in k.split(", ")), stage)
            shared = f" (the pass {name!r})" if name != stage else ""
            print(f"    {stage}: {what}, {row['stage_s'].get(name, 0.0):.2f} s{shared}")
    return out


def _cpu(cpu: dict, master: str) -> dict | None:
    """Medians of the CPU each side spent (``bench/spark_rules_cpu.py``), Spark's by part,
    and the ratio its CPU allows on the master's cores."""
    if not cpu["spark"] or None in cpu["serial"] + cpu["spark"] or not master.startswith("local"):
        return None
    inside = master.removeprefix("local").strip("[]")
    first = inside.split(",")[0]
    cores = (os.cpu_count() or 1) if first in ("", "*") else int(first)
    serial = statistics.median(c["total"] for c in cpu["serial"])
    spark = statistics.median(c["total"] for c in cpu["spark"])
    parts = {k: statistics.median(c[k] for c in cpu["spark"]) for k in ("driver", "jvm", "workers")}
    return {
        "serial_s": serial,
        "spark_s": spark,
        "spark_parts": parts,
        "cores": cores,
        "bound": bound(serial, spark, cores),
    }


def replay_command(program: Path, log_path: Path) -> list[str]:
    """A whole ``restream replay`` process of ``program`` over ``log_path`` (serial; add
    ``--engine spark --master URL`` for Spark), quiet, its result as JSON."""
    base = [sys.executable, "-m", "restream_kit", "replay", str(program), "--log"]
    return base + [str(log_path), "--json", "--quiet"]


def run_process(command: list[str]) -> tuple[float, float]:
    """One whole process of ``command`` under the peak-memory wrapper (in ``ROOT``): its
    seconds and its process tree's peak MiB."""
    from bench.spark_vs_serial import _WRAPPER

    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *command], capture_output=True, text=True, cwd=ROOT
    )
    last = json.loads(proc.stderr.strip().splitlines()[-1])
    if last["rc"] != 0:
        raise RuntimeError(f"{' '.join(command[3:5])} failed: {proc.stderr[-2000:]}")
    return last["seconds"], last["tree_peak_kb"] / 1024


def _cold(log_path: Path, rule: str, runs: int, master: str) -> dict:
    """Whole CLI processes, alternating, with peak memory from the wrapper."""
    base = replay_command(RULES[rule], log_path)
    sides = {
        "serial": base + ["--engine", "serial"],
        "spark": base + ["--engine", "spark", "--master", master],
    }
    times: dict[str, list[float]] = {s: [] for s in sides}
    memory: dict[str, list[float]] = {s: [] for s in sides}

    def run(side: str) -> tuple[float, float]:
        return run_process(sides[side])

    # On a local master the driver arranges a large log once and keeps the files for later
    # processes (docs/spark_engine.md): the first process, with none on disk, pays for it.
    first = alone = None
    if master.startswith("local"):
        _forget_arrangements(log_path)
        first = run("spark")[0]
    driver = None
    if master.startswith("spark://"):
        # On a cluster a process's own JVM and executors cost half a minute: one process
        # without a driver, reported apart; the timed ones run through `restream driver`.
        alone = run("spark")[0]
        driver = _start_driver(master)
    try:
        for i in range(runs):
            for side in sides if i % 2 == 0 else reversed(list(sides)):
                seconds, peak = run(side)
                times[side].append(seconds)
                memory[side].append(peak)
    finally:
        if driver is not None:
            driver.terminate()
            driver.wait(timeout=60)
    med = {side: statistics.median(ts) for side, ts in times.items()}
    row = {
        "serial_s": med["serial"],
        "spark_s": med["spark"],
        "ratio": med["serial"] / med["spark"],
        "spark_first_process_s": first,
        "spark_without_driver_s": alone,
        "tree_peak_mib": {s: statistics.median(m) for s, m in memory.items()},
        "runs": times,
    }
    print(
        f"cold {rule:<9} serial {med['serial']:7.2f} s  spark {med['spark']:7.2f} s  "
        f"ratio {row['ratio']:5.2f}x  (process tree {row['tree_peak_mib']['spark']:,.0f} MiB)"
    )
    if first is not None:
        print(f"    spark's first process, no arrangement of the log on disk yet: {first:.2f} s")
    if alone is not None:
        print(
            f"    through `restream driver`; a process with its own driver instead: {alone:.2f} s"
        )
    return row


def _start_driver(master: str) -> subprocess.Popen:
    """``restream driver`` on ``master``, once it is warm and listening (in ``ROOT``, where
    the timed processes run, so that they find it)."""
    command = [sys.executable, "-m", "restream_kit", "driver", "--master", master]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "serving" not in line:
        proc.kill()
        raise RuntimeError(f"restream driver did not start: {line}")
    return proc


def _forget_arrangements(log_path: Path) -> None:
    """Remove the arrangements of ``log_path`` that earlier processes left in the scratch
    directory of the processes this bench starts (they run in ``ROOT``)."""
    import restream_kit as rk
    from restream_kit.io.log import default_home

    fingerprint = rk.Log(log_path).fingerprint
    for path in (ROOT / default_home() / "scratch").glob(f"{fingerprint}.*.arranged.arrow"):
        path.unlink()


def _same(got, want, rule: str) -> None:
    if sorted(got.tables) != sorted(want.tables) or got.state != want.state:
        raise RuntimeError(f"{rule}: Spark and serial results differ")
    for name, table in want.tables.items():
        if not got.tables[name].equals(table):
            raise RuntimeError(f"{rule}: table {name} differs")


if __name__ == "__main__":
    sys.exit(main())
