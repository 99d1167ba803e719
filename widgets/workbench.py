"""What a ``%%restream`` cell shows: the plan, then a live monitor and diff while it replays.

``display_mode()`` picks widgets inside a Jupyter kernel and text elsewhere (a terminal), or
what ``RESTREAM_DISPLAY`` says (``widgets`` or ``text``). The replay runs on a thread in both
modes; the magic waits for it (the cell ends with its replay) unless ``--background``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from restream_kit import Log, planner
from restream_kit.engines import capabilities_of, get_engine
from restream_kit.io.progress import broadcast
from restream_kit.planner.render import plan_text
from restream_kit.workbench import BackgroundRun, CellRun, CellSweep, Workbench, log_epoch

__all__ = ["display_mode", "run_cell", "show_compare", "show_diff"]


def display_mode() -> str:
    """``widgets`` in a Jupyter kernel, ``text`` in a terminal, or ``$RESTREAM_DISPLAY``."""
    chosen = os.environ.get("RESTREAM_DISPLAY")
    if chosen in ("widgets", "text"):
        return chosen
    try:
        shell = get_ipython().__class__.__name__  # type: ignore[name-defined]  # noqa: F821
    except NameError:
        return "text"
    return "widgets" if shell == "ZMQInteractiveShell" else "text"


def run_cell(
    workbench: Workbench,
    name: str,
    source: str,
    *,
    logs: list[str],
    baseline: str | None = None,
    by: str | None = None,
    engine: str = "serial",
    master: str | None = None,
    plan_only: bool = False,
    epoch: str | None = None,
    mode: str | None = None,
    on_error: str = "stop",
    sweep: dict[str, list[Any]] | None = None,
    reuse: bool = True,
    checkpoint: str | None = None,
    checkpoint_every: str | None = None,
    compare: bool | None = None,
    compare_limit: int | None = None,
) -> BackgroundRun | None:
    """Define the cell's program, show its plan and, given logs, start its replay against the
    baseline on a thread; the caller waits for it (a blocking cell) or not (``--background``).

    ``sweep`` (parameter name to values) replays every variant of the grid instead, and shows
    the sweep view; ``reuse=False`` replays in full even with a baseline that could be reused;
    ``compare`` (True: always, False: never) and ``compare_limit`` decide whether a parallel
    run is compared with a serial replay (see ``Workbench.run``).
    Widgets put the monitor first, so that it is at the top of the cell while the replay runs.
    """
    mode = mode or display_mode()
    program = workbench.define(name, source)
    if sweep:
        from restream_kit.iterate.sweeps import grid
        from restream_kit.model.params import check_values

        for values in grid(sweep):  # an unknown parameter fails the cell before any replay
            check_values(program, values, "--sweep")
    log = workbench.log(logs) if logs else None
    # A handler that would never run fails the cell in one line, before any replay.
    the_plan = planner.plan(program, log, require_kinds=True)
    if plan_only or log is None:
        _show_plan(the_plan, name, mode, open_plan=True)
        return None
    if epoch is None:
        # About ten epochs, so that the monitor moves (never larger than the engines' default;
        # Spark's own on a large log, where ten would cost it twice its few).
        chosen = log_epoch(log, engine)
        epoch = None if chosen is None else str(chosen)
    options: dict[str, Any] = dict(baseline=baseline, engine=engine, master=master, epoch=epoch)
    if by:
        options["by"] = by
    if on_error != "stop":
        options["on_error"] = on_error
    # How the engine will run each stage, said with the plan before the replay starts.
    layout = _layout(engine, program, log, options)
    if sweep:
        return _start_sweep(workbench, name, program, log, the_plan, mode, sweep, options, layout)
    if not reuse:
        options["reuse"] = False
    if checkpoint:  # (committed as it goes: ``checkpoint_every``)
        options.update(checkpoint=checkpoint, checkpoint_every=checkpoint_every)
    if compare is not None:
        options["compare"] = compare
    if compare_limit is not None:
        options["compare_limit"] = compare_limit
    if mode == "text":
        _show_plan(the_plan, name, mode, layout)
        from widgets.monitor import TextMonitor

        return BackgroundRun(
            workbench, name, program, log, observer=TextMonitor(), on_done=_print_outcome, **options
        )

    return _start_with_views(workbench, name, program, log, the_plan, mode, layout, options)


def _start_with_views(workbench, name, program, log, the_plan, mode, layout, options) -> Any:
    """The cell's replay started on a thread, with its monitor, its quarantine and its diff
    views shown above the plan (the monitor at the top of the cell while the replay runs)."""
    from widgets.diff_view import DiffView
    from widgets.monitor import ReplayMonitor
    from widgets.quarantine_view import QuarantineView

    engine, by = options["engine"], options.get("by")
    monitor, diff_view = ReplayMonitor(f"{name} on {engine}", engine), DiffView(by=by)
    quarantine_view = QuarantineView()
    monitor_out = _show_static(monitor)
    results = _Results(quarantine_view, diff_view)
    results_out = _show_static(results)
    _show_plan(the_plan, name, mode, layout)

    def finished(cell: CellRun) -> None:
        monitor.finish(cell)
        quarantine_view.finish(cell)
        diff_view.finish(cell)
        # What a saved notebook shows without its kernel: the final state, as HTML.
        for out, view in ((monitor_out, monitor), (results_out, results)):
            out.update(view.static_html(), view.static_text())

    run = BackgroundRun(
        workbench,
        name,
        program,
        log,
        observer=broadcast([monitor, diff_view]),
        before_replay=diff_view.set_baseline,
        on_done=finished,
        **options,
    )
    monitor.attach(run)
    return run


def _start_sweep(
    workbench: Workbench,
    name: str,
    program: Any,
    log: Log,
    the_plan: Any,
    mode: str,
    values: dict[str, list[Any]],
    options: dict[str, Any],
    layout: Any = None,
) -> BackgroundRun:
    """A ``--sweep`` cell: the monitor of its one scan, then the sweep view (or its text)."""
    options = {k: v for k, v in options.items() if k != "on_error"}
    title = f"{name}: sweep of {', '.join(values)} on {options['engine']}"
    if mode == "text":
        _show_plan(the_plan, name, mode, layout)
        from widgets.monitor import TextMonitor
        from widgets.sweep_view import sweep_text

        def printed(cell: CellSweep) -> None:
            if cell.ok:
                print(sweep_text(cell))

        return BackgroundRun(
            workbench, name, program, log, values=values, observer=TextMonitor(), on_done=printed,
            **options,
        )  # fmt: skip

    from widgets.monitor import ReplayMonitor
    from widgets.sweep_view import VIEWS, SweepView

    monitor, view = ReplayMonitor(title, options["engine"]), SweepView()
    VIEWS[name] = view
    monitor_out, view_out = _show_static(monitor), _show_static(view)
    _show_plan(the_plan, name, mode, layout)

    def finished(cell: CellSweep) -> None:
        monitor.finish(cell)
        view.finish(cell)
        for out, shown in ((monitor_out, monitor), (view_out, view)):
            out.update(shown.static_html(), shown.static_text())

    run = BackgroundRun(
        workbench, name, program, log, values=values, observer=monitor, on_done=finished,
        **options,
    )  # fmt: skip
    monitor.attach(run)
    return run


def _layout(engine: str, program: Any, log: Log, options: dict[str, Any]) -> Any:
    """``(engine, {stage: how it will run})`` for a parallel engine, else None."""
    runner = get_engine(engine)
    if not capabilities_of(runner).parallel:
        return None
    how = getattr(runner, "layout", None)
    if how is None:
        return None
    try:
        return engine, how(program, log, options)
    except Exception:  # noqa: BLE001 - a forecast: the replay itself reports what ran
        return None


def _show_plan(
    the_plan: Any, name: str, mode: str, layout: Any = None, open_plan: bool = False
) -> None:
    """The plan, with how the engine will run each stage (``layout``, see :func:`_layout`)."""
    if mode == "text":
        print(plan_text(the_plan))
        if layout is not None:
            print(f"On {layout[0]}, before the replay:")
            for stage, how in layout[1].items():
                print(f"  {stage}: {how}")
        return
    from widgets.plan_view import PlanView

    # Folded to its summary line in a replaying cell; open with --plan-only.
    _show_static(PlanView(the_plan, name, layout, open=open_plan))


def _print_outcome(cell: CellRun) -> None:
    """Text mode: the quarantine and the diff of a finished run (nothing for a failed one; the
    cell raises its error)."""
    if not cell.ok:
        return
    from widgets.quarantine_view import quarantine_text

    if cell.result is not None and cell.result.quarantine.num_rows:
        print(quarantine_text(cell.result.quarantine))
    if cell.reuse_line():
        print(cell.reuse_line())
    if cell.diff is None:
        print(cell.not_compared)
    else:
        print(f"diff against {cell.baseline.label}:")
        print(cell.diff.text())
    if cell.unexpected_difference:
        print(
            "The parallel result differs from the serial replay of the same program: "
            "the engine is wrong. Please report this.",
            file=sys.stderr,
        )
    print(f"done in {cell.wall_s:.2f} s")


def show_diff(
    workbench: Workbench, a: str, b: str, *, by: str | None = None, mode: str | None = None
) -> Any:
    """``%restream diff A B [--by F]``: the latest runs of cells A and B compared."""
    d = workbench.diff(a, b, by=by)
    if (mode or display_mode()) == "text":
        print(f"{a} against {b}:")
        print(d.text())
        return d
    from widgets.diff_view import DiffView

    view = DiffView(by=by)
    view.show(d, f"{b} ({a} compared with it)", sides=(workbench, a, b))
    _show_static(view)
    return d


def _show_static(view: Any) -> Any:
    """Display ``view``'s widget with a static form of its state (``widgets._static``)."""
    from widgets._static import StaticOutput

    return StaticOutput(view.widget, view.static_html(), view.static_text())


