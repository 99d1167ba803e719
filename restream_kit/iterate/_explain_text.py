"""How ``explain`` names things for people: states and handlers as the user wrote them, times
as UTC datetimes.

A window ``recips`` is code generated at load time (``restream_kit.compiler.expand_windows``):
states ``recips__recent``, ``recips__n``..., a handler ``recips__close``. Here they are named
back: the state ``recips__recent`` is window ``recips``'s entries, a tumbling window's key
``(key, start)`` is ``(key, start..end)``, and every millisecond time is a datetime.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..model.program import Program
from ..model.windows import Hopping, Tumbling, Window

__all__ = ["when", "Names", "explanation_lines"]

#: What each generated state of a window holds, by the suffix after ``<window>__``.
_PARTS = {
    "n": "count",
    "sum": "sum",
    "best": "best value",
    "values": "distinct values",
    "first": "first event",
    "last": "last event",
    "queue": "entries",
    "recent": "entries",
    "avg": "average",
}
#: Lists longer than this show their first and last items only.
_SHOWN = 4


def when(ms: int | None) -> str:
    """``2026-01-01 00:00:19.716 UTC`` for a time in milliseconds since the epoch."""
    if ms is None:
        return "?"
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        return repr(ms)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    millis = int(ms) % 1000
    return f"{text}.{millis:03d} UTC" if millis else f"{text} UTC"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _clock(ms: int, day: str) -> str:
    """A time within the day ``day`` (``YYYY-MM-DD``) without its date, else in full."""
    full = when(ms)
    return full[len(day) + 1 : -4] if full.startswith(day + " ") else full


class Names:
    """Names and values of one program as the user wrote them."""

    def __init__(self, program: Program | None, day_of: int | None = None):
        self.windows: dict[str, Window] = dict(program.windows) if program is not None else {}
        #: Times on this day (the explained row's) are shown without their date.
        self.day = when(day_of)[:10] if day_of is not None else ""

    def window_of(self, name: str) -> tuple[str, Window, str] | None:
        """(window, its declaration, the suffix) when ``name`` is a window's generated name."""
        head, sep, tail = name.partition("__")
        while sep:
            if head in self.windows:
                return head, self.windows[head], tail
            more, sep, tail = tail.partition("__")
            head = f"{head}__{more}"
        return None

    def state(self, name: str) -> tuple[str, str | None]:
        """(the name the user wrote, what part of a window it is, or None)."""
        found = self.window_of(name)
        if found is None:
            return name, None
        window, decl, suffix = found
        part = _PARTS.get(suffix, suffix)
        if suffix == "best":
            part = f"{decl.agg} value"
        return window, part

    def handler(self, name: str | None) -> str:
        """``handler 'flag'``, or ``the close of window 'clicks'`` for generated code."""
        if name is None:
            return "a timed write (at=)"
        found = self.window_of(name)
        if found is not None and found[2] == "close":
            return f"the close of window {found[0]!r}"
        if found is not None:
            return f"window {found[0]!r}"
        return f"handler {name!r}"

    def reference(self, state: str, key: Any) -> str:
        """``seen[856]``, ``clicks[(856, 00:00:00..00:01:00)] count``, ``total`` (a Value)."""
        user, part = self.state(state)
        found = self.window_of(state)
        if found is not None:
            shown = self.window_key(found[1], key)
        elif key == ():
            return user
        else:
            shown = repr(key)
        return f"{user}[{shown}]" + (f" {part}" if part else "")

    def window_key(self, decl: Window, key: Any) -> str:
        if isinstance(decl, (Tumbling, Hopping)) and isinstance(key, tuple) and len(key) == 2:
            inner, start = key
            if isinstance(start, int):
                end = start + decl.width
                return f"({inner!r}, {self.time(start)}..{self.time(end)})"
        return repr(key)

    def time(self, ms: int) -> str:
        return _clock(ms, self.day) if self.day else when(ms)

    def value(self, state: str, value: Any) -> str:
        """A state's value as text: a window's times as datetimes, its entries listed."""
        found = self.window_of(state)
        suffix = found[2] if found is not None else None
        if suffix is None or (value is None and suffix not in ("first", "last")):
            return repr(value)
        if suffix in ("first", "last"):
            return self.time(value) if isinstance(value, int) else "none (no open session)"
        if suffix in ("queue", "recent") and isinstance(value, tuple):
            items = [self._entry(p) for p in value]
            if len(items) > _SHOWN:
                items = [items[0], "...", items[-1]]
            listed = f": {', '.join(items)}" if items else ""
            return _count(len(value), "entry", "entries") + listed
        return repr(value)

    def field(self, handler: str, name: str, value: Any) -> str:
        """A row's field as text: a closing window's ``start`` and ``end`` as times."""
        found = self.window_of(handler)
        if found is not None and name in ("start", "end") and isinstance(value, int):
            return self.time(value)
        return repr(value)

    def fields(self, handler: str, fields: dict[str, Any]) -> str:
        return "{" + ", ".join(f"{k}: {self.field(handler, k, v)}" for k, v in fields.items()) + "}"

    def _entry(self, pair: Any) -> str:
        if isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], int):
            return f"{pair[1]!r} at {self.time(pair[0])}"
        return repr(pair)

    def contrast(self, state: str, mine: Any, theirs: Any, labels: tuple[str, str]) -> str:
        """What one collection has that the other lacks: `` (only in v2: 705 at 00:00:04)``."""
        kinds = (tuple, frozenset, set)
        if not (isinstance(mine, kinds) and isinstance(theirs, kinds)):
            return ""
        found = self.window_of(state)
        entries = found is not None and found[2] in ("queue", "recent")
        parts = []
        for label, one, other in ((labels[0], mine, theirs), (labels[1], theirs, mine)):
            extra = [x for x in one if x not in other]
            shown = [self._entry(x) if entries else repr(x) for x in extra[:_SHOWN]]
            if len(extra) > _SHOWN:
                shown.append(f"{len(extra) - _SHOWN} more")
            if shown:
                parts.append(f"only in {label}: {', '.join(shown)}")
        return f" ({'; '.join(parts)})" if parts else ""


