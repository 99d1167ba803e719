"""A Spark replay whose output table is as large as its log: the tables written by the tasks
and read when asked, against the rows brought to the driver.

The rule (``bench/programs/per_event.py``) emits a row per message. ``restream replay
--engine spark --master local[2]`` on the pass path runs as a whole process, recording the run
in a fresh catalog, alternately with ``$RESTREAM_RESULT_ROWS`` at 0 (every table written by
the tasks, ``docs/scale.md``) and at 10^12 (never: the rows travel to the driver, as before).
Each run's wall time, the peak resident memory of its driver (the Python process) and of its
whole process tree are reported (medians), and the recorded table is checked equal between the
two sides. ``--path prefix`` runs ``bench/programs/lowered_per_event.py`` (a rule that lowers
to columns, also a row per message) on the prefix path instead.

``--checkpoint-every EVERY`` (with ``--epoch N``) replays with a checkpoint committed in waves
of that size (``--checkpoint DIR --checkpoint-every EVERY``, a new directory each run), whose
tables are read back from the commits (``docs/checkpoints.md``); ``--code DIR`` runs the replays
with the ``restream_kit`` of another checkout (an older version, to compare with).

``python -m bench result-files [--events 1000000] [--runs 3] [--log PATH] [--path passes|prefix]
[--checkpoint-every EVERY [--epoch N]] [--code DIR] [--out JSON]``
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

import psutil
import pyarrow.parquet as pq

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
#: The rule each path runs: a row per message.
PROGRAMS = {
    "passes": ROOT / "bench" / "programs" / "per_event.py",
    "prefix": ROOT / "bench" / "programs" / "lowered_per_event.py",
}
DEFAULT_OUT = ROOT / "bench" / "results" / "result_files.json"
SIDES = {"files": "0", "driver": str(10**12)}


def _peaks(command: list[str], env: dict[str, str], cwd: Path = ROOT) -> dict:
    """Run ``command`` in ``cwd``; its wall time and the peaks of its own and its tree's
    memory."""
    started = time.perf_counter()
    with subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL) as proc:
        root = psutil.Process(proc.pid)
        own = tree = 0
        while proc.poll() is None:
            try:
                mine = root.memory_info().rss
                kids = sum(_rss(p) for p in root.children(recursive=True))
                own, tree = max(own, mine), max(tree, mine + kids)
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.05)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    wall = time.perf_counter() - started
    return {"wall_s": round(wall, 2), "driver_mb": own / 2**20, "tree_mb": tree / 2**20}


def _rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def _log(events: int, given: str | None) -> Path:
    from bench.serial_vs_loop import _ensure_log

    return _ensure_log(events, Path(given) if given else None)


def run(
    events: int,
    runs: int,
    log: Path,
    out: Path,
    path: str = "passes",
    checkpoint: tuple[str, str] | None = None,
    code: Path = ROOT,
) -> dict:
    """Both sides ``runs`` times (after a warm-up pair); ``checkpoint`` = (every, epoch)
    commits each run in waves; ``code`` is the checkout whose ``restream_kit`` runs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["RESTREAM_SPARK_PATH"] = path
    program = PROGRAMS[path]
    got: dict[str, list[dict]] = {side: [] for side in SIDES}
    tables = {}
    with tempfile.TemporaryDirectory(prefix="restream-results-") as home:
        env["RESTREAM_HOME"] = home
        command = [sys.executable, "-m", "restream_kit", "replay", str(program), "--log"]
        command += [str(log.resolve()), "--engine", "spark", "--master", "local[2]", "--quiet"]
        if checkpoint is not None:
            command += ["--checkpoint-every", checkpoint[0], "--epoch", checkpoint[1]]
        for i in range(runs + 1):  # the first pair warms the log's copy and the caches
            for side in SIDES if i % 2 == 0 else list(SIDES)[::-1]:
                env["RESTREAM_RESULT_ROWS"] = SIDES[side]
                ck = ["--checkpoint", f"{home}/ck-{side}-{i}"] if checkpoint is not None else []
                # (in ``code``: ``python -m`` puts the working directory first on the path)
                done = _peaks([*command, *ck, "--out", f"{home}/{side}"], env, code)
                if i:
                    got[side].append(done)
                tables[side] = pq.read_table(next(Path(f"{home}/{side}").glob("*.parquet")))
        if not tables["files"].equals(tables["driver"]):
            raise RuntimeError("the tables written by the tasks differ from the driver's")
    med = {
        side: {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}
        for side, rows in got.items()
    }
    for side, m in med.items():
        print(
            f"{side:>7}: {m['wall_s']:7.1f} s, driver peak {m['driver_mb']:7.1f} MB, "
            f"process tree {m['tree_mb']:7.1f} MB",
            flush=True,
        )
    events = pq.read_metadata(log).num_rows if log.is_file() else events
    result = {
        "path": path,
        "checkpoint_every": checkpoint and checkpoint[0],
        "epoch": checkpoint and checkpoint[1],
        "code": str(code),
        "events": events,
        "rows": tables["files"].num_rows,
        "runs": runs,
        "median": med,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench result-files", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="events (1,000,000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per side (3)")
    parser.add_argument("--log", help="Parquet log (default: a generated social log)")
    parser.add_argument("--path", choices=sorted(PROGRAMS), default="passes", help="(passes)")
    parser.add_argument("--checkpoint-every", help="commit a checkpoint in waves of this size")
    parser.add_argument("--epoch", default="100000", help="a checkpoint's epoch (100000)")
    parser.add_argument("--code", default=str(ROOT), help="the checkout to run (this one)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)
    checkpoint = (args.checkpoint_every, args.epoch) if args.checkpoint_every else None
    log = _log(args.events, args.log)
    try:
        run(args.events, args.runs, log, Path(args.out), args.path, checkpoint, Path(args.code))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"result-files FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