class _Results:
    """A replay's quarantine and diff, shown as one output."""

    def __init__(self, quarantine_view: Any, diff_view: Any) -> None:
        import ipywidgets as w

        self.quarantine_view, self.diff_view = quarantine_view, diff_view
        self.widget = w.VBox([quarantine_view.widget, diff_view.widget])

    def static_html(self) -> str:
        shown = self.quarantine_view.widget.layout.display != "none"
        return (self.quarantine_view.widget.value if shown else "") + self.diff_view.static_html()

    def static_text(self) -> str:
        return self.diff_view.static_text()


def show_compare(workbench: Workbench, name: str, *, mode: str | None = None) -> Any:
    """``%restream compare NAME``: the latest run of cell NAME compared with the serial replay
    of its program (replayed here unless this session or the catalog has it); the diff."""
    if (mode or display_mode()) == "text":
        from widgets.monitor import TextMonitor

        cell = workbench.compare(name, observer=TextMonitor())
        print(f"diff against {cell.baseline.label}:")
        print(cell.diff.text())
        return cell.diff
    from widgets.diff_view import DiffView

    view = DiffView()
    view.header.value = f"<b>diff of {name} against its serial replay</b>: replaying serially"
    shown = _show_static(view)
    cell = workbench.compare(name)
    view.set_baseline(cell)
    view.finish(cell)
    shown.update(view.static_html(), view.static_text())
    return cell.diff