# -- the text of an explanation ---------------------------------------------------------------


def _where(lsn: int, seq: int) -> str:
    return f"lsn {lsn}" + (f" (scheduled event {seq})" if seq else "")


def explanation_lines(ex: Any, names: Names) -> list[str]:
    """The lines of ``Explanation.text()``: the row, its emitter, each read and, for a read
    that differs, the moment the two runs' values first differed and the writes there."""
    here, there = ex.labels if ex.side == "a" else ex.labels[::-1]
    row = ex.row
    if not ex.other_has_row:
        head = f"row {row} is in {here}, not in {there}"
    elif ex.other_fields != ex.fields:
        keys = [k for k in {**ex.fields, **ex.other_fields} if
                ex.fields.get(k) != ex.other_fields.get(k)]  # fmt: skip
        changed = "; ".join(
            f"{k} {names.field(ex.handler, k, ex.fields.get(k))} in {here}, "
            f"{names.field(ex.handler, k, ex.other_fields.get(k))} in {there}"
            for k in keys
        )
        head = f"row {row} is in {here} and, with other fields, in {there}: {changed}"
    else:
        head = f"row {row} is in {here} and in {there}, the same: nothing differs"
    line = f" line {ex.line}" if ex.line else ""
    lines = [
        head,
        f"  emitted by {names.handler(ex.handler)}{line} on {_where(row.lsn, row.seq)}"
        f" at {when(ex.ts)}: {names.fields(ex.handler, ex.fields)}",
    ]
    if not ex.reads:
        lines.append("  the handler read no state on that run")
    shown: list = []  # the first differences already told, by (state, key)
    for r in ex.reads:
        lines += _read_lines(r, names, here, there, shown)
    if ex.code:
        lines.append("  every read was the same in both runs: the difference is in the code")
        lines += [f"    {run} line {n}: {text}" for run, n, text in ex.code]
    elif ex.differs and not any(r.differs for r in ex.reads):
        lines.append("  every read was the same in both runs, and so are the programs")
    return lines


def _read_lines(r: Any, names: Names, here: str, there: str, shown: list) -> list[str]:
    internal = r.internal or r.state
    at = f" (line {r.line})" if r.line else ""
    what = f"  read {names.reference(internal, r.key)}{at}: "
    mine, theirs = names.value(internal, r.value), names.value(internal, r.baseline_value)
    if not r.differs:
        return [what + f"{mine} in both [same]"]
    where = f" in {there}" + ("" if r.paired else " after that event (it made no such read)")
    extra = names.contrast(internal, r.value, r.baseline_value, (here, there))
    lines = [what + f"{mine} in {here}, {theirs}{where}{extra} [differs]"]
    d = r.first_difference
    if d is None:
        lines.append(
            "    the two runs' values never differed after an event before: "
            "they differ within this event's own handlers"
        )
        return lines
    if (internal, r.key, d) in shown:
        return [*lines, "    first differed as said above"]
    shown.append((internal, r.key, d))
    moment = (
        f"when timed writes (at=) came due at {when(d.ts)}"
        if d.timed
        else f"after {_where(d.lsn, d.seq)} at {when(d.ts)}"
    )
    extra = names.contrast(internal, d.value, d.baseline_value, (here, there))
    lines.append(
        f"    first differed {moment}: {names.value(internal, d.value)} in {here}, "
        f"{names.value(internal, d.baseline_value)} in {there}{extra}"
    )
    for label, writes in ((here, d.writes), (there, d.baseline_writes)):
        for w in writes:
            who = names.handler(w.handler) + (f" line {w.line}" if w.line else "")
            if w.due:
                who = f"a timed write (at=) made by {who} on {_where(w.lsn, w.seq)}"
            last = w is writes[-1] and w.value == (d.value if label == here else d.baseline_value)
            if w.deleted:
                lines.append(f"      {label}: {who} deleted it")
                continue
            value = "it" if last else names.value(internal, w.value)
            lines.append(f"      {label}: {who} wrote {value}")
        if not writes:
            lines.append(f"      {label}: nothing wrote {names.reference(internal, r.key)} there")
    return lines
