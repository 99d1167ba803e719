"""The ``restream`` command line's parser: its commands and their options."""

from __future__ import annotations

import argparse

from ..engines import engines
from ._score import add_label_options, add_score_parser

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="restream",
        description="Plan, replay and compare stream-processing rules over event logs. Bad "
        "input exits with status 2 and one line naming the problem.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="see restream COMMAND --help"
    )
    _add_plan_parser(commands)
    _add_replay_parser(commands)
    _add_diff_parser(commands)
    add_score_parser(commands)
    _add_runs_parser(commands)
    _add_bench_parser(commands)
    _add_sweep_parser(commands)
    _add_driver_parser(commands)
    return parser


def _add_plan_parser(commands) -> None:
    plan = commands.add_parser("plan", help="show how a program's handlers depend on each other")
    plan.add_argument("program", help="the program, a .py file")
    plan.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="LOG",
        help="a log (a file, NAME=PATH to set its kind, or a sample name such as "
        "social_small), checked against the program and used for hot keys and predicted "
        "speedups; repeatable",
    )
    _add_own_data(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--engine",
        choices=tuple(engines()),
        help="also say how this engine will run each stage (in parallel, or in one task and "
        "why), before any replay",
    )
    plan.add_argument("--master", help="the Spark master the replay would use")
    plan.add_argument(
        "--allow-nondeterminism",
        action="store_true",
        help="plan even when the determinism lint finds problems",
    )


def _add_replay_parser(commands) -> None:
    replay = commands.add_parser("replay", help="replay a log through a program")
    replay.add_argument("program", help="the program, a .py file")
    replay.add_argument(
        "--log",
        action="append",
        required=True,
        metavar="LOG",
        help="a Parquet or CSV log, NAME=PATH to set its kind, or a sample name such as "
        "social_small; repeatable",
    )
    _add_own_data(replay)
    replay.add_argument(
        "--engine",
        choices=tuple(engines()),
        default="serial",
        help="; ".join(f"{name}: {e.description}" for name, e in engines().items())
        + " (default serial)",
    )
    replay.add_argument(
        "--master",
        default=None,
        help="Spark master: local[N], spark://host:port or sc://host:port (default: "
        "$RESTREAM_MASTER, then the profile file, then local[*])",
    )
    replay.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for a new session (beats $RESTREAM_SPARK_CONF); repeatable",
    )
    replay.add_argument(
        "--epoch", default=None, help="epoch size: events (e.g. 100000) or time (e.g. 1h)"
    )
    replay.add_argument("--out", default=None, metavar="DIR", help="write DIR/<table>.parquet")
    _add_checkpoint_options(replay)
    _add_compare_options(replay)
    replay.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    replay.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_catalog_options(replay)


def _add_checkpoint_options(replay: argparse.ArgumentParser) -> None:
    """Where a replay commits its epochs, and where it starts from; what a raise does."""
    replay.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="commit every finished epoch (state, outputs, manifest) to DIR",
    )
    replay.add_argument(
        "--checkpoint-every",
        default=None,
        metavar="EVERY",
        help="with --checkpoint: commit at least this often, a time (60s, the default) or "
        "events (500000); a kill loses at most that and one epoch",
    )
    replay.add_argument(
        "--resume",
        action="store_true",
        help="continue the --checkpoint DIR after its last committed epoch",
    )
    replay.add_argument(
        "--start-from",
        default=None,
        metavar="DIR",
        help="start from the state a checkpoint committed (after --start-epoch, default its last)",
    )
    replay.add_argument(
        "--start-epoch",
        type=int,
        default=None,
        metavar="N",
        help="with --start-from: the committed epoch whose state to start from",
    )
    replay.add_argument(
        "--on-error",
        choices=("stop", "skip", "quarantine"),
        default="stop",
        help="when a handler raises: stop (default), or roll that handler run back and go on, "
        "recording it (quarantine also writes DIR/_quarantine.parquet with --out)",
    )


def _add_compare_options(replay: argparse.ArgumentParser) -> None:
    """What a replay is compared with: a baseline run, or labels it is scored against."""
    replay.add_argument(
        "--baseline",
        default=None,
        metavar="RUN",
        help="compare with RUN (a run name in the catalog, or a --out directory) and print "
        "the differences",
    )
    replay.add_argument(
        "--by",
        default=None,
        metavar="FIELD[,FIELD]",
        help="with --baseline: compare by these fields (keys only in this run, only in the "
        "baseline, in both with different rows) rather than row by row; with --labels: the "
        "key fields to score by",
    )
    add_label_options(replay, by=False)


def _add_catalog_options(replay: argparse.ArgumentParser) -> None:
    """The run catalog's options (docs/catalog.md), and the parameters a replay overrides."""
    # The run catalog (docs/catalog.md): replays are recorded, `restream runs` lists them.
    replay.add_argument(
        "--name", default=None, help="record the run under NAME (default: the program's name)"
    )
    replay.add_argument(
        "--no-record", action="store_true", help="do not record the run in the catalog"
    )
    replay.add_argument(
        "--history",
        action="store_true",
        help="keep the run's state version history in the catalog, so that a "
        "later --reuse can read the stages an edit did not change",
    )
    replay.add_argument(
        "--reuse",
        default=None,
        metavar="RUN",
        help="re-run only the stages changed since RUN (a run recorded with --history) and "
        "read the others from its history; the result equals a full replay",
    )
    replay.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help='override a parameter declared with NAME = param("NAME", default); repeatable',
    )


