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

from ..engines import engines, error_line
from ..model.errors import RestreamError
from ._args import conf_arg, diff_json, diff_text, log_arg, params_arg, program_arg, run_arg
from ._arrow_pool import use_jemalloc
from ._lazy_pandas import defer_pandas
from ._parser import build_parser
from ._replay import cmd_replay
from ._score import check_label_options, cmd_score

__all__ = ["main", "build_parser"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


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
        # An engine's own failure (a Java exception, Spark's JVM gone) reads as the engine
        # words it, with where its log is; anything else is ours.
        said = error_line(exc)
        what = said or f"{type(exc).__name__}: {exc}"
        print(f"internal error: {what} (run with --debug for the traceback)", file=sys.stderr)
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


def cmd_driver(args: argparse.Namespace) -> int:
    from ._driver import serve

    def ready(path) -> None:
        print(f"restream driver: serving {args.master} at {path} (pid {os.getpid()})", flush=True)

    serve(args.master, conf_arg(args.conf), ready)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from ..io.compare import diff

    if args.explain:
        return _explain(args)

    check_label_options(args)
    a_label, a = run_arg(args.a)
    b_label, b = run_arg(args.b)
    differences = diff(a, b, by=args.by, labels=(a_label, b_label))
    scored = None
    if args.labels:
        from ._score import diff_scores

        scored = diff_scores(args, a, b, (a_label, b_label))
    if args.json:
        out = {"a": a_label, "b": b_label, **diff_json(differences)}
        if scored is not None:
            out["scores"] = scored[0]
        print(json.dumps(out, default=str))
    else:
        print(diff_text(differences, samples=args.samples))
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
    log = log_arg(args.log, args) if args.log else None
    labels = (args.a, args.b) if args.programs else None
    explanation = explain(sides[0], sides[1], args.explain, log=log, labels=labels)
    if args.json:
        print(json.dumps(explanation.to_dict(), default=str))
    else:
        print(explanation.text())
    return 1


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

    log = log_arg(args.log, args) if args.log else None
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


def cmd_sweep(args: argparse.Namespace) -> int:
    """``restream sweep``: every variant of a grid of parameter values, in one scan."""
    from ..iterate.sweeps import sweep
    from ._progress import cli_observer

    values = params_arg(args.param, many=True)
    log = log_arg(args.log, args)
    options: dict = {} if args.quiet else {"observer": cli_observer()}
    if args.master:
        options["master"] = args.master
    check_label_options(args)
    result = sweep(
        program_arg(args.program),
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
