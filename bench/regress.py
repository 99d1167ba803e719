"""The benchmarks' rules before and after a change, in one run: no rule slower by more than 5%.

``python -m bench regress --base REV`` checks ``REV`` out into a temporary git worktree and
times a representative set of the benchmarks' rules against it and against the current tree
(the working directory as it is, uncommitted edits included), on the same log:

- ``serial/antispam``: the serial engine on the anti-spam rule, warm (``bench serial``);
- ``cli/antispam``: the whole ``restream replay antispam.py --quiet`` process, serial (``bench
  serial --cli``), in a catalog of its own per tree;
- ``windows/...``: a few windowed cells of ``bench windows``, serial, warm;
- ``reuse/antispam``: the re-replay after the threshold edit, from a recorded v1 (``bench
  reuse``);
- ``spark/antispam``, ``spark/ordinary``, ``spark/windows``: the Spark engine warm on a
  lowerable, an ordinary-Python and a windowed rule (``bench spark-rules``), ``--master``.

Each side is a subprocess with ``PYTHONPATH`` set to its tree, running ``bench/
_regress_probe.py`` of the current tree (so both sides run the same programs and measure the
same way); the sides alternate ``--runs`` times (base first, then current first, ...), each
process timing every rule ``--repeat`` times after an untimed run. The report gives per rule
the medians of wall and CPU time (the CPU of the process and of the ones it started: the
Spark JVM and workers), and ``current / base`` for both; a ratio over ``1 + --threshold``
(1.05) is flagged ``SLOWER``. A rule whose tables differ between the trees is flagged
``DIFFERS``. The exit status is 1 when anything is flagged.

By default (1M events, 3 runs, 1 repeat) it takes about 15-20 minutes on two cores;
``--events``, ``--runs``, ``--rules`` (prefixes: ``serial,spark``) and ``--no-spark`` make it
shorter. Results go to ``bench/results/regress.json`` unless ``--out`` says otherwise.

``python -m bench regress --base REV [--events N] [--runs R] [--repeat K] [--rules a,b]
[--no-spark] [--master URL] [--threshold 0.05] [--log PATH] [--out JSON]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from bench.reuse_bench import edited
from bench.serial_vs_loop import _ensure_log
from bench.windows_bench import cell_source

__all__ = ["main", "rules", "regress", "RegressError"]

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "_regress_probe.py"
DEFAULT_OUT = ROOT / "bench" / "results" / "regress.json"
ANTISPAM = ROOT / "examples" / "antispam.py"
#: The windowed cells of ``bench windows`` timed: each window once, keys and aggregates mixed.
WINDOW_CELLS = (
    ("tumbling", "src", "count", "rows"),
    ("hopping", "src", "distinct", "rows"),
    ("sliding", "ip", "count", "threshold"),
    ("session", "pair", "count", "rows"),
)
SPARK_RULES = {
    "antispam": ANTISPAM,
    "ordinary": ROOT / "bench" / "programs" / "ordinary.py",
    "windows": ROOT / "bench" / "programs" / "windows.py",
}
#: The rule timed as whole ``restream replay`` processes rather than in the probe.
CLI_RULE = "cli/antispam"
SIDES = ("base", "current")


class RegressError(RuntimeError):
    """A side failed to run, or the base revision could not be checked out."""


def rules(programs: Path, master: str, spark: bool) -> list[dict]:
    """Every rule the probes time, with its program files written under ``programs``."""
    found = [{"name": "serial/antispam", "program": str(ANTISPAM)}]
    for cell in WINDOW_CELLS:
        path = programs / f"window_{'_'.join(cell)}.py"
        path.write_text(cell_source(*cell))
        found.append({"name": f"windows/{'/'.join(cell)}", "program": str(path)})
    v2 = programs / "antispam_v2.py"
    v2.write_text(edited(ANTISPAM.read_text()))
    found.append({"name": "reuse/antispam", "program": str(v2), "reuse_of": str(ANTISPAM)})
    if spark:
        found += [
            {"name": f"spark/{name}", "program": str(path), "engine": "spark", "master": master}
            for name, path in SPARK_RULES.items()
        ]
    return found


def main(argv: list[str] | None = None) -> int:
    """Parse the options, time both trees, print the report; 1 when a rule is flagged."""
    parser = argparse.ArgumentParser(prog="python -m bench regress", description=__doc__)
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--runs", type=int, default=3, help="processes per side (3)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per process (1)")
    parser.add_argument("--rules", default="", help="only rules starting with one of these")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark rules")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--threshold", type=float, default=0.05, help="allowed slowdown (0.05)")
    parser.add_argument("--log", help="Parquet log (default: sample_data/generated/social_<N>)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)
    if min(args.runs, args.repeat, args.events) < 1:
        parser.error("--runs, --repeat and --events must be at least 1")
    prefixes = tuple(p for p in args.rules.split(",") if p)
    try:
        report = regress(args, prefixes)
    except RegressError as exc:
        print(f"regress FAILED: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 1 if any(row["flags"] for row in report["rules"].values()) else 0


def regress(args: argparse.Namespace, prefixes: tuple[str, ...]) -> dict:
    """Time both trees, alternating, print the table and return the report."""
    log = _ensure_log(args.events, Path(args.log) if args.log else None).resolve()
    with (
        tempfile.TemporaryDirectory(prefix="restream-regress-") as tmp,
        _worktree(args.base, Path(tmp) / "base") as base,
    ):
        tmp = Path(tmp)
        (tmp / "programs").mkdir()
        chosen = [
            rule
            for rule in rules(tmp / "programs", args.master, not args.no_spark)
            if not prefixes or rule["name"].startswith(prefixes)
        ]
        cli = not prefixes or CLI_RULE.startswith(prefixes)
        trees = {"base": base, "current": ROOT}
        print(
            f"regress: current tree ({ROOT}) vs {args.base} ({_describe(base)}), "
            f"{args.events:,} events, {args.runs} process(es) per side, {args.repeat} timed "
            "run(s) each, alternating"
        )
        spec = tmp / "spec.json"
        spec.write_text(json.dumps({"log": str(log), "repeat": args.repeat, "rules": chosen}))
        samples = {side: {} for side in SIDES}
        for i in range(args.runs):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                home = tmp / f"home-{side}"
                if chosen:
                    got = _probe(trees[side], spec, home, tmp / f"out-{side}-{i}.json")
                    _add(samples[side], got["rules"])
                if cli:
                    _add(samples[side], {CLI_RULE: _cli(trees[side], log, home, args.repeat)})
        report = _report(samples, args.threshold)
    report.update(base=args.base, events=args.events, runs=args.runs, repeat=args.repeat)
    report["log"] = str(log)
    _print(report)
    return report


@contextmanager
def _worktree(rev: str, where: Path):
    """``rev`` checked out (detached) at ``where`` for the duration; removed afterwards."""
    git = ["git", "-C", str(ROOT)]
    proc = subprocess.run(
        [*git, "worktree", "add", "--detach", str(where), rev], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RegressError(f"cannot check out {rev!r}: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(where)], capture_output=True)
        subprocess.run([*git, "worktree", "prune"], capture_output=True)


def _describe(tree: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    return proc.stdout.strip()[:60]


def _env(tree: Path, home: Path) -> dict[str, str]:
    """The environment of a side: its tree first on the path, its own catalog and caches."""
    home.mkdir(exist_ok=True)
    return {**os.environ, "PYTHONPATH": str(tree), "RESTREAM_HOME": str(home)}


def _probe(tree: Path, spec: Path, home: Path, out: Path) -> dict:
    """One probe process of ``tree``: the timings it wrote."""
    proc = subprocess.run(
        [sys.executable, str(PROBE), str(spec), str(out)],
        env=_env(tree, home),
        cwd=home,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RegressError(f"the probe of {tree} failed:\n{proc.stderr[-3000:]}")
    got = json.loads(out.read_text())
    if Path(got["restream_kit"]).parent.resolve() != tree.resolve():
        raise RegressError(f"the probe of {tree} imported restream_kit from {got['restream_kit']}")
    return got


def _cli(tree: Path, log: Path, home: Path, repeat: int) -> dict:
    """Whole ``restream replay`` processes of ``tree``: one untimed (it writes the log's
    ordered copy), then ``repeat`` timed, with their CPU time."""
    command = [sys.executable, "-m", "restream_kit", "replay", str(ANTISPAM), "--log", str(log)]
    command.append("--quiet")
    env = _env(tree, home)
    seconds, cpu = [], []
    for i in range(repeat + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(command, env=env, cwd=home, capture_output=True, text=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RegressError(f"restream replay in {tree} failed:\n{proc.stderr[-3000:]}")
        if i:
            seconds.append(wall)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {"seconds": seconds, "cpu": cpu, "digest": None}


def _add(into: dict, rules: dict) -> None:
    for name, got in rules.items():
        row = into.setdefault(name, {"seconds": [], "cpu": [], "digests": set()})
        row["seconds"] += got["seconds"]
        row["cpu"] += got["cpu"]
        row["digests"].add(got["digest"])


def _report(samples: dict, threshold: float) -> dict:
    """Medians, ratios current/base and flags, per rule."""
    report: dict = {"threshold": threshold, "rules": {}}
    for name, base in samples["base"].items():
        current = samples["current"][name]
        row: dict = {"flags": []}
        for measure, key in (("wall", "seconds"), ("cpu", "cpu")):
            b, c = statistics.median(base[key]), statistics.median(current[key])
            ratio = c / b if b > 0 else 1.0
            row[measure] = {"base_s": b, "current_s": c, "ratio": ratio}
            row[f"{measure}_runs"] = {"base": base[key], "current": current[key]}
            if ratio > 1 + threshold:
                row["flags"].append(f"SLOWER ({measure})")
        if base["digests"] != current["digests"] or len(base["digests"]) != 1:
            row["flags"].append("DIFFERS")
        report["rules"][name] = row
    return report


def _print(report: dict) -> None:
    print(
        f"  {'rule':<34} {'wall base':>9} {'current':>8} {'ratio':>6}  "
        f"{'cpu base':>9} {'current':>8} {'ratio':>6}"
    )
    for name, row in report["rules"].items():
        wall, cpu = row["wall"], row["cpu"]
        print(
            f"  {name:<34} {wall['base_s']:>8.2f}s {wall['current_s']:>7.2f}s "
            f"{wall['ratio']:>6.3f}  {cpu['base_s']:>8.2f}s {cpu['current_s']:>7.2f}s "
            f"{cpu['ratio']:>6.3f}  {' '.join(row['flags'])}".rstrip()
        )
    flagged = [name for name, row in report["rules"].items() if row["flags"]]
    limit = f"{report['threshold']:.0%}"
    if flagged:
        print(f"flagged (slower by more than {limit}, or different tables): {', '.join(flagged)}")
    else:
        print(f"no rule slower by more than {limit} (current/base, medians), same tables")
