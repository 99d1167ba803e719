"""``%%restream`` and ``%restream``: parse the arguments, call the workbench, wait for the run.

The notebook layer's entry: ``%load_ext restream_kit`` calls
:func:`restream_kit.load_ipython_extension`, which imports this module (and nothing else of
``widgets``) and calls :func:`register`. The views are imported only when a cell runs.

A ``%%restream`` cell ends when its replay ends. In a Jupyter kernel the cell is turned into an
``await`` (an input transformer), so that while it waits the kernel still handles the widgets'
messages (the monitor's Stop button) and its interrupt cancels the replay. Elsewhere the magic
waits on the replay's thread itself, and an interrupt cancels it the same way.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from restream_kit import RestreamError
from restream_kit.engines import engine_names, error_line
from restream_kit.io.log import Log
from restream_kit.workbench import BackgroundRun, CellRun, ReplayCancelled, Workbench

__all__ = ["RestreamMagics", "register", "awaited_cell", "raise_failure"]

#: How often a waiting cell looks at its replay's thread.
POLL_S = 0.05
_MAGIC_CALL = "get_ipython().run_cell_magic('restream', "
_AWAITED_CALL = "await __import__('widgets.magics').magics.awaited_cell(get_ipython(), "
#: The cell magic's options that go to ``run_cell`` under their own names, as given.
_AS_GIVEN = (
    "baseline",
    "by",
    "engine",
    "master",
    "plan_only",
    "epoch",
    "on_error",
    "checkpoint",
    "checkpoint_every",
    "compare_limit",
)


def raise_failure(cell: CellRun) -> None:
    """Raise what ended a run that did not finish: one line for a cancel, the error itself (its
    message with the cell's line, no internal frames) for a failure."""
    if cell.cancelled:
        raise ReplayCancelled(cell.cancelled_line())
    if cell.error is not None:
        error = cell.error
        lines = _error_lines(error)
        try:
            error._render_traceback_ = lambda: lines  # type: ignore[attr-defined]
        except AttributeError:  # an exception type without a __dict__
            raise RestreamError("\n".join(lines)) from None
        raise error.with_traceback(None) from None


def _error_lines(error: BaseException) -> list[str]:
    """What a failed cell shows: ``Type: message``; a Java exception as its root cause's line."""
    name = type(error).__name__
    text = str(error)
    engines_line = error_line(error)  # a Java exception: its root cause, where Spark logs
    if engines_line is not None:
        return [engines_line]
    return [f"{name}: {text}" if text else name]


def _logs(args: Any) -> list:
    """The cell's ``--log`` values, read as its ``--ts`` and ``--kind`` say."""
    if not args.log or (args.ts is None and args.kind is None):
        return args.log
    return list(Log(args.log, ts=args.ts, kind=args.kind).sources)


def _await_cells(lines: list[str]) -> list[str]:
    """Input transformer: ``%%restream`` cells become an ``await`` of :func:`awaited_cell`."""
    if lines and lines[0].startswith(_MAGIC_CALL):
        return [_AWAITED_CALL + lines[0][len(_MAGIC_CALL) :], *lines[1:]]
    return lines


async def awaited_cell(shell: Any, line: str, cell: str) -> None:
    """The ``%%restream`` cell as a coroutine: start the run, then wait for it without blocking
    the kernel's event loop. An interrupt (the kernel cancels the cell's task) cancels it."""
    magics = shell.magics_manager.registry["RestreamMagics"]
    # As run_cell_magic does: $name and {expr} in the magic's line come from the namespace.
    run, args = magics._start(shell.var_expand(line), cell)
    if run is None or args.background:
        return
    try:
        while not run.done:
            await asyncio.sleep(POLL_S)
    except (asyncio.CancelledError, KeyboardInterrupt):
        cancelled = await asyncio.get_running_loop().run_in_executor(None, run.stop)
        magics._bind_stopped(args.name, run)
        raise cancelled from None
    magics._finish(args.name, run.wait())


@magics_class
class RestreamMagics(Magics):
    """The workbench's magics; one ``Workbench`` per IPython session."""

    def __init__(self, shell):
        super().__init__(shell)
        self.workbench = Workbench()
        #: Cells started with --labels: name -> (labels read, by), shown when they finish.
        self._scoring: dict[str, tuple[Any, str]] = {}

    @magic_arguments()
    @argument("name", help="the program's name; later cells can use it as --baseline")
    @argument(
        "--log",
        action="append",
        default=[],
        metavar="PATH",
        help="a Parquet or CSV log, or KIND=PATH; repeatable",
    )
    @argument(
        "--ts",
        default=None,
        metavar="COLUMN",
        help="the log's time column, when it is not called ts (integer milliseconds, ISO-8601 "
        "strings or timestamps)",
    )
    @argument(
        "--kind",
        default=None,
        metavar="NAME",
        help="the kind of every event, for a log without a kind column",
    )
    @argument(
        "--baseline",
        default=None,
        metavar="NAME",
        help="compare with the cell called NAME (default: the serial replay of this cell)",
    )
    @argument(
        "--by",
        default=None,
        metavar="FIELD[,FIELD]",
        help="compare with the baseline by these fields (keys only in this run, only in the "
        "baseline, in both with different rows) rather than row by row",
    )
    @argument(
        "--labels",
        default=None,
        metavar="FILE",
        help="score the run (and its baseline, side by side) against these labels by the --by "
        "fields: precision, recall, F1, time to detect, keys that changed class; a --sweep "
        "plots precision against recall per variant",
    )
    @argument(
        "--sweep",
        action="append",
        default=[],
        metavar="PARAM=V1,V2",
        help="replay every combination of these parameter values (one scan) and show rows per "
        "table against them; a click on a variant shows its diff against the baseline; "
        "repeatable",
    )
    @argument(
        "--no-reuse",
        action="store_true",
        help="with --baseline: replay in full rather than re-running only the stages that "
        "changed since the baseline's run",
    )
    @argument(
        "--compare",
        action="store_true",
        help="on a parallel engine: compare with the serial replay even above the compare limit",
    )
    @argument(
        "--compare-limit",
        type=int,
        default=None,
        metavar="N",
        help="on a parallel engine: above N events (default $RESTREAM_COMPARE_LIMIT or "
        "5,000,000) the run is not compared with a serial replay unless --compare",
    )
    @argument("--engine", choices=engine_names(), default="serial", help="where to replay")
    @argument("--master", default=None, metavar="URL", help="Spark master (default local[*])")
    @argument("--plan-only", action="store_true", help="show the plan, do not replay")
    @argument(
        "--background",
        action="store_true",
        help="return at once and replay on a thread (NAME.wait() waits for it)",
    )
    @argument(
        "--epoch", default=None, metavar="SIZE", help="events (100000) or time (1h) per epoch"
    )
    @argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="commit the replay's epochs to DIR as it goes",
    )
    @argument(
        "--checkpoint-every",
        default=None,
        metavar="EVERY",
        help="with --checkpoint: commit at least this often, a time (60s) or events (500000)",
    )
    @argument(
        "--on-error",
        default="stop",
        choices=("stop", "skip", "quarantine"),
        help="when a handler raises: stop, or roll that run back, go on and list it",
    )
    @line_cell_magic
    def restream(self, line: str, cell: str | None = None):
        """Replay the cell's program over a log and compare it with a baseline.

        As a cell magic: ``%%restream NAME --log PATH [options]`` with the program as the
        cell's body. Shows a live progress view, the plan and a live diff; the cell ends when
        the replay ends (the kernel's interrupt cancels it; a handler's error fails the cell).
        The run is bound to NAME in the notebook (``NAME.result``, ``NAME.diff``). With
        ``--baseline`` on the same log, only the stages that changed since the baseline's run
        re-run (``--no-reuse``: a full replay); ``NAME.reuse`` says what was reused. With
        ``--sweep PARAM=V1,V2`` every combination of values replays in one scan and a sweep view
        shows rows per table against them (``NAME.rows()``, ``NAME.diff(i)``). With
        ``--labels FILE --by FIELD`` the cell is scored against the labels when it ends (beside
        its baseline's scores; a sweep as precision against recall, docs/scoring.md). With
        ``--background`` the cell returns at once and NAME is the running replay
        (``NAME.wait()``, ``NAME.cancel()``).

        As a line magic: ``%restream runs`` shows the run catalog; ``%restream diff A B
        [--by FIELD]`` compares the latest runs of cells A and B (``--explain ROW``: why that
        row of the diff differs, ``restream_kit.explain``); ``%restream compare NAME``
        compares cell NAME's run with the serial replay of its program (a run on a parallel
        engine over a log above the compare limit is not compared unless ``--compare``);
        ``%restream forget NAME``
        deletes the runs called NAME and their files.
        """
        if cell is None:
            return self._line(line)
        run, args = self._start(line, cell)
        if run is None or args.background:
            return None
        try:
            finished = run.wait()
        except KeyboardInterrupt as exc:  # raised by wait() as a ReplayCancelled
            self._bind_stopped(args.name, run)
            raise exc from None
        self._finish(args.name, finished)
        return None

    def _bind_stopped(self, name: str, run: BackgroundRun) -> None:
        """A cancelled run that has stopped is bound as it ended (status ``cancelled``)."""
        if run.done:
            self.shell.user_ns[name] = run.wait()

    def _start(self, line: str, cell: str) -> tuple[BackgroundRun | None, Any]:
        """Parse the cell's arguments, show its plan and start its replay."""
        args = parse_argstring(self.restream, line)
        if not args.name.isidentifier():
            raise UsageError(f"the cell's name must be an identifier, got {args.name!r}")
        if args.by and not args.baseline and not args.labels:
            raise UsageError("--by compares with a baseline: give --baseline NAME too")
        self._scoring.pop(args.name, None)
        if args.labels:
            self._scoring[args.name] = (_read_labels(args.labels, args.by), args.by)
        if args.sweep and args.on_error != "stop":
            raise UsageError("--sweep replays with --on-error stop only")
        if args.checkpoint_every and not args.checkpoint:
            raise UsageError("--checkpoint-every needs --checkpoint DIR")
        try:
            from restream_kit.iterate.sweeps import parse_grid

            values = parse_grid(args.sweep, option="--sweep") if args.sweep else None
        except RestreamError as exc:
            raise UsageError(str(exc)) from None
        from widgets.workbench import run_cell

        try:
            run = run_cell(
                self.workbench,
                args.name,
                # The magic's line counts: line numbers in messages are the cell's own.
                "\n" + cell,
                logs=_logs(args),
                sweep=values,
                reuse=not args.no_reuse,
                compare=True if args.compare else None,
                **{name: getattr(args, name) for name in _AS_GIVEN},
            )
        except RestreamError as exc:
            raise UsageError(str(exc)) from None
        if run is not None:
            self.shell.user_ns[args.name] = run
        return run, args

    def _finish(self, name: str, cell: CellRun) -> None:
        """A blocking cell's run has ended: bind it, and fail the cell if it did not finish."""
        self.shell.user_ns[name] = cell
        raise_failure(cell)
        scoring = self._scoring.pop(name, None)
        if scoring is not None:
            from widgets.score_view import show_scores
            from widgets.workbench import display_mode

            try:
                show_scores(self.workbench, cell, *scoring, mode=display_mode())
            except RestreamError as exc:
                raise UsageError(str(exc)) from None

    def _line(self, line: str):
        words = shlex.split(line)
        if words == ["runs"]:
            from widgets.runs_view import runs_table

            return runs_table(self.workbench.catalog, _baselines(self.workbench))
        if len(words) == 2 and words[0] == "forget":
            # The catalog (docs/catalog.md): delete the runs called NAME (or one run id).
            gone = self.workbench.catalog.forget(words[1])
            if not gone:
                raise UsageError(f"no recorded run is called {words[1]!r}")
            print(f"forgot {len(gone)} run(s) called {words[1]}")
            return None
        if len(words) == 2 and words[0] == "compare":
            # A parallel run left uncompared (its log above the compare limit): compare it now.
            from widgets.workbench import show_compare

            running = self.shell.user_ns.get(words[1])
            if hasattr(running, "wait"):
                running.wait()
            try:
                show_compare(self.workbench, words[1])
            except RestreamError as exc:
                raise UsageError(str(exc)) from None
            return None
        row = None
        if words[:1] == ["diff"] and "--explain" in words[3:-1]:
            at = words.index("--explain")
            row, words = words[at + 1], words[:at] + words[at + 2 :]
        by = None
        if len(words) == 5 and words[0] == "diff" and words[3] == "--by":
            by, words = words[4], words[:3]
        if len(words) == 3 and words[0] == "diff":
            from widgets.workbench import show_diff

            for name in words[1:]:
                running = self.shell.user_ns.get(name)
                if hasattr(running, "wait"):
                    running.wait()
            try:
                if row is not None:
                    return self._explain(words[1], words[2], row)
                show_diff(self.workbench, words[1], words[2], by=by)
            except RestreamError as exc:
                raise UsageError(str(exc)) from None
            return None
        raise UsageError(
            "use %restream runs, %restream diff A B [--by FIELD] [--explain ROW], "
            "%restream compare NAME, "
            "%restream forget NAME, or %%restream NAME "
            "as a cell magic "
            "(%%restream? for help)"
        )

    def _explain(self, a: str, b: str, row: str) -> None:
        """``%restream diff A B --explain ROW``: why ROW differs between cells A and B."""
        from restream_kit.iterate.explain import explain

        runs = self.workbench.runs
        print(explain(runs.get(a, a), runs.get(b, b), row, labels=(a, b)).text())


