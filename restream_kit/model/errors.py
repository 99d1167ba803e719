"""The errors a user can cause, each rendered as one line naming where the problem is."""

from __future__ import annotations

__all__ = [
    "RestreamError",
    "RestreamWarning",
    "ProgramError",
    "LogError",
    "HandlerError",
    "OutputError",
    "StateError",
    "CheckError",
    "user_lineno",
    "format_fields",
]


class RestreamError(Exception):
    """Base of every error caused by the user's program, log or arguments.

    ``str(err)`` is one line that names the file, column, row, handler or line involved.
    """


class RestreamWarning(UserWarning):
    """Something worth knowing that does not stop a replay (a handler's kind absent from the log)."""


class ProgramError(RestreamError):
    """A program that cannot be loaded: syntax error, undeclared state, bad handler."""

    def __init__(self, message: str, *, filename: str | None = None, lineno: int | None = None):
        self.filename = filename
        self.lineno = lineno
        where = (
            f"{filename}:{lineno}: " if filename and lineno else f"{filename}: " if filename else ""
        )
        super().__init__(f"{where}{message}")


class LogError(RestreamError):
    """A log that cannot be read or is not a valid, ordered event log."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        column: str | None = None,
        row: int | None = None,
    ):
        self.message = message
        self.path = path
        self.column = column
        self.row = row
        parts = [p for p in (path, f"column {column!r}" if column else None) if p]
        if row is not None:
            parts.append(f"row {row}")
        where = ", ".join(parts)
        super().__init__(f"{where}: {message}" if where else message)


class HandlerError(RestreamError):
    """A user's handler raised while processing an event."""

    def __init__(
        self,
        *,
        handler: str,
        filename: str,
        lineno: int | None,
        line: str | None,
        lsn: int | None,
        seq: int,
        kind: str,
        ts: int,
        cause: BaseException,
        fields: dict | None = None,
    ):
        self.handler = handler
        self.filename = filename
        self.lineno = lineno
        self.line = line
        self.lsn = lsn
        self.seq = seq
        self.kind = kind
        self.ts = ts
        self.cause = cause
        self.fields = fields
        event = f"lsn {lsn}" + (f" (scheduled #{seq})" if seq else "")
        code = f" `{line.strip()}`" if line else ""
        shown = f" {{{format_fields(fields)}}}" if fields else ""
        super().__init__(
            f"{filename}:{lineno}: handler {handler!r} raised "
            f"{type(cause).__name__}: {cause} on {kind!r} event {event} at ts {ts}{shown};{code}"
        )


class OutputError(RestreamError):
    """Emitted rows that cannot form a table (for example one field with two types)."""


class StateError(RestreamError):
    """Final state that cannot be kept: a value (or key) that cannot be serialized."""


def format_fields(fields: dict, limit: int = 300) -> str:
    """An event's fields as ``k=repr(v), ...`` on one line, cut at ``limit`` characters."""
    text = ", ".join(f"{k}={v!r}" for k, v in fields.items()).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def user_lineno(exc: BaseException, filename: str) -> int | None:
    """The deepest line of ``filename`` in the exception's traceback (the user's own line)."""
    tb = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno


class CheckError(ProgramError):
    """A mistake found before the replay, against the log or the program's declarations.

    ``lineno`` is the line in the program text, ``handler`` the handler involved (None when
    not in one), ``findings`` every error found (``restream_kit.planner.checks.Finding``), the first
    of which is the message.
    """

    def __init__(
        self,
        message: str,
        *,
        filename: str | None = None,
        lineno: int | None = None,
        handler: str | None = None,
        findings: list | None = None,
    ):
        super().__init__(message, filename=filename, lineno=lineno)
        self.message = message
        self.handler = handler
        self.findings = list(findings or [])
