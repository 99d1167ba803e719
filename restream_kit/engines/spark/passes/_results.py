"""The replay's :class:`Result` from what the passes sent back (``passes._driver.Ran``): the
final states (in the serial engine's order where it shows, with the timed writes due after
the log), the metrics, the quarantine."""

from __future__ import annotations

import pickle
import time
from typing import TYPE_CHECKING

from ....io.result import Metrics, Result, quarantine_table
from ....model.program import Program
from ...serial import quarantine_warning
from ._copies import in_serial_order
from ._setup import Setup
from ._stores import apply_op

if TYPE_CHECKING:
    from ._driver import Ran

__all__ = ["finish_finals", "handler_names", "make_result"]


def finish_finals(program: Program, ran: Ran) -> None:
    """The final states as the serial engine ends with them, from what the tasks reported:
    first the states read through copies in the serial engine's order of keys (``passes._copies``),
    then the timed writes due after the log's end, which add their new keys last."""
    in_serial_order(ran.finals, ran.orders)
    _apply_pending(program, ran)


def _apply_pending(program: Program, ran: Ran) -> None:
    """Timed writes due after the log's end apply if an event at or after their time ran,
    each once: a write waits in every pass that holds its state (the holder, and a pass
    holding a copy of it), and each reports it; its position names it."""
    for position, blob in sorted(set(ran.pending), key=lambda item: item[0]):
        if position[0] <= ran.last_event:
            state, key, op = pickle.loads(blob)
            apply_op(ran.finals[state], program.states[state].default, key, op)


def handler_names(program: Program) -> list[str]:
    """The program's handlers' names in declaration order (a handler's index names it)."""
    return [h.name for h in program.handlers]


def make_result(
    setup: Setup, ran: Ran, tables: dict, events: int, epochs: int, quarantined: list
) -> Result:
    """The replay's :class:`Result` from what the passes sent back."""
    rep = setup.rep
    wall = time.perf_counter() - setup.started
    metrics = Metrics(
        engine="spark",
        events=events,
        scheduled_events=ran.scheduled,
        wall_s=wall,
        span_ms=setup.log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages=ran.stage_seconds,
        epochs=epochs,
        path=ran.path,
        task_events=ran.task_events,
    )
    result = Result(tables=tables, state=ran.finals, metrics=metrics)
    if rep.on_error != "stop":
        quarantined.sort(key=lambda q: (q[0], q[1]))
        result.quarantine = quarantine_table(q[2] for q in quarantined)
        result.on_error = rep.on_error
        note = quarantine_warning(result.quarantine, rep.on_error)
        if note:
            result.warnings.append(note)
    return result
