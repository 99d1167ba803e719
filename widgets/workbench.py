"""What a ``%%restream`` cell shows: the plan, then a live monitor and diff while it replays.

``display_mode()`` picks widgets inside a Jupyter kernel and text elsewhere (a terminal), or
what ``RESTREAM_DISPLAY`` says (``widgets`` or ``text``). In widget mode the replay runs on a
background thread and the kernel stays usable; in text mode it runs in the foreground and
prints.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from restream_kit.log import Log
from restream_kit.planner import plan as make_plan
from restream_kit.planner.render import plan_text
from restream_kit.progress import broadcast
from restream_kit.workbench import BackgroundRun, CellRun, Workbench

__all__ = ["display_mode", "run_cell", "show_diff"]


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


def _display(*objects: Any) -> None:
    from IPython.display import display

    display(*objects)


def run_cell(
    workbench: Workbench,
    name: str,
    source: str,
    *,
    logs: list[str],
    baseline: str | None = None,
    engine: str = "serial",
    master: str | None = None,
    plan_only: bool = False,
    epoch: str | None = None,
    mode: str | None = None,
    on_error: str = "stop",
) -> CellRun | BackgroundRun | None:
    """Define the cell's program, show its plan and, given logs, replay it against the baseline."""
    mode = mode or display_mode()
    program = workbench.define(name, source)
    log = Log(logs) if logs else None
    the_plan = make_plan(program, log)
    if mode == "text":
        print(plan_text(the_plan))
    else:
        from widgets.plan_view import PlanView

        _display(PlanView(the_plan, name).widget)
    if plan_only or log is None:
        return None
    options = dict(baseline=baseline, engine=engine, master=master, epoch=epoch)
    if on_error != "stop":
        options["on_error"] = on_error
    if mode == "text":
        from widgets.monitor import TextMonitor

        cell = workbench.run(name, program, log, observer=TextMonitor(), **options)
        if cell.error is not None:
            raise cell.error
        from widgets.quarantine_view import quarantine_text

        if cell.result is not None and cell.result.quarantine.num_rows:
            print(quarantine_text(cell.result.quarantine))
        print(f"diff against {cell.baseline.label}:")
        print(cell.diff.text())
        if cell.unexpected_difference:
            print(
                "The parallel result differs from the serial replay of the same program: "
                "the engine is wrong. Please report this.",
                file=sys.stderr,
            )
        return cell

    from widgets.diff_view import DiffView
    from widgets.monitor import ReplayMonitor
    from widgets.quarantine_view import QuarantineView

    monitor, diff_view = ReplayMonitor(f"{name} on {engine}"), DiffView()
    quarantine_view = QuarantineView()
    _display(monitor.widget, quarantine_view.widget, diff_view.widget)

    def finished(cell: CellRun) -> None:
        monitor.finish(cell)
        quarantine_view.finish(cell)
        diff_view.finish(cell)

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


def show_diff(workbench: Workbench, a: str, b: str, *, mode: str | None = None) -> Any:
    """``%restream diff A B``: the latest runs of cells A and B compared."""
    d = workbench.diff(a, b)
    if (mode or display_mode()) == "text":
        print(f"{a} against {b}:")
        print(d.text())
        return d
    from widgets.diff_view import DiffView

    view = DiffView()
    view.show(d, f"{b} ({a} compared with it)")
    _display(view.widget)
    return d
