"""The ``restream`` command line: ``plan``, ``replay``, ``diff``, ``score``, ``runs``, ``bench``.

Every user error exits non-zero with one line naming the problem; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence

from ..engines import capabilities_of, engines, get_engine, options_of
from ..engines.options import known_options
from ..model.errors import RestreamError
from ._arrow_pool import use_jemalloc
from ._lazy_pandas import defer_pandas
from ._score import add_label_options, add_score_parser, check_label_options, cmd_score

__all__ = ["main", "build_parser"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


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
    replay.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    replay.add_argument("--quiet", action="store_true", help="no progress on stderr")
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
    _add_diff_parser(commands)
    add_score_parser(commands)
    _add_runs_parser(commands)
    _add_bench_parser(commands)
    _add_sweep_parser(commands)
    _add_driver_parser(commands)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    defer_pandas()  # imported only by what needs it (0.35 s of every command otherwise)
    use_jemalloc()  # pages kept for reuse, not zeroed again and again (see _arrow_pool)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    if args.command == "bench":
        # A checkout's benchmarks take their own options: everything after "bench" is theirs.
        args.passthrough = argv[argv.index("bench") + 1 :]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = COMMANDS[args.command](args)
        for w in caught:
            if not args.json:
                print(f"warning: {_where(w)}{w.message}", file=sys.stderr)
        return code
    except RestreamError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR


def _where(w: warnings.WarningMessage) -> str:
    """``file:line: `` for a warning about the user's program (not one raised in our code)."""
    from pathlib import Path

    ours = Path(__file__).resolve().parent
    try:
        inside = Path(w.filename).resolve().is_relative_to(ours)
    except (OSError, ValueError):
        inside = True
    return "" if inside or not w.filename else f"{w.filename}:{w.lineno}: "


def _log_arg(values: list[str], args: argparse.Namespace):
    """The ``--log`` values as one log, read as ``--ts`` and ``--kind`` say."""
    from ..io.log import Log

    return Log(values, ts=args.ts, kind=args.kind)


