"""Poison events: what ``on_error="skip"|"quarantine"`` records about a handler run that raised.

Both engines build the quarantine row with :func:`quarantine_row`, from the program's file
name, the handler, the event and the exception, so that the rows are identical whichever
engine ran the handler. Only the program's own frames go into the traceback column: the
engines reach a handler through different code (a generated loop, a Spark task), and those
frames would make the tables differ.
"""

from __future__ import annotations

import json
import linecache
import traceback
from typing import Any

from ..model.errors import RestreamError, user_lineno

__all__ = [
    "ON_ERROR",
    "quarantine_row",
    "check_on_error",
    "user_traceback",
    "event_fields",
    "portable_fields",
]

#: What a replay does when a handler raises: stop (the default), or roll that handler run
#: back and go on. ``skip`` and ``quarantine`` both record the run in ``Result.quarantine``
#: and add a warning; ``quarantine`` also writes the table with the outputs (``write``).
ON_ERROR = ("stop", "skip", "quarantine")

_EVENT_COLUMNS = ("lsn", "ts", "kind")
_SCHEDULED_ONLY = ("lsn", "ts", "kind", "seq")


def check_on_error(on_error: str | None) -> str:
    """``on_error`` itself when it is one of :data:`ON_ERROR` (None means stop)."""
    value = on_error or "stop"
    if value not in ON_ERROR:
        raise RestreamError(f"on_error must be one of {', '.join(ON_ERROR)}, not {on_error!r}")
    return value


def event_fields(event: Any, columns: tuple[str, ...] | list[str] | None) -> dict[str, Any]:
    """The event's own fields (its columns other than lsn, ts and kind)."""
    if hasattr(event, "__dict__") and not isinstance(event, tuple):
        return {k: v for k, v in vars(event).items() if k not in _SCHEDULED_ONLY}
    # The log's column names, not the named tuple's (which renames odd ones to _1, _2...).
    names = columns or getattr(event, "_fields", None) or ()
    return {k: v for k, v in zip(names, event) if k not in _EVENT_COLUMNS}


class _Shown(str):
    """A value that cannot travel between processes, kept as its repr (and shown as such)."""

    def __repr__(self) -> str:
        return str(self)


_PLAIN = (int, float, str, bool, type(None))


def portable_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with every value that is not plain replaced by its repr, shown the same."""
    return {k: v if type(v) in _PLAIN else _Shown(repr(v)) for k, v in fields.items()}


def user_traceback(exc: BaseException, filename: str) -> str:
    """The frames of ``filename`` in ``exc``'s traceback, innermost last, one per line."""
    lines = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename != filename or frame.name.startswith("_rs_"):
            continue
        code = (frame.line or linecache.getline(filename, frame.lineno or 0)).strip()
        lines.append(f"{filename}:{frame.lineno}: {code}")
    return "\n".join(lines)


def quarantine_row(
    *,
    filename: str,
    handler: str,
    event: Any,
    seq: int,
    columns: tuple[str, ...] | list[str] | None,
    exc: BaseException,
) -> dict[str, Any]:
    """One row of ``result.QUARANTINE_SCHEMA`` for a handler run that raised ``exc``."""
    lineno = user_lineno(exc, filename)
    code = linecache.getline(filename, lineno).strip() if lineno else ""
    fields = event_fields(event, columns)
    return {
        "lsn": event[0],
        "seq": seq,
        "ts": event[1],
        "kind": event[2],
        "handler": handler,
        "line": lineno,
        "code": code or None,
        "error": f"{type(exc).__name__}: {exc}",
        "fields": json.dumps(fields, default=str),
        "traceback": user_traceback(exc, filename),
    }
