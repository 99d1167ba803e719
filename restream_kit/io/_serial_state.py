"""The serial engine's state between epochs as plain data, and back: what a checkpoint
stores of a replay (its stores, the pending timed writes and scheduled events, the counter
that orders them), whichever engine wrote it (the Spark engine writes the same)."""

from __future__ import annotations

from typing import Any

from ._checkpoint_codec import ProgramFunction, program_codes

__all__ = ["restore_serial_state", "serial_state", "state_declarations"]


def state_declarations(program: Any) -> dict[str, list]:
    """Name -> [kind, repr(default)] of every declared state, as :func:`check_states` reads."""
    return {name: [decl.kind, repr(decl.default)] for name, decl in program.states.items()}


def serial_state(rt: Any, stores: dict[str, dict], program: Any) -> dict[str, Any]:
    """The serial runtime's state between epochs, as plain data (see save_value).

    That is every store, the timed writes still pending (their store by name), the scheduled
    events still pending, the counter that orders both, and each log event's count of
    scheduled events (the ``seq`` of the next one).
    """
    by_id = {id(d): name for name, d in stores.items()}
    future = [(at, n, by_id[id(d)], op, key, arg) for at, n, d, _dflt, op, key, arg in rt.future]
    order = next(rt.order)
    rt.order = _count(order)
    return {
        "states": state_declarations(program),
        # Plain dicts: on_error stores are journaling dict subclasses.
        "stores": {name: dict(d) for name, d in stores.items()},
        "future": future,
        "scheduled": list(rt.scheduled),
        "order": order,
        "scheduled_per_root": dict(rt.scheduled_per_root),
        "quarantined": list(getattr(rt, "quarantined", ())),
    }


def restore_serial_state(
    rt: Any,
    stores: dict[str, dict],
    program: Any,
    state: dict[str, Any],
    *,
    outputs: bool = True,
    namespace: dict[str, Any] | None = None,
) -> None:
    """Put ``state`` (from :func:`serial_state`) back into a fresh runtime and its stores.

    ``outputs`` False (a ``start_from``) leaves out the handler runs quarantined before.
    Merge functions read from a checkpoint (:class:`ProgramFunction`) are rebuilt from the
    program's own code in ``namespace`` (the compiled program's globals; when None, the
    program is compiled again against ``rt`` and ``stores`` to find them).
    """
    for name, saved in state["stores"].items():
        # dict.update: an on_error store must not journal what it is restored to.
        dict.clear(stores[name])
        dict.update(stores[name], saved)
    if outputs and hasattr(rt, "quarantined"):
        rt.quarantined[:] = state.get("quarantined", [])
    defaults = {name: decl.default for name, decl in program.states.items()}
    future = state["future"]
    if any(isinstance(entry[5], ProgramFunction) for entry in future):
        if namespace is None:
            from ..compiler.compile import compile_program

            namespace = compile_program(program, rt, stores).namespace
        codes = program_codes(namespace, program.filename)
        future = [
            (*entry[:5], entry[5].rebuild(codes, namespace))
            if isinstance(entry[5], ProgramFunction)
            else entry
            for entry in future
        ]
    rt.future[:] = [
        (at, n, stores[name], defaults[name], op, key, arg) for at, n, name, op, key, arg in future
    ]
    rt.scheduled[:] = state["scheduled"]
    rt.order = _count(state["order"])
    rt.scheduled_per_root.clear()
    rt.scheduled_per_root.update(state["scheduled_per_root"])


def _count(start: int):
    import itertools

    return itertools.count(start)
