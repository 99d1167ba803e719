"""What a handler is to the user: ``@on(kind)``, and ``emit`` and ``schedule`` inside it.

The functions here only mark handlers and stand for the engines' own ``emit`` and
``schedule``, which the compiler substitutes; called outside a replay they raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ProgramError

__all__ = ["on", "emit", "schedule", "HANDLER_KINDS_ATTR"]

HANDLER_KINDS_ATTR = "__restream_kinds__"


def on(*kinds: str) -> Callable[[Callable], Callable]:
    """Bind the decorated function to events of the given kinds."""
    if not kinds or not all(isinstance(k, str) and k for k in kinds):
        raise ProgramError("@on(...) needs at least one event kind, as a non-empty string")

    def bind(fn: Callable) -> Callable:
        setattr(fn, HANDLER_KINDS_ATTR, tuple(kinds))
        return fn

    return bind


def emit(table: str, **fields: Any) -> None:
    """Append a row to output ``table`` (only inside a handler, during a replay)."""
    raise RuntimeError("emit() can only be called inside a handler during a replay")


def schedule(kind: str, *, at: int, **fields: Any) -> None:
    """Put an event of ``kind`` into the replay at time ``at`` (only inside a handler)."""
    raise RuntimeError("schedule() can only be called inside a handler during a replay")
