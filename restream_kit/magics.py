"""``%%restream`` and ``%restream``: parse the arguments, call the workbench. Nothing else.

The views live in the top-level ``widgets`` package and are imported only when a cell runs.
"""

from __future__ import annotations

import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .engines import engine_names
from .errors import RestreamError
from .workbench import Workbench

__all__ = ["RestreamMagics", "register"]


@magics_class
class RestreamMagics(Magics):
    """The workbench's magics; one ``Workbench`` per IPython session."""

    def __init__(self, shell):
        super().__init__(shell)
        self.workbench = Workbench()

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
        "--baseline",
        default=None,
        metavar="NAME",
        help="compare with the cell called NAME (default: the serial replay of this cell)",
    )
    @argument("--engine", choices=engine_names(), default="serial")
    @argument("--master", default=None, metavar="URL", help="Spark master (default local[*])")
    @argument("--plan-only", action="store_true", help="show the plan, do not replay")
    @argument(
        "--epoch", default=None, metavar="SIZE", help="events (100000) or time (1h) per epoch"
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
        cell's body. Shows the plan, then replays with a live progress view and a live diff.
        The run is bound to NAME in the notebook (``NAME.wait().result``).

        As a line magic: ``%restream runs`` shows the run catalog; ``%restream diff A B``
        compares the latest runs of cells A and B; ``%restream forget NAME`` deletes the
        runs called NAME and their files.
        """
        if cell is None:
            return self._line(line)
        args = parse_argstring(self.restream, line)
        if not args.name.isidentifier():
            raise UsageError(f"the cell's name must be an identifier, got {args.name!r}")
        from widgets.workbench import run_cell

        try:
            run = run_cell(
                self.workbench,
                args.name,
                cell,
                logs=args.log,
                baseline=args.baseline,
                engine=args.engine,
                master=args.master,
                plan_only=args.plan_only,
                epoch=args.epoch,
                on_error=args.on_error,
            )
        except RestreamError as exc:
            raise UsageError(str(exc)) from None
        if run is not None:
            self.shell.user_ns[args.name] = run
        return None

    def _line(self, line: str):
        words = shlex.split(line)
        if words == ["runs"]:
            return self.workbench.catalog.runs()
        if len(words) == 2 and words[0] == "forget":
            # The catalog (docs/catalog.md): delete the runs called NAME (or one run id).
            gone = self.workbench.catalog.forget(words[1])
            if not gone:
                raise UsageError(f"no recorded run is called {words[1]!r}")
            print(f"forgot {len(gone)} run(s) called {words[1]}")
            return None
        if len(words) == 3 and words[0] == "diff":
            from widgets.workbench import show_diff

            for name in words[1:]:
                running = self.shell.user_ns.get(name)
                if hasattr(running, "wait"):
                    running.wait()
            try:
                show_diff(self.workbench, words[1], words[2])
            except RestreamError as exc:
                raise UsageError(str(exc)) from None
            return None
        raise UsageError(
            "use %restream runs, %restream diff A B, %restream forget NAME, or %%restream NAME "
            "as a cell magic "
            "(%%restream? for help)"
        )


def register(ipython) -> None:
    """Register the magics with ``ipython`` (called by ``%load_ext restream_kit``)."""
    ipython.register_magics(RestreamMagics)