def _read_labels(labels: str, by: str | None) -> Any:
    """``--labels FILE`` read before the replay, so that a bad file fails the cell at once."""
    if not by:
        raise UsageError("--labels needs --by FIELD[,FIELD]: the key fields to score by")
    from restream_kit.io.compare import parse_by
    from restream_kit.iterate.score import read_labels

    try:
        return read_labels(labels, parse_by(by))
    except RestreamError as exc:
        raise UsageError(str(exc)) from None


def _baselines(workbench: Workbench) -> set[str]:
    """The run ids of the serial baselines this session's cells recorded."""
    ids = set()
    for cell in workbench.runs.values():
        base, own = getattr(cell, "baseline", None), getattr(cell, "record", None)
        if base is None or base.reused or not base.record:
            continue
        if own is None or base.record.run_id != own.run_id:  # a serial cell is its own baseline
            ids.add(base.record.run_id)
    return ids


#: What the first ``%%restream`` cell needs, imported by ``%load_ext`` so that the cell starts at
#: once (about a second of imports on a small machine).
_PRELOAD = (
    "pyarrow.dataset",
    "pyarrow.parquet",
    "duckdb",
    "restream_kit.planner",
    "restream_kit.planner.checks",
    "restream_kit.io.catalog",
    "restream_kit.engines.serial",
    "widgets.workbench",
    "widgets.monitor",
    "widgets.diff_view",
    "widgets.plan_view",
    "widgets.quarantine_view",
    "widgets.sweep_view",
)


def register(ipython) -> None:
    """Register the magics with ``ipython`` (called by ``%load_ext restream_kit``)."""
    import importlib

    ipython.register_magics(RestreamMagics)
    for module in _PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:  # a view's dependency missing: the cell that needs it says so
            pass
    # In a kernel with an asyncio loop, cells wait for their replay with an await (see above).
    if type(ipython).__name__ == "ZMQInteractiveShell" and _await_cells not in (
        ipython.input_transformers_post
    ):
        ipython.input_transformers_post.append(_await_cells)
