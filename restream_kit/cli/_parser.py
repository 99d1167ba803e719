"""The ``restream`` command line's parser: its commands and their options."""

from __future__ import annotations

import argparse

from ..engines import engines
from ._options import LABELS, LABELS_BY, OWN_DATA, QUIET, Option, add_command, add_options, switch
from ._score import add_score_parser

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


def _engine_choice() -> Option:
    """``--engine``, every registered engine described, serial by default."""
    described = "; ".join(f"{name}: {e.description}" for name, e in engines().items())
    return Option(
        "--engine",
        None,
        described + " (default serial)",
        {"choices": tuple(engines()), "default": "serial"},
    )


def _program_command(commands, name: str, about: str, log: Option) -> argparse.ArgumentParser:
    """A command over a program and a log: the program, ``log`` (``--log`` as this command
    takes it), and how to read a log of one's own."""
    parser = add_command(commands, name, about)
    parser.add_argument("program", help="the program, a .py file")
    add_options(parser, log, *OWN_DATA)
    return parser


def _add_plan_parser(commands) -> None:
    plan = _program_command(
        commands,
        "plan",
        "show how a program's handlers depend on each other",
        Option(
            "--log",
            "LOG",
            "a log (a file, NAME=PATH to set its kind, or a sample name such as social_small), "
            "checked against the program and used for hot keys and predicted speedups; "
            "repeatable",
            {"action": "append", "default": []},
        ),
    )
    add_options(
        plan,
        switch("--json", "print the plan as JSON"),
        Option(
            "--engine",
            None,
            "also say how this engine will run each stage (in parallel, or in one task and "
            "why), before any replay",
            {"choices": tuple(engines())},
        ),
        Option("--master", None, "the Spark master the replay would use"),
        switch("--allow-nondeterminism", "plan even when the determinism lint finds problems"),
    )


# Where a replay commits its epochs, and where it starts from; what a raise does.
_CHECKPOINT = (
    Option("--checkpoint", "DIR", "commit every finished epoch (state, outputs, manifest) to DIR"),
    Option(
        "--checkpoint-every",
        "EVERY",
        "with --checkpoint: commit at least this often, a time (60s, the default) or events "
        "(500000); a kill loses at most that and one epoch",
    ),
    switch("--resume", "continue the --checkpoint DIR after its last committed epoch"),
    Option(
        "--start-from",
        "DIR",
        "start from the state a checkpoint committed (after --start-epoch, default its last)",
    ),
    Option(
        "--start-epoch",
        "N",
        "with --start-from: the committed epoch whose state to start from",
        {"type": int},
    ),
    Option(
        "--on-error",
        None,
        "when a handler raises: stop (default), or roll that handler run back and go on, "
        "recording it (quarantine also writes DIR/_quarantine.parquet with --out)",
        {"choices": ("stop", "skip", "quarantine"), "default": "stop"},
    ),
)

# What a replay is compared with: a baseline run (the labels it is scored against follow).
_COMPARE = (
    Option(
        "--baseline",
        "RUN",
        "compare with RUN (a run name in the catalog, or a --out directory) and print the "
        "differences",
    ),
    Option(
        "--by",
        "FIELD[,FIELD]",
        "with --baseline: compare by these fields (keys only in this run, only in the "
        "baseline, in both with different rows) rather than row by row; with --labels: the "
        "key fields to score by",
    ),
)

# The run catalog (docs/catalog.md): replays are recorded, `restream runs` lists them; and the
# parameters a replay overrides.
_CATALOG = (
    Option("--name", None, "record the run under NAME (default: the program's name)"),
    switch("--no-record", "do not record the run in the catalog"),
    switch(
        "--history",
        "keep the run's state version history in the catalog, so that a later --reuse can read "
        "the stages an edit did not change",
    ),
    Option(
        "--reuse",
        "RUN",
        "re-run only the stages changed since RUN (a run recorded with --history) and read the "
        "others from its history; the result equals a full replay",
    ),
    Option(
        "--param",
        "NAME=VALUE",
        'override a parameter declared with NAME = param("NAME", default); repeatable',
        {"action": "append", "default": []},
    ),
)


def _add_replay_parser(commands) -> None:
    replay = _program_command(
        commands,
        "replay",
        "replay a log through a program",
        Option(
            "--log",
            "LOG",
            "a Parquet or CSV log, NAME=PATH to set its kind, or a sample name such as "
            "social_small; repeatable",
            {"action": "append", "required": True},
        ),
    )
    add_options(
        replay,
        _engine_choice(),
        Option(
            "--master",
            None,
            "Spark master: local[N], spark://host:port or sc://host:port (default: "
            "$RESTREAM_MASTER, then the profile file, then local[*])",
        ),
        Option(
            "--conf",
            "KEY=VALUE",
            "a Spark setting for a new session (beats $RESTREAM_SPARK_CONF); repeatable",
            {"action": "append", "default": []},
        ),
        Option("--epoch", None, "epoch size: events (e.g. 100000) or time (e.g. 1h)"),
        Option("--out", "DIR", "write DIR/<table>.parquet"),
        *_CHECKPOINT,
        *_COMPARE,
        *LABELS,
        switch("--json", "print the summary as one JSON object"),
        QUIET,
        *_CATALOG,
    )