def _conf_arg(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise RestreamError(f"--conf {item!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def cmd_driver(args: argparse.Namespace) -> int:
    from ._driver import serve

    def ready(path) -> None:
        print(f"restream driver: serving {args.master} at {path} (pid {os.getpid()})", flush=True)

    serve(args.master, _conf_arg(args.conf), ready)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from ..api import replay
    from ..io.progress import broadcast
    from ._progress import cli_observer

    options: dict = {} if args.quiet else {"observer": cli_observer()}
    # A handler that would never run (no event of its kinds) is an error here, not a warning.
    options["require_kinds"] = True
    if args.master:
        options["master"] = args.master
    if args.conf:
        options["conf"] = _conf_arg(args.conf)
    if args.epoch:
        options["epoch"] = args.epoch
    if args.checkpoint:
        options["checkpoint"] = args.checkpoint
    if args.checkpoint_every:
        options["checkpoint_every"] = args.checkpoint_every
    if args.resume:
        options["resume"] = True
    if args.start_from:
        start = args.start_from
        options["start_from"] = start if args.start_epoch is None else (start, args.start_epoch)
    elif args.start_epoch is not None:
        raise RestreamError("--start-epoch needs --start-from DIR")
    if args.on_error != "stop":
        options["on_error"] = args.on_error
    if args.param:
        options["params"] = _params_arg(args.param, many=False)
    if args.history:
        options["history"] = True
    if args.reuse:
        options["reuse"] = args.reuse
    partial = None
    if args.out:
        from ._outputs import PartialOutputs

        partial = PartialOutputs(args.out)
        options["observer"] = broadcast([o for o in (options.get("observer"), partial) if o])
    if args.by and not args.baseline and not args.labels:
        raise RestreamError("--by compares with a baseline: give --baseline RUN too")
    check_label_options(args)
    program = log = driver = None
    runner = get_engine(args.engine)
    can = capabilities_of(runner)
    # Checked before anything starts: a value of the wrong kind (--epoch banana) is one line.
    engine_options = options_of(runner, {k: v for k, v in options.items() if k in known_options()})
    if can.driver_process:
        from ._driver import find_driver

        # A running `restream driver` for this master replays with its session up.
        driver = find_driver(args.master, {k: v for k, v in options.items() if k != "observer"})
    if driver is None and can.slow_start:
        # Spark's JVM takes seconds to start, and so does loading a large log: side by side.
        runner.warm_up(engine_options)
    try:
        if driver is not None:
            # The driver loads and replays while this process loads the log for its catalog.
            program = _program_arg(args.program)
            driver.start(program, args.log, options, {"ts": args.ts, "kind": args.kind})
        log = _log_arg(args.log, args)
        # (A URI log is not counted here: that would read it in this process; Spark counts it.)
        if log.uri is None and len(log) == 0:
            raise RestreamError(f"{', '.join(args.log)}: the log has no events, nothing to replay")
        # A baseline that cannot be found fails before the replay, not after it.
        baseline = _load_run(args.baseline, log) if args.baseline else None
        # replay checks the program against the log before it starts Spark or replays.
        if driver is not None:
            result = driver.finish(options.get("observer"))
        else:
            program = _program_arg(args.program)
            result = replay(program, log, engine=args.engine, **options)
        # Inside the try: a final state the catalog cannot keep is a StateError, as on serial.
        _record(args, program, log, result, None)
    except (RestreamError, KeyboardInterrupt) as exc:
        if driver is not None:
            driver.close()
        if partial is not None:
            partial.write_error(exc)
        if program is not None and log is not None:
            _record(args, program, log, None, str(exc))
        raise
    summary = result.summary()
    if driver is not None:
        summary["driver"] = f"{driver.path} (pid {driver.pid})"
    if args.out:
        summary["outputs"] = result.write(args.out)
        partial.clear_error()
    differences = None
    if baseline is not None:
        from ..io.compare import diff

        label, tables = baseline
        differences = diff(result, tables, by=args.by, labels=("this run", label))
        summary["baseline"] = label
        summary["diff"] = _diff_json(differences)
    scores = None
    if args.labels:
        from ._score import scores_of

        scores = scores_of(args, result, args.name or "this run")
        summary["scores"] = scores.to_dict()
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        print(_replay_text(summary))
        if differences is not None:
            print(f"compared with {baseline[0]}:")
            print(_diff_text(differences, samples=3))
        if scores is not None:
            print(scores.summary())
    return 0


def _load_run(ref: str, log=None) -> tuple[str, dict]:
    """The output tables of ``ref``: a ``--out`` directory or a catalog run (``load_run``)."""
    from ..io.compare import load_run

    return load_run(ref, log)


def _diff_json(differences) -> dict:
    from ..io.compare import KeyDiff

    if isinstance(differences, KeyDiff):
        return differences.to_dict()
    return {
        "empty": differences.empty,
        "tables": {
            name: {"rows": t.rows, "baseline_rows": t.baseline_rows, **t.counts}
            for name, t in differences.tables.items()
        },
    }


def _diff_text(differences, samples: int) -> str:
    from ..io.compare import KeyDiff

    if isinstance(differences, KeyDiff):
        return differences.summary(samples=samples)
    return differences.text(samples=samples)


def cmd_diff(args: argparse.Namespace) -> int:
    from ..io.compare import diff

    if args.explain:
        return _explain(args)

    check_label_options(args)
    a_label, a = _load_run(args.a)
    b_label, b = _load_run(args.b)
    differences = diff(a, b, by=args.by, labels=(a_label, b_label))
    scored = None
    if args.labels:
        from ._score import diff_scores

        scored = diff_scores(args, a, b, (a_label, b_label))
    if args.json:
        out = {"a": a_label, "b": b_label, **_diff_json(differences)}
        if scored is not None:
            out["scores"] = scored[0]
        print(json.dumps(out, default=str))
    else:
        print(_diff_text(differences, samples=args.samples))
        if scored is not None:
            print(scored[1])
    return 0 if differences.empty else 1


def _explain(args: argparse.Namespace) -> int:
    """``restream diff A B --explain ROW``: the causal chain of one differing row."""
    from pathlib import Path

    from ..iterate.explain import explain

    sides = list(args.programs or (args.a, args.b))
    for side in sides:
        if Path(side).is_dir():
            raise RestreamError(
                f"--explain: {side} is a directory of outputs; give the programs that wrote "
                "them with --programs A.py B.py (and the log with --log)"
            )
    log = _log_arg(args.log, args) if args.log else None
    labels = (args.a, args.b) if args.programs else None
    explanation = explain(sides[0], sides[1], args.explain, log=log, labels=labels)
    if args.json:
        print(json.dumps(explanation.to_dict(), default=str))
    else:
        print(explanation.text())
    return 1


def _replay_text(summary: dict) -> str:
    m = summary["metrics"]
    lines = [
        f"replayed {m['events']:,} events on {m['engine']} in {m['wall_s']:.2f} s "
        f"({m['events_per_s']:,.0f} events/s, {m['realtime_multiple']:,.0f}x real time)"
    ]
    for name, rows in summary["tables"].items():
        where = summary.get("outputs", {}).get(name)
        lines.append(f"  {name}: {rows:,} rows" + (f" -> {where}" if where else ""))
    if not summary["tables"]:
        lines.append("  no rows emitted")
    for name, size in summary["state"].items():
        lines.append(f"  state {name}: {size:,} keys")
    for stage, what in summary.get("path", {}).items():
        lines.append(f"  ran {stage}: {what}")
    if summary.get("driver"):
        lines.append(f"  on the running driver at {summary['driver']}")

    if summary.get("reused_run") is not None:
        if summary.get("reused_stages"):
            lines.append(
                f"  reused from {summary['reused_run']}: {', '.join(summary['reused_stages'])}; "
                f"re-ran: {', '.join(summary['rerun_stages']) or 'nothing'} "
                f"(saved {summary['saved_s']:.2f} s)"
            )
        else:
            lines.append(f"  {summary['reuse_reason']}")
    if summary.get("quarantined"):
        where = summary.get("outputs", {}).get("_quarantine.parquet")
        lines.append(
            f"  rolled back: {summary['quarantined']:,} handler runs"
            + (f" -> {where}" if where else "")
        )
    return "\n".join(lines)


def _program_arg(path: str):
    from ..model.program import Program

    return Program.load(path)


def _record(args: argparse.Namespace, program, log, result, error: str | None) -> None:
    """Record a replay in the run catalog; a catalog that cannot be written is a warning,
    a final state it cannot keep a StateError."""
    if args.no_record:
        return
    from ..io.catalog import Catalog
    from ..model.errors import StateError

    params = {k: getattr(args, k) for k in ("master", "epoch", "on_error") if getattr(args, k)}
    try:
        Catalog().record(
            name=args.name or program.name,
            program=program,
            log=log,
            engine=args.engine,
            result=result,
            master=args.master,
            params={k: v for k, v in params.items() if v != "stop"},
            error=error,
        )
    except StateError:
        raise
    except (OSError, RestreamError) as exc:
        print(f"warning: the run was not recorded in the catalog: {exc}", file=sys.stderr)


def cmd_runs(args: argparse.Namespace) -> int:
    """``restream runs``: every recorded run with its size; ``--forget``, ``--keep``."""
    from ..io.catalog import Catalog, human_size

    catalog = Catalog()
    if args.forget:
        gone = catalog.forget(args.forget)
        if not gone:
            raise RestreamError(f"--forget {args.forget}: no run has that name or id")
        print(f"forgot {len(gone)} run(s) called {args.forget}")
    if args.keep is not None:
        gone = catalog.keep(args.keep)
        print(f"kept the newest {args.keep} run(s) of each name; deleted {len(gone)}")
    if args.forget or args.keep is not None:
        return 0
    rows = catalog.runs().to_dicts() if catalog.runs_dir.exists() else []
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str))
        return 0
    if not rows:
        print(f"no runs recorded in {catalog.home}")
        return 0
    print(
        f"{'run':35} {'name':16} {'engine':7} {'status':7} {'events':>10} {'size':>9} "
        f"{'history':>9}"
    )
    for r in rows:
        events = "" if r["events"] is None else f"{r['events']:,}"
        print(
            f"{r['run_id']:35} {r['name'][:16]:16} {r['engine']:7} {r['status']:7} "
            f"{events:>10} {r['size']:>9} {r.get('history') or '':>9}"
        )
    total = sum(r["size_bytes"] or 0 for r in rows)
    print(f"{len(rows)} run(s), {human_size(total)} in {catalog.home}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from .. import planner
    from ..model.program import Program
    from ..planner.render import plan_text

    log = _log_arg(args.log, args) if args.log else None
    # With a log, plan checks the program against it first (a field no event has: exit 2).
    program = Program.from_file(args.program)
    the_plan = planner.plan(
        program, log, allow_nondeterminism=args.allow_nondeterminism, require_kinds=True
    )
    layout = None
    if args.engine:
        how = getattr(engines()[args.engine], "layout", None)
        if how is not None:
            options = {"master": args.master} if args.master else {}
            layout = how(program, log, options)
    if args.json:
        data = the_plan.to_dict()
        if layout is not None:
            data["engine_layout"] = {"engine": args.engine, "stages": layout}
        print(json.dumps(data, default=str))
    else:
        print(plan_text(the_plan))
        if layout is not None:
            print(f"\nOn {args.engine}, before any replay:")
            for stage, how in layout.items():
                print(f"  {stage}: {how}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``restream bench``: the checkout's benchmarks, or the built-in one (see ``_bench``)."""
    from ._bench import checkout_root, run_builtin, run_checkout

    root = None if args.builtin else checkout_root()
    if root is not None:
        return run_checkout(root, args.passthrough)
    extra = [a for a in args.passthrough if a not in ("--builtin", "--json")]
    if args.benchmarks or any(a.startswith("-") and not a.startswith("--runs") for a in extra):
        raise RestreamError(
            f"bench {' '.join(args.passthrough)}: named benchmarks and their options need a "
            "source checkout (its bench package); the built-in one takes --runs N and --json"
        )
    return run_builtin(args.runs, args.json)


def _params_arg(items: list[str], many: bool) -> dict:
    """``NAME=VALUE`` (or ``NAME=V1,V2`` when ``many``) options as a dict of parsed values."""
    from ..model.params import parse_value

    out: dict = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            shape = "NAME=V1,V2,..." if many else "NAME=VALUE"
            raise RestreamError(f"--param {item!r}: expected {shape}")
        if name in out:
            raise RestreamError(f"--param {name} is given twice")
        out[name] = [parse_value(v) for v in text.split(",")] if many else parse_value(text)
    return out


def cmd_sweep(args: argparse.Namespace) -> int:
    """``restream sweep``: every variant of a grid of parameter values, in one scan."""
    from ..iterate.sweeps import sweep
    from ._progress import cli_observer

    values = _params_arg(args.param, many=True)
    log = _log_arg(args.log, args)
    options: dict = {} if args.quiet else {"observer": cli_observer()}
    if args.master:
        options["master"] = args.master
    check_label_options(args)
    result = sweep(
        _program_arg(args.program),
        log,
        engine=args.engine,
        options=options,
        require_kinds=True,
        **values,
    )
    summary = result.summary()
    scored = None
    if args.labels:
        from ._score import sweep_scores

        scored = sweep_scores(args, result)
        for variant, v in zip(summary["variants"], result.variants):
            mine = scored.filter(scored["variant"] == v.label).drop("variant", *v.params)
            variant["scores"] = {r.pop("table"): r for r in mine.to_dicts()}
    if args.out:
        written = result.write(args.out)
        for variant in summary["variants"]:
            label = ",".join(f"{k}={v}" for k, v in variant["params"].items())
            variant["outputs"] = written[label]
    if args.json:
        print(json.dumps(summary, default=str))
        return 0
    how = "in one scan" if result.single_scan else "as separate replays"
    print(
        f"swept {len(result)} variants over {result.events:,} events {how} on {result.engine} "
        f"in {result.wall_s:.2f} s"
    )
    print(f"  shared (ran once): {', '.join(result.shared_handlers) or 'none'}")
    print(f"  per variant: {', '.join(result.variant_handlers) or 'none'}")
    tables = sorted({t for v in summary["variants"] for t in v["tables"]})
    for variant in summary["variants"]:
        label = ", ".join(f"{k}={v}" for k, v in variant["params"].items())
        counts = ", ".join(f"{t}: {variant['tables'].get(t, 0):,}" for t in tables) or "no rows"
        where = f" -> {args.out}/{label.replace(', ', ',')}" if args.out else ""
        print(f"  {label}: {counts}{where}")
        for table, t in variant.get("scores", {}).items():
            front = ", on the Pareto front" if t["pareto"] else ""
            print(
                f"    {table}: precision {_num(t['precision'])}, recall {_num(t['recall'])}, "
                f"F1 {_num(t['f1'])} ({t['tp']:,} TP, {t['fp']:,} FP, {t['fn']:,} FN){front}"
            )
    return 0


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


COMMANDS = {
    "replay": cmd_replay,
    "score": cmd_score,
    "plan": cmd_plan,
    "diff": cmd_diff,
    "runs": cmd_runs,
    "bench": cmd_bench,
    "sweep": cmd_sweep,
    "driver": cmd_driver,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
