"""``restream replay``: the options it gives the API, a running driver or a replay of its
own, the catalog record, and the summary it prints."""

from __future__ import annotations

import argparse
import json
import sys

from ..engines import capabilities_of, get_engine, options_of
from ..engines.options import known_options
from ..model.errors import RestreamError
from ._args import conf_arg, diff_json, diff_text, log_arg, params_arg, program_arg, run_arg
from ._score import check_label_options

__all__ = ["cmd_replay"]


def _options(args: argparse.Namespace) -> dict:
    """The keyword options of the replay the arguments ask for (the observer included)."""
    from ._progress import cli_observer

    options: dict = {} if args.quiet else {"observer": cli_observer()}
    # A handler that would never run (no event of its kinds) is an error here, not a warning.
    options["require_kinds"] = True
    if args.master:
        options["master"] = args.master
    if args.conf:
        options["conf"] = conf_arg(args.conf)
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
        options["params"] = params_arg(args.param, many=False)
    if args.history:
        options["history"] = True
    if args.reuse:
        options["reuse"] = args.reuse
    return options


def cmd_replay(args: argparse.Namespace) -> int:
    from ..api import replay
    from ..io.progress import broadcast

    options = _options(args)
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
            program = program_arg(args.program)
            driver.start(program, args.log, options, {"ts": args.ts, "kind": args.kind})
        log = log_arg(args.log, args)
        # (A URI log is not counted here: that would read it in this process; Spark counts it.)
        if log.uri is None and len(log) == 0:
            raise RestreamError(f"{', '.join(args.log)}: the log has no events, nothing to replay")
        # A baseline that cannot be found fails before the replay, not after it.
        baseline = run_arg(args.baseline, log) if args.baseline else None
        # replay checks the program against the log before it starts Spark or replays.
        if driver is not None:
            result = driver.finish(options.get("observer"))
        else:
            program = program_arg(args.program)
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
    _report(args, result, baseline, driver, partial)
    return 0


def _report(args: argparse.Namespace, result, baseline, driver, partial) -> None:
    """Print the replay's summary (JSON or text), with its outputs written, its diff from
    the ``--baseline`` and its scores against ``--labels``."""
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
        summary["diff"] = diff_json(differences)
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
            print(diff_text(differences, samples=3))
        if scores is not None:
            print(scores.summary())


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
