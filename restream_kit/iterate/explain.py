"""Explain one difference between two runs: why v2 emitted a row that v1 did not (or back).

``explain(v2, v1, row, log=...)`` replays both programs serially over the log with their
state traced (see ``docs/iterate.md`` and :mod:`._explain_trace`): first to find the row and
capture the state reads of the handler run that emitted it, in both runs, exactly as the
handlers made them (state, key, line, value); then to trace every write to those keys up to
that event. The answer is recomputed, so it is exact: no history is guessed. The runs may
come from any engine: their results are the serial engine's, row for row.
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from ..io.catalog import Catalog
from ..io.log import Log
from ..io.result import Result
from ..model.errors import RestreamError
from ..model.program import Program
from ._explain_text import Names, explanation_lines, when
from ._explain_trace import TIMED, Read, Write, event_order, traced_replay

__all__ = [
    "explain",
    "Explanation",
    "StateRead",
    "FirstDifference",
    "Write",
    "parse_row",
    "RowRef",
]


@dataclass(frozen=True)
class RowRef:
    """A row as the diff identifies it: table, event (lsn, seq) and n, its rank in the event."""

    table: str
    lsn: int
    seq: int = 0
    n: int = 0

    def __str__(self) -> str:
        return f"{self.table}:{self.lsn}:{self.seq}:{self.n}"


def parse_row(text: str | RowRef) -> RowRef:
    """``TABLE:LSN:SEQ:N`` (or ``TABLE:LSN``, seq and n 0) as a :class:`RowRef`."""
    if isinstance(text, RowRef):
        return text
    parts = str(text).split(":")
    table, numbers = (
        (":".join(parts[:-3]), parts[-3:]) if len(parts) >= 4 else (parts[0], parts[1:])
    )
    try:
        values = [int(x) for x in numbers]
    except ValueError:
        values = []
    if not table or len(values) not in (1, 3):
        raise RestreamError(
            f"row {text!r}: expected TABLE:LSN:SEQ:N as the diff prints it (or TABLE:LSN)"
        )
    return RowRef(table, *values) if len(values) == 3 else RowRef(table, values[0])


@dataclass(frozen=True)
class FirstDifference:
    """The earliest moment after which ``state[key]`` differed between the runs: an event
    (``lsn``, ``seq``), or, ``timed`` True, timed writes (``at=``) coming due at ``ts``."""

    ts: int
    lsn: int
    seq: int
    value: Any
    baseline_value: Any
    writes: tuple[Write, ...]  # at that moment, in the run explained
    baseline_writes: tuple[Write, ...]
    timed: bool = False


@dataclass(frozen=True)
class StateRead:
    """A read the emitting run made, with the value the other run read at the same place.

    ``state`` is the name the user wrote (a window's, for its generated states: ``internal``
    is then the generated one, ``part`` what it holds). ``paired`` is False when the other
    run made no such read there: ``baseline_value`` is then its value after that event.
    """

    state: str
    key: Any
    line: int | None
    value: Any
    baseline_value: Any
    first_difference: FirstDifference | None
    internal: str = ""
    part: str | None = None
    paired: bool = True

    @property
    def differs(self) -> bool:
        return self.value != self.baseline_value


@dataclass
class Explanation:
    """Why one row differs: who emitted it, what it read, where the reads first diverged.

    ``other_fields`` are the fields of the same row in the other run (None when it has no
    such row); ``code`` holds both versions of the lines that differ when no read did.
    """

    row: RowRef
    side: str  # the run that has the row: "a" or "b"
    labels: tuple[str, str]
    handler: str
    line: int | None
    fields: dict[str, Any]
    other_has_row: bool
    reads: list[StateRead] = field(default_factory=list)
    other_fields: dict[str, Any] | None = None
    ts: int | None = None
    code: list[tuple[str, int, str]] = field(default_factory=list)
    names: Names | None = field(default=None, repr=False, compare=False)

    @property
    def differs(self) -> bool:
        """Whether the row differs at all (absent from the other run, or other fields)."""
        return not self.other_has_row or self.other_fields != self.fields

    def to_dict(self) -> dict[str, Any]:
        """The causal chain as plain data, for the notebook and ``--json``."""
        names = self._names()

        def write(w: Write) -> dict:
            return {"ts": w.ts, "time": when(w.ts), "lsn": w.lsn, "seq": w.seq,
                    "handler": w.handler, "line": w.line, "value": w.value,
                    "timed": w.due}  # fmt: skip

        def first(r: StateRead) -> dict | None:
            d = r.first_difference
            if d is None:
                return None
            return {"ts": d.ts, "time": when(d.ts), "lsn": d.lsn, "seq": d.seq,
                    "timed": d.timed, "value": d.value, "other_value": d.baseline_value,
                    "writes": [write(w) for w in d.writes],
                    "other_writes": [write(w) for w in d.baseline_writes]}  # fmt: skip

        return {
            "row": str(self.row),
            "time": when(self.ts),
            "differs": self.differs,
            "emitted_by": {
                "run": self.labels[0 if self.side == "a" else 1],
                "handler": self.handler,
                "line": self.line,
            },  # fmt: skip
            "fields": self.fields,
            "other_run_has_row": self.other_has_row,
            "other_fields": self.other_fields,
            "reads": [
                {
                    "state": r.state,
                    "part": r.part,
                    "internal_state": r.internal or r.state,
                    "key": r.key,
                    "shown": names.reference(r.internal or r.state, r.key),
                    "line": r.line,
                    "value": r.value,
                    "other_value": r.baseline_value,
                    "paired": r.paired,
                    "differs": r.differs,
                    "first_difference": first(r),
                }  # fmt: skip
                for r in self.reads
            ],
            "code": [{"run": run, "line": line, "text": text} for run, line, text in self.code],
        }

    def _names(self) -> Names:
        return self.names or Names(None)

    def text(self) -> str:
        """The causal chain as lines of text (what ``restream diff --explain`` prints)."""
        return "\n".join(explanation_lines(self, self._names()))

    def __repr__(self) -> str:
        return self.text()


# -- what the sides are ---------------------------------------------------------------------


def _resolve(side: Any, log: Log | None) -> tuple[Program, Log | None, str]:
    """A program, the log its run replayed (None when unknown) and a label.

    ``side`` is a ``Program``; a ``Result`` of ``replay`` (or of a cell); a notebook cell's
    run (``CellRun``, or a ``BackgroundRun``, waited for); a ``.py`` path or program source;
    or the name of a run in the catalog (a cell's name, ``--name``)."""
    if isinstance(side, Program):
        return side, log, side.name
    if isinstance(side, Result):
        if side.program is None:
            raise RestreamError(
                "this Result does not say which program made it (a result loaded from the "
                "catalog or split from a sweep): give the program, the cell or the run's name"
            )
        return side.program, side.log, side.program.name
    if not isinstance(side, (str, Path)):
        return _resolve_cell(side, log)
    text = str(side)
    if "\n" in text or text.endswith(".py") or Path(text).is_file():
        program = Program.load(side)
        return program, log, program.name
    return _resolve_run(text, log)


def _resolve_cell(side: Any, log: Log | None) -> tuple[Program, Log | None, str]:
    """A notebook cell's run: what ``%%restream NAME`` binds to ``NAME``."""
    if hasattr(side, "variants"):
        raise RestreamError(
            f"{getattr(side, 'name', 'this cell')} is a sweep: explain one variant's result "
            "against another's (sweep_cell.variant(i).result), or name two runs"
        )
    if not hasattr(side, "program") and callable(getattr(side, "wait", None)):
        side = side.wait()  # a cell still replaying (--background)
    program, cell_log = getattr(side, "program", None), getattr(side, "log", None)
    if not isinstance(program, Program):
        result = getattr(side, "result", None)
        if isinstance(result, Result):
            return _resolve(result, log)
        raise RestreamError(
            f"cannot explain {type(side).__name__} objects: give a run's name, a program, "
            "a Result, or a %%restream cell"
        )
    return (
        program,
        cell_log if isinstance(cell_log, Log) else log,
        getattr(side, "name", program.name),
    )


def _resolve_run(name: str, log: Log | None) -> tuple[Program, Log | None, str]:
    """A run of the catalog by name, with its program and (unless given) its own log."""
    catalog = Catalog()
    record = catalog.latest(name, log_fingerprint=log.fingerprint if log is not None else None)
    record = record or catalog.latest(name)
    if record is None:
        raise RestreamError(
            f"{name}: not a program file and no run called {name!r} in the catalog ({catalog.home})"
        )
    program = Program.from_source(catalog.program_source(record.run_id), name=name)
    if log is None:
        labels = json.loads(catalog.manifest(record.run_id).get("log_sources", "[]"))
        try:
            log = Log(labels if len(labels) != 1 else labels[0])
        except RestreamError as exc:
            raise RestreamError(
                f"run {name!r}: its log ({', '.join(labels)}) cannot be read again ({exc}); "
                "give the log (--log)"
            ) from None
        if log.fingerprint != record.log_fingerprint:
            raise RestreamError(f"run {name!r}: its log has changed since; give the log (--log)")
    return program, log, f"{name} ({record.run_id})"


# -- comparing the traces -------------------------------------------------------------------


def _find_row(rows: dict, ref: RowRef) -> tuple | None:
    n = 0
    for row in rows.get(ref.table, ()):
        lsn, _ts, _handler, seq, _fields = row
        if lsn == ref.lsn and seq == ref.seq:
            if n == ref.n:
                return row
            n += 1
    return None


def _event_ts(log: Log, lsn: int) -> int | None:
    """The time of log event ``lsn`` (None when the log has none)."""
    at = pc.index(log.table.column("lsn"), lsn).as_py()
    return None if at < 0 else log.table.column("ts")[at].as_py()


def _value_after(trace: list[Write], order: tuple, default: Any) -> Any:
    value = default
    for w in trace:
        if w.order <= order:
            value = w.value
    return value


def _first_difference(
    mine: list[Write], theirs: list[Write], until: tuple, defaults: tuple[Any, Any]
) -> FirstDifference | None:
    """The first moment (up to ``until``) after which the two write traces' values differ."""
    a = sorted((w for w in mine if w.order <= until), key=lambda w: w.order)
    b = sorted((w for w in theirs if w.order <= until), key=lambda w: w.order)
    va, vb = defaults
    ia = ib = 0
    for moment in sorted({w.order for w in a + b}):
        at_a, at_b = [], []
        while ia < len(a) and a[ia].order <= moment:
            va = a[ia].value
            at_a.append(a[ia])
            ia += 1
        while ib < len(b) and b[ib].order <= moment:
            vb = b[ib].value
            at_b.append(b[ib])
            ib += 1
        if va != vb:
            ts, phase, lsn, seq = moment
            return FirstDifference(
                ts, lsn, seq, va, vb, tuple(at_a), tuple(at_b), timed=phase == TIMED
            )
    return None


def _paired(mine: list[Read], theirs: list[Read]) -> list[tuple[Read, Read | None]]:
    """Each read of ``mine`` with the other run's read of the same state and key, the k-th
    with the k-th: a window's add reads its state before writing and its value after."""
    by_key: dict[tuple, list[Read]] = defaultdict(list)
    for r in theirs:
        by_key[(r.state, r.key)].append(r)
    seen: dict[tuple, int] = defaultdict(int)
    out = []
    for r in mine:
        k = (r.state, r.key)
        others = by_key.get(k, [])
        out.append((r, others[seen[k]] if seen[k] < len(others) else None))
        seen[k] += 1
    return out


def _state_reads(
    pairs: list[tuple[Read, Read | None]],
    writes: tuple[dict, dict],
    programs: tuple[Program, Program],
    until: tuple,
    names: Names,
) -> list[StateRead]:
    out: list[StateRead] = []
    for mine, other in pairs:
        k = (mine.state, mine.key)
        decl_theirs = programs[1].states.get(mine.state)
        default_theirs = decl_theirs.default if decl_theirs is not None else None
        if other is not None:
            theirs = other.value
        else:
            theirs = _value_after(writes[1].get(k, []), until, default_theirs)
        first = None
        if mine.value != theirs:
            defaults = (programs[0].states[mine.state].default, default_theirs)
            first = _first_difference(writes[0].get(k, []), writes[1].get(k, []), until, defaults)
        user, part = names.state(mine.state)
        read = StateRead(user, mine.key, mine.line, mine.value, theirs, first,
                         mine.state, part, other is not None)  # fmt: skip
        if read not in out:
            out.append(read)
    return out


def _code(programs: tuple[Program, Program], labels: tuple[str, str]) -> list[tuple]:
    """Both versions of the lines where the programs' texts differ (a few of each)."""
    a, b = (p.source.splitlines() for p in programs)
    out: list[tuple[str, int, str]] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        out += [(labels[0], i + 1, a[i].strip()) for i in range(i1, min(i2, i1 + 3))]
        out += [(labels[1], j + 1, b[j].strip()) for j in range(j1, min(j2, j1 + 3))]
        if len(out) >= 12:
            break
    return out


def _sides(
    a: Any, b: Any, log: Any, labels: tuple[str, str] | None
) -> tuple[tuple[Program, Program], Log, tuple[str, str]]:
    """Both sides' programs, the log to replay them over and their labels."""
    log = None if log is None else (log if isinstance(log, Log) else Log(log))
    prog_a, log_a, label_a = _resolve(a, log)
    prog_b, log_b, label_b = _resolve(b, log or log_a)
    if labels is None and label_a == label_b:
        labels = ("A", "B")
    labels = labels or (label_a, label_b)
    if log is None and log_a is not None and log_b is not None:
        if log_a.fingerprint != log_b.fingerprint:
            raise RestreamError(f"{labels[0]} and {labels[1]} replayed different logs")
    log = log or log_a or log_b
    if log is None:
        raise RestreamError("explain needs the log the runs replayed (log=...)")
    return (prog_a, prog_b), log, labels


# -- explain ----------------------------------------------------------------------------------


def explain(
    a: Any,
    b: Any,
    row: str | RowRef,
    *,
    log: Any = None,
    labels: tuple[str, str] | None = None,
) -> Explanation:
    """Why ``row`` differs between run ``a`` (say v2) and run ``b`` (say v1, the baseline).

    ``a`` and ``b`` are each a ``Result`` of ``replay`` (on any engine), a notebook cell's run
    (what ``%%restream NAME`` binds to ``NAME``), a run name in the catalog (its program and
    log come from there), or a program (``Program``, a ``.py`` path or source) replayed over
    ``log``. ``row`` is ``TABLE:LSN:SEQ:N`` as the diff prints it; ``labels`` name the runs in
    the text. Both programs are replayed serially with their state traced, so the values
    reported are the ones the handlers read. The same program on both sides explains that
    nothing differs.
    """
    ref = parse_row(row)
    (prog_a, prog_b), log, (label_a, label_b) = _sides(a, b, log, labels)
    target = (ref.lsn, ref.seq)
    # A log event's rows are all made once that event has run: stop there.
    stop = _event_ts(log, ref.lsn) if ref.seq == 0 else None
    if ref.seq == 0 and stop is None:
        raise RestreamError(f"row {ref}: the log has no event with lsn {ref.lsn}")
    traces = (
        traced_replay(prog_a, log, target=target, stop_after=stop),
        traced_replay(prog_b, log, target=target, stop_after=stop),
    )
    found = (_find_row(traces[0].rows, ref), _find_row(traces[1].rows, ref))
    if found == (None, None):
        raise RestreamError(f"row {ref}: neither {label_a} nor {label_b} emitted it")
    i = 0 if found[0] is not None else 1
    programs = (prog_a, prog_b) if i == 0 else (prog_b, prog_a)
    mine, theirs = traces[i], traces[1 - i]
    emitted = found[i]
    handler, ts = emitted[2], emitted[1]
    pairs = _paired(
        [r for r in mine.reads if r.handler == handler],
        [r for r in theirs.reads if r.handler == handler],
    )
    watched = {(r.state, r.key) for pair in pairs for r in pair if r is not None}
    writes: tuple[dict, dict] = ({}, {})
    if any(other is None or r.value != other.value for r, other in pairs):
        writes = (
            traced_replay(programs[0], log, watched=watched, stop_after=ts).writes,
            traced_replay(programs[1], log, watched=watched, stop_after=ts).writes,
        )
    names = Names(programs[0], day_of=ts)
    until = event_order(ts, ref.lsn, ref.seq)
    reads = _state_reads(pairs, writes, programs, until, names)
    lines = mine.emits.get(ref.table, [])
    other = found[1 - i]
    explanation = Explanation(
        ref,
        "a" if i == 0 else "b",
        (label_a, label_b),
        handler,
        lines[ref.n] if ref.n < len(lines) else None,
        dict(emitted[4]),
        other is not None,
        reads,
        other_fields=None if other is None else dict(other[4]),
        ts=ts,
        names=names,
    )
    if explanation.differs and not any(r.differs for r in reads):
        here = (label_a, label_b) if i == 0 else (label_b, label_a)
        explanation.code = _code(programs, here)
    return explanation