_DRIVER = """\
keep a Spark session up and serve this directory's replays on its master

Start a Spark session on MASTER and keep it, with its executors and the last log it loaded,
until killed. A 'restream replay --engine spark --master MASTER' from the same directory (or
$RESTREAM_HOME) then runs through it instead of starting its own JVM; see docs/spark_engine.md.
"""


def _add_driver_parser(commands) -> None:
    driver = add_command(commands, "driver", _DRIVER)
    add_options(
        driver,
        Option("--master", None, "the Spark master to serve", {"required": True}),
        Option(
            "--conf",
            "KEY=VALUE",
            "a Spark setting of the session (spark.cores.max=N leaves cores to others); repeatable",
            {"action": "append", "default": []},
        ),
    )


_BENCH = """\
run the benchmarks (the checkout's, or a built-in one when installed)

In a source checkout: the benchmarks of its bench package (python -m bench), all or the named
ones, with their options. Installed from a wheel, or with --builtin: the serial engine against a
plain-Python loop on the shipped anti-spam rule and social_small log. Each reports a ratio
measured in the same run.
"""


def _add_bench_parser(commands) -> None:
    bench = add_command(commands, "bench", _BENCH)
    add_options(
        bench,
        switch("--builtin", "run the built-in benchmark even in a checkout"),
        Option(
            "--runs",
            None,
            "built-in: timed runs of each side (default 5)",
            {"type": int, "default": 5},
        ),
        switch("--json", "built-in: print one JSON object"),
    )
    bench.add_argument(
        "benchmarks",
        nargs="*",
        metavar="NAME",
        help="checkout: the benchmarks to run (all by default); every argument after bench, "
        "options included, goes to python -m bench (restream bench --list)",
    )


_SWEEP = """\
replay every combination of parameter values, in one scan of the log

Replay PROGRAM once per combination of the --param values (a grid). Handlers no swept parameter
reaches run once for all variants; the others run per variant, in the same scan. Each variant
equals its own replay.
"""


def _add_sweep_parser(commands) -> None:
    sweep = _program_command(
        commands,
        "sweep",
        _SWEEP,
        Option("--log", "LOG", "as for replay; repeatable", {"action": "append", "required": True}),
    )
    add_options(
        sweep,
        Option(
            "--param",
            "NAME=V1,V2,...",
            "the values of one parameter to try; repeatable (the grid of all of them runs)",
            {"action": "append", "required": True},
        ),
        _engine_choice(),
        Option("--master", None, "Spark master, as for replay"),
        Option("--out", "DIR", "write DIR/<NAME=V,...>/<table>.parquet"),
        switch("--json", "print the summary as one JSON object"),
        *LABELS_BY,
        QUIET,
    )


def _add_runs_parser(commands) -> None:
    runs = add_command(commands, "runs", "list the recorded runs, forget old ones")
    add_options(
        runs,
        Option("--forget", "NAME", "delete the runs called NAME (or run id)"),
        Option("--keep", "N", "keep the newest N runs of each name", {"type": int}),
        switch("--json", "print the runs as JSON lines"),
    )


_DIFF = """\
compare the outputs of two runs, row by row or by key

Compare run A with run B (the baseline). Each is a run name in the catalog or a directory of
<table>.parquet files (replay --out). Row by row, a row is identified by its event (lsn, seq)
and n, its rank among that event's rows in the table; with --by, rows are grouped by the values
of the fields. Exit status 0 when the outputs are the same, 1 when they differ, 2 on bad input.
"""


def _add_diff_parser(commands) -> None:
    diff = add_command(commands, "diff", _DIFF)
    diff.add_argument("a", metavar="A", help="a run name in the catalog, or a --out directory")
    diff.add_argument("b", metavar="B", help="the baseline: a run name or a --out directory")
    add_options(
        diff,
        Option(
            "--by",
            "FIELD[,FIELD]",
            "compare by these fields: keys only in A, only in B, and in both with different "
            "rows (with how far their first row moved in time)",
        ),
        switch("--json", "print the differences as JSON"),
        Option(
            "--samples",
            "N",
            "rows or keys shown per kind of difference (text; --json lists all keys)",
            {"type": int, "default": 3},
        ),
        Option(
            "--explain",
            "ROW",
            "explain one differing row, TABLE:LSN:SEQ:N as the diff prints it (TABLE:LSN for a "
            "log event's first row): the handler and line that emitted it, the state it read in "
            "both runs, and the earliest event where those values first differed",
        ),
        Option(
            "--log",
            "LOG",
            "with --explain: the log both runs replayed (default: the catalog run's own log)",
            {"action": "append"},
        ),
        *OWN_DATA,
        Option(
            "--programs",
            ("A.py", "B.py"),
            "with --explain over --out directories: the programs that wrote A and B",
            {"nargs": 2},
        ),
        *LABELS,
    )
