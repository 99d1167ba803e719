"""Peak memory of a replay at two log sizes, CLI and notebook: memory bounded by state, not the log.

The rule (``bench/programs/bounded_state.py``) keeps a per-sender EWMA and a per-IP sliding
count: its state stops growing once the users and IPs have been seen. The logs are written by
``sample_data.social_scale`` (a bounded population, rows not in time order) at each size. For
each size and mode, the rule runs on ``--engine serial`` (or ``--engine spark --master
local[2]``, the JVM and its Python workers counted in the process tree):

- ``cli``: ``restream replay`` as a whole process;
- ``notebook``: a fresh Jupyter kernel (jupyter_client) that loads the extension and runs the
  rule as a ``%%restream`` cell over the log given as a path (``--compare-limit 0``: the cell's
  own replay, not a comparison with serial); the kernel's process tree is polled from its start
  to its shutdown (``bench._notebook_peak``).

Each mode runs once per name in ``--runs`` (default ``cold,warm``) in the same
``RESTREAM_HOME``: fresh per size and mode, so the first run (**cold**) puts the log in order
(DuckDB's external sort into the cached ordered copy) and the next (**warm**) reads the copy;
with ``--home DIR`` every run shares DIR (``--runs warm`` then measures replays of copies made
there before).

The peak resident memory of the whole process tree is polled with psutil, with its CPU time
(user + system, steadier than wall time on a shared machine). The figure is
``peak(large) / peak(small)`` for each mode and run; the target is at most 1.5x.

``python -m bench scale [--sizes 1000000,10000000] [--users N] [--engine serial|spark]
[--modes cli,notebook] [--runs cold,warm] [--home DIR] [--data DIR] [--out JSON]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench._notebook_peak import TreeSampler, notebook_peak

__all__ = ["main", "run", "peak_of", "TARGET"]

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "bench" / "programs" / "bounded_state.py"
DEFAULT_OUT = ROOT / "bench" / "results" / "scale.json"
#: Where the generated logs are written (and found again), unless ``--data`` says otherwise.
DEFAULT_DATA = ROOT / "sample_data" / "generated"
#: The most that the peak at the large size may be, as a multiple of the peak at the small one.
TARGET = 1.5


def peak_of(command: list[str], env: dict[str, str], interval: float = 0.05) -> dict:
    """Run ``command`` and poll its process tree's resident memory; its peak (and its own
    process's: on Spark, the driver's Python without the JVM), wall time, rc."""
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with (
        tempfile.TemporaryFile("w+") as errors,
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=errors, text=True
        ) as proc,
    ):
        sampler = TreeSampler(proc.pid, interval)
        while proc.poll() is None:
            sampler.sample()
            time.sleep(interval)
        out = proc.stdout.read()
        errors.seek(0)
        error = errors.read()[-2000:] if proc.returncode else ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    polled = sampler.stop()
    return {
        "peak_mb": polled["peak_mb"],
        "own_peak_mb": polled["own_peak_mb"],
        "wall_s": round(time.perf_counter() - started, 2),
        # user + system time of the tree: the processes waited for (exact), or as last polled
        # (the JVM, which its driver does not wait for); steadier than wall on a shared machine
        "cpu_s": round(max(_cpu(after) - _cpu(before), polled["cpu_s"]), 2),
        "rc": proc.returncode,
        "summary": [line for line in out.splitlines() if line.startswith("replayed")],
        **({"error": error} if error else {}),
    }


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _log(events: int, users: int, data: Path = DEFAULT_DATA) -> Path:
    """The generated log of ``events`` events in ``data`` (written once, rows not in time
    order)."""
    path = data / f"social_scale_{events}_{users}.parquet"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sample_data.social_scale",
                "--events",
                str(events),
                "--users",
                str(users),
                "--unordered",
                "--out",
                str(path),
            ],
            check=True,
            cwd=ROOT,
        )
    return path


#: The command line's engine arguments, per ``--engine`` (the magic takes the same).
ENGINES = {"serial": ["--engine", "serial"], "spark": ["--engine", "spark", "--master", "local[2]"]}
#: How the rule is run: a ``restream replay`` process, or a ``%%restream`` cell in a kernel.
MODES = ("cli", "notebook")


def _cli(log: Path, engine: str, env: dict[str, str]) -> dict:
    command = [sys.executable, "-m", "restream_kit", "replay", str(PROGRAM), "--log", str(log)]
    return peak_of([*command, *ENGINES[engine], "--quiet"], env)


def _measured(mode: str, log: Path, engine: str, env: dict[str, str]) -> dict:
    got = _cli(log, engine, env) if mode == "cli" else notebook_peak(log, engine, env, PROGRAM)
    if got["rc"] != 0:
        raise RuntimeError(f"the {mode} replay of {log} failed: {got.get('error', '')[-600:]}")
    return got


def _one_size(
    log: Path, engine: str, modes: list[str], runs: list[str], env: dict, home: Path | None
) -> dict:
    """Every mode's runs over one log. Without ``home`` each mode starts in a fresh
    ``RESTREAM_HOME`` (its first run orders the log); with it, all share ``home``."""
    rows: dict[str, dict] = {}
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="restream-scale-") as fresh:
            env["RESTREAM_HOME"] = str(home or fresh)
            rows[mode] = {name: _measured(mode, log, engine, env) for name in runs}
        print(
            f"{log.name} {mode:<8} "
            + " · ".join(
                f"{name} peak {got['peak_mb']:8.1f} MB (own {got['own_peak_mb']:.0f}) in "
                f"{got['wall_s']:7.1f} s, CPU {got['cpu_s']:7.1f} s"
                for name, got in rows[mode].items()
            ),
            flush=True,
        )
    return rows


def run(
    sizes: list[int],
    users: int,
    out: Path,
    engine: str = "serial",
    data: Path = DEFAULT_DATA,
    *,
    modes: list[str] | None = None,
    runs: list[str] | None = None,
    home: Path | None = None,
) -> dict:
    """Measure every size in every mode (``cli``, ``notebook``), cold and warm (``runs``);
    write and return the results, with each run's ``peak(largest) / peak(smallest)``."""
    modes, runs = modes or ["cli"], runs or ["cold", "warm"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    rows = {
        events: _one_size(_log(events, users, data), engine, modes, runs, env, home)
        for events in sizes
    }
    small, large = rows[min(sizes)], rows[max(sizes)]
    ratios = {
        mode: {k: round(large[mode][k]["peak_mb"] / small[mode][k]["peak_mb"], 3) for k in runs}
        for mode in modes
    }
    for mode, by_run in ratios.items():
        said = ", ".join(f"{k} {v:.2f}x" for k, v in by_run.items())
        print(f"{mode}: peak({max(sizes):,}) / peak({min(sizes):,}): {said} (target {TARGET}x)")
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "program": PROGRAM.relative_to(ROOT).as_posix(),
        "engine": engine,
        "driver_memory": os.environ.get("RESTREAM_SPARK_DRIVER_MEMORY"),
        "users": users,
        "runs": {str(k): v for k, v in rows.items()},
        "ratio": ratios,
        "target": TARGET,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(
        prog="python -m bench scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sizes", default="1000000,10000000", help="comma-separated log sizes (1000000,10000000)"
    )
    parser.add_argument("--users", type=int, default=2_000_000, help="users in the logs (2M)")
    parser.add_argument("--engine", choices=sorted(ENGINES), default="serial", help="(serial)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    parser.add_argument(
        "--data",
        default=str(DEFAULT_DATA),
        help="folder of the generated logs (sample_data/generated)",
    )
    parser.add_argument(
        "--modes", default="cli", help="comma-separated: cli, notebook (a kernel's cell) (cli)"
    )
    parser.add_argument(
        "--runs",
        default="cold,warm",
        help="runs per size and mode, in order (cold,warm): names only, the first in a fresh "
        "home orders the log",
    )
    parser.add_argument(
        "--home",
        default=None,
        help="one RESTREAM_HOME for every run, kept (default: a fresh one per size and mode); "
        "with --runs warm it measures replays of ordered copies already made there",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes takes {', '.join(MODES)}, not {args.modes!r}")
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes must be numbers, not {args.sizes!r}")
    if len(sizes) < 2 or sizes[0] < 1:
        parser.error("--sizes needs two positive sizes or more")
    try:
        run(
            sizes,
            args.users,
            Path(args.out),
            args.engine,
            Path(args.data),
            modes=modes,
            runs=[r for r in args.runs.split(",") if r],
            home=Path(args.home) if args.home else None,
        )
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"scale FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