def _add_own_data(parser: argparse.ArgumentParser) -> None:
    """``--ts`` and ``--kind``: how to read a log of one's own (see docs/logs.md)."""
    parser.add_argument(
        "--ts",
        default=None,
        metavar="COLUMN",
        help="the log's time column, when it is not called ts: integer milliseconds, ISO-8601 "
        "strings or timestamps",
    )
    parser.add_argument(
        "--kind",
        default=None,
        metavar="NAME",
        help="the kind of every event, for a log without a kind column (default: the NAME of "
        "NAME=PATH, else 'event')",
    )


def _add_driver_parser(commands) -> None:
    driver = commands.add_parser(
        "driver",
        help="keep a Spark session up and serve this directory's replays on its master",
        description="Start a Spark session on MASTER and keep it, with its executors and the "
        "last log it loaded, until killed. A 'restream replay --engine spark --master MASTER' "
        "from the same directory (or $RESTREAM_HOME) then runs through it instead of "
        "starting its own JVM; see docs/spark_engine.md.",
    )
    driver.add_argument("--master", required=True, help="the Spark master to serve")
    driver.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of the session (spark.cores.max=N leaves cores to others); "
        "repeatable",
    )


def _add_bench_parser(commands) -> None:
    bench = commands.add_parser(
        "bench",
        help="run the benchmarks (the checkout's, or a built-in one when installed)",
        description="In a source checkout: the benchmarks of its bench package (python -m "
        "bench), all or the named ones, with their options. Installed from a wheel, or with "
        "--builtin: the serial engine against a plain-Python loop on the shipped anti-spam "
        "rule and social_small log. Each reports a ratio measured in the same run.",
    )
    bench.add_argument(
        "--builtin",
        action="store_true",
        help="run the built-in benchmark even in a checkout",
    )
    bench.add_argument(
        "--runs", type=int, default=5, help="built-in: timed runs of each side (default 5)"
    )
    bench.add_argument("--json", action="store_true", help="built-in: print one JSON object")
    bench.add_argument(
        "benchmarks",
        nargs="*",
        metavar="NAME",
        help="checkout: the benchmarks to run (all by default); every argument after bench, "
        "options included, goes to python -m bench (restream bench --list)",
    )


def _add_sweep_parser(commands) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="replay every combination of parameter values, in one scan of the log",
        description="Replay PROGRAM once per combination of the --param values (a grid). "
        "Handlers no swept parameter reaches run once for all variants; the others run per "
        "variant, in the same scan. Each variant equals its own replay.",
    )
    sweep.add_argument("program", help="the program, a .py file")
    sweep.add_argument(
        "--log", action="append", required=True, metavar="LOG", help="as for replay; repeatable"
    )
    _add_own_data(sweep)
    sweep.add_argument(
        "--param",
        action="append",
        required=True,
        metavar="NAME=V1,V2,...",
        help="the values of one parameter to try; repeatable (the grid of all of them runs)",
    )
    sweep.add_argument(
        "--engine",
        choices=tuple(engines()),
        default="serial",
        help="; ".join(f"{name}: {e.description}" for name, e in engines().items())
        + " (default serial)",
    )
    sweep.add_argument("--master", default=None, help="Spark master, as for replay")
    sweep.add_argument(
        "--out", default=None, metavar="DIR", help="write DIR/<NAME=V,...>/<table>.parquet"
    )
    sweep.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_label_options(sweep, by=True)
    sweep.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _add_runs_parser(commands) -> None:
    runs = commands.add_parser("runs", help="list the recorded runs, forget old ones")
    runs.add_argument("--forget", metavar="NAME", help="delete the runs called NAME (or run id)")
    runs.add_argument("--keep", type=int, metavar="N", help="keep the newest N runs of each name")
    runs.add_argument("--json", action="store_true", help="print the runs as JSON lines")


def _add_diff_parser(commands) -> None:
    diff = commands.add_parser(
        "diff",
        help="compare the outputs of two runs, row by row or by key",
        description="Compare run A with run B (the baseline). Each is a run name in the "
        "catalog or a directory of <table>.parquet files (replay --out). Row by row, a row is "
        "identified by its event (lsn, seq) and n, its rank among that event's rows in the "
        "table; with --by, rows are grouped by the values of the fields. Exit status 0 when "
        "the outputs are the same, 1 when they differ, 2 on bad input.",
    )
    diff.add_argument("a", metavar="A", help="a run name in the catalog, or a --out directory")
    diff.add_argument("b", metavar="B", help="the baseline: a run name or a --out directory")
    diff.add_argument(
        "--by",
        default=None,
        metavar="FIELD[,FIELD]",
        help="compare by these fields: keys only in A, only in B, and in both with different "
        "rows (with how far their first row moved in time)",
    )
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.add_argument(
        "--samples",
        type=int,
        default=3,
        metavar="N",
        help="rows or keys shown per kind of difference (text; --json lists all keys)",
    )
    diff.add_argument(
        "--explain",
        default=None,
        metavar="ROW",
        help="explain one differing row, TABLE:LSN:SEQ:N as the diff prints it (TABLE:LSN for "
        "a log event's first row): the handler and line that emitted it, the state it read in "
        "both runs, and the earliest event where those values first differed",
    )
    diff.add_argument(
        "--log",
        action="append",
        default=None,
        metavar="LOG",
        help="with --explain: the log both runs replayed (default: the catalog run's own log)",
    )
    _add_own_data(diff)
    diff.add_argument(
        "--programs",
        nargs=2,
        default=None,
        metavar=("A.py", "B.py"),
        help="with --explain over --out directories: the programs that wrote A and B",
    )
    add_label_options(diff, by=False)
