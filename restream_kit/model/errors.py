"""The errors a user can cause, each rendered as one line naming where the problem is."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

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


# As HandlerError below: a dataclass, but an exception still.
@dataclass(eq=False, repr=False)
class LogError(RestreamError):
    """A log that cannot be read or is not a valid, ordered event log."""

    message: str
    _: KW_ONLY
    path: str | None = None
    column: str | None = None
    row: int | None = None

    def __post_init__(self) -> None:
        parts = [p for p in (self.path, f"column {self.column!r}" if self.column else None) if p]
        if self.row is not None:
            parts.append(f"row {self.row}")
        where = ", ".join(parts)
        super().__init__(f"{where}: {self.message}" if where else self.message)


# A dataclass (its fields declared once), but an exception still: compared and hashed by
# identity, shown as its message.
@dataclass(eq=False, repr=False, kw_only=True)
class HandlerError(RestreamError):
    """A user's handler raised while processing an event."""

    handler: str
    filename: str
    lineno: int | None
    line: str | None
    lsn: int | None
    seq: int
    kind: str
    ts: int
    cause: BaseException
    fields: dict | None = None

    def __post_init__(self) -> None:
        event = f"lsn {self.lsn}" + (f" (scheduled #{self.seq})" if self.seq else "")
        code = f" `{self.line.strip()}`" if self.line else ""
        shown = f" {{{format_fields(self.fields)}}}" if self.fields else ""
        super().__init__(
            f"{self.filename}:{self.lineno}: handler {self.handler!r} raised "
            f"{type(self.cause).__name__}: {self.cause} on {self.kind!r} event {event} "
            f"at ts {self.ts}{shown};{code}"
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
