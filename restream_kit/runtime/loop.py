"""The set-up of a replay's loop, written once: a program compiled against a runtime, the
runner of scheduled events the inlined loop calls, and the flush after the log.

The serial engine, the explanations' traced replay and a Spark plain pass each build their
loop with :func:`compile_loop` and drive it: ``loop.run_batch(events)`` for each batch of log
events (the compiler's inlined loop, :mod:`restream_kit.compiler.inline`), ``loop.flush()``
after the log (:func:`~.semantics.flush`). The planner's samples (cost, causal chains) build
theirs without an inlined loop and replay with ``loop.run_events(events, hook)``, which lets
them wrap every handler run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from ..compiler.compile import CompiledProgram, compile_program
from ..compiler.inline import SCHEDULED_RUNNER_NAME
from ..model.program import Program
from .semantics import MAX_FLUSH, RunHook, SerialRuntime, flush, run_events, run_scheduled

__all__ = ["Loop", "compile_loop"]


class Loop:
    """A compiled program and its runtime, ready to run batches of log events."""

    def __init__(self, compiled: CompiledProgram, rt: SerialRuntime, by_kind: dict):
        self.compiled = compiled
        self.rt = rt
        #: kind -> (handler name, function) pairs, for scheduled events.
        self.by_kind = by_kind
        self.run_batch: Callable | None = compiled.run_batch

    def handlers_replaced(self) -> None:
        """Scheduled events go to the compiled program's handlers as they now are (fused
        windows replace some: ``runtime.windows.fuse_windows``)."""
        self.by_kind.clear()
        self.by_kind.update(self.compiled.handlers_by_kind())

    def run_scheduled(self, t: float) -> int:
        """Run the scheduled events due by ``t`` (and the timed writes before each)."""
        return run_scheduled(self.rt, self.by_kind, t)

    def flush(self, limit: int = MAX_FLUSH) -> int:
        """Run the scheduled events left after the log (at most ``limit``); how many ran."""
        return flush(self.rt, self.by_kind, limit=limit)

    def run_events(self, events: Iterable[Any], run: RunHook, *, end: bool = True) -> int:
        """Replay ``events`` with ``run`` making every handler run (the planner's samples:
        :func:`~.semantics.run_events`); the scheduled events run."""
        return run_events(self.by_kind, self.rt, events, run, end=end)


def compile_loop(
    program: Program,
    rt: SerialRuntime,
    stores: dict | None,
    *,
    columns: Sequence[str] | None = None,
    kind_order: Sequence[str] = (),
    extra_globals: dict[str, Any] | None = None,
    scheduled: bool = True,
    **options: Any,
) -> Loop:
    """Compile ``program`` against ``rt`` and ``stores`` into a :class:`Loop` over a log of
    ``columns`` (None: no inlined loop, events run through :meth:`Loop.run_events`, as the
    planner's samples run them). ``scheduled``: whether events can be scheduled (a Spark plain pass's
    only when it runs closes of its own; without, its loop skips the check for due ones); ``options`` go to
    :func:`~restream_kit.compiler.compile.compile_program` (``only``, ``hooks``, ``guarded``)."""
    by_kind: dict = {}
    # (a partial, not a lambda: one Python call fewer each time the loop finds events due)
    runner = partial(run_scheduled, rt, by_kind) if scheduled else _nothing_scheduled
    compiled = compile_program(
        program,
        rt,
        stores,
        columns=columns,
        kind_order=kind_order,
        extra_globals={SCHEDULED_RUNNER_NAME: runner, **(extra_globals or {})},
        **options,
    )
    by_kind.update(compiled.handlers_by_kind())
    return Loop(compiled, rt, by_kind)


def _nothing_scheduled(_t: float) -> None:
    """The runner of scheduled events of a loop where none can be scheduled."""
